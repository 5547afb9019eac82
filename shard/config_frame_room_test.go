package shard

import (
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// TestConfig_FrameRoom: what SendFrame can take is the outbox less the room of the tick's batches,
// the defaults filled in (at the default 4 MiB: 16,384 Commit entries and 32,768 replies kept).
func TestConfig_FrameRoom(t *testing.T) {
	want := 4<<20 - (2*wire.HeaderSize + 16384*wire.CommitEntrySize + 32768*wire.CommitReplyEntrySize)
	if got := (Config{}).FrameRoom(); got != want {
		t.Fatalf("default frame room %d, want %d", got, want)
	}
	small := Config{OutboxBytes: 1 << 20, GroupsPerShardMax: 100, ReplyOutboxEntries: 100}
	if got, want := small.FrameRoom(), 1<<20-(2*wire.HeaderSize+100*wire.CommitEntrySize+100*wire.CommitReplyEntrySize); got != want {
		t.Fatalf("frame room %d, want %d", got, want)
	}
}
