package nodebeat

import (
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"

	"github.com/ringstream/ringstream/internal/allocs"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// frameSink is a shard.Sender that keeps the last frame sent to each node, and refuses node down.
type frameSink struct {
	last map[uint16][]byte
	down uint16
}

func (s *frameSink) Ring() ring.Ring { return nil }
func (s *frameSink) SendFrame(node uint16, frame []byte) error {
	if node == s.down {
		return shard.ErrLinkDown
	}
	s.last[node] = append(s.last[node][:0], frame...)
	return nil
}
func (s *frameSink) Wake(uint64) {}

func (s *frameSink) SendData(uint16, []byte, []byte, shard.DataSent, uint64) error {
	return errors.New("frameSink: no data frames")
}

type fixedTails []wire.CopyTail

func (f fixedTails) AppendCopyTails(dst []wire.CopyTail) []wire.CopyTail { return append(dst, f...) }

func decodeBeat(t *testing.T, frame []byte) (wire.NodeHeartbeat, []wire.CopyTail) {
	t.Helper()
	h, body, err := wire.ParseFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	m, copies, err := wire.DecodeNodeHeartbeat(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	var out []wire.CopyTail
	for i := range copies.Len() {
		c, err := copies.At(i)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return m, out
}

func TestNodeBeatGroupID_OnShardZeroBelowTheMetadataGroup(t *testing.T) {
	for shards := 1; shards <= 64; shards++ {
		id := GroupID(shards)
		if shard.ShardOf(id, shards) != 0 || id >= shard.MetadataGroupID || id < shard.MetadataGroupID-1<<20 {
			t.Fatalf("%d shards: id %#x", shards, id)
		}
	}
}

func TestNodeBeat_SendsEveryIntervalToEveryMemberAndItself(t *testing.T) {
	tails := fixedTails{{Stream: 9, Incarnation: 1, Epoch: 3, RecordTail: 40, CursorTail: 2, Role: wire.RoleFollower,
		Flags: wire.CopyOwnerSilent}}
	var self []wire.NodeHeartbeat
	b, err := New(Config{Cluster: 42, Node: 2, Shards: 4, To: []uint16{1, 2, 3}, IntervalTicks: 3,
		Copies: tails, Self: func(h *wire.Header, body []byte) {
			m, copies, err := wire.DecodeNodeHeartbeat(h, body)
			if err != nil || copies.Len() != 1 || h.Sender != 2 {
				t.Errorf("own heartbeat: %v, %d copies, from %d", err, copies.Len(), h.Sender)
			}
			self = append(self, m)
		}})
	if err != nil {
		t.Fatal(err)
	}
	sink := &frameSink{last: map[uint16][]byte{}, down: 3}
	b.Attach(sink)
	for tick := range uint64(7) { // heartbeats at ticks 0, 3 and 6
		b.OnTick(tick)
	}
	if len(self) != 3 || self[2].Sequence != 3 || b.Sent() != 6 || b.Failures() != 3 {
		t.Fatalf("self %d, sent %d, failures %d: want 3, 6, 3", len(self), b.Sent(), b.Failures())
	}
	m, copies := decodeBeat(t, sink.last[1])
	if m.Sequence != 3 || m.Flags != 0 || len(copies) != 1 || copies[0] != tails[0] {
		t.Fatalf("heartbeat %+v copies %+v", m, copies)
	}
	b.send(wire.FlagShuttingDown)
	if m, _ := decodeBeat(t, sink.last[1]); m.Flags != wire.FlagShuttingDown || m.Sequence != 4 {
		t.Fatalf("shutdown notice %+v", m)
	}
}

func TestNodeBeat_SteadyStateAllocatesNothing(t *testing.T) {
	b, err := New(Config{Cluster: 42, Node: 1, Shards: 1, To: []uint16{2, 3}, IntervalTicks: 1,
		Copies: fixedTails{{Stream: 1, Incarnation: 1, Epoch: 1, Role: wire.RoleOwner}}})
	if err != nil {
		t.Fatal(err)
	}
	b.Attach(&frameSink{last: map[uint16][]byte{}})
	b.OnTick(0)
	if got := allocs.In(t, 100, func() { b.OnTick(1) }); got != 0 {
		t.Fatalf("%d allocations in 100 heartbeats, want 0", got)
	}
}

func TestNewNodeBeat_RefusesBadConfig(t *testing.T) {
	good := Config{Node: 1, Shards: 1, To: []uint16{1}, IntervalTicks: 1}
	for name, tune := range map[string]func(*Config){
		"node 0":     func(c *Config) { c.Node = 0 },
		"no shards":  func(c *Config) { c.Shards = 0 },
		"interval 0": func(c *Config) { c.IntervalTicks = 0 },
		"no members": func(c *Config) { c.To = nil },
	} {
		cfg := good
		tune(&cfg)
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := New(good); err != nil {
		t.Fatal(err)
	}
}

type fixedFailures []CopyFailure

func (f fixedFailures) AppendCopyFailures(dst []CopyFailure) []CopyFailure { return append(dst, f...) }

// A copy whose log failed is flagged in the heartbeat with its cause, so the controller knows it
// without asking; a failed copy that publishes no tails (it did not open) gets an entry of its own;
// another incarnation of the same stream is not flagged. The heartbeat still allocates nothing.
func TestNodeBeat_FlagsFailedCopies(t *testing.T) {
	tails := fixedTails{
		{Stream: 3, Incarnation: 1, Epoch: 2, RecordTail: 10, Role: wire.RoleOwner},
		{Stream: 9, Incarnation: 2, Epoch: 3, RecordTail: 40, Role: wire.RoleFollower},
	}
	failures := fixedFailures{
		{Stream: 9, Incarnation: 2, Cause: wire.LogFailNoSpace},
		{Stream: 5, Incarnation: 1, Cause: wire.LogFailIO},
		{Stream: 3, Incarnation: 7, Cause: wire.LogFailCorrupt}, // another incarnation of stream 3
	}
	b, err := New(Config{Cluster: 42, Node: 2, Shards: 1, To: []uint16{1}, IntervalTicks: 1,
		Copies: tails, Failures: failures})
	if err != nil {
		t.Fatal(err)
	}
	sink := &frameSink{last: map[uint16][]byte{}}
	b.Attach(sink)
	b.OnTick(0)
	_, got := decodeBeat(t, sink.last[1])
	want := []wire.CopyTail{
		tails[0],
		{Stream: 3, Incarnation: 7, Role: wire.RoleSealed, Flags: wire.CopyLogFailed, Cause: wire.LogFailCorrupt},
		{Stream: 5, Incarnation: 1, Role: wire.RoleSealed, Flags: wire.CopyLogFailed, Cause: wire.LogFailIO},
		{Stream: 9, Incarnation: 2, Epoch: 3, RecordTail: 40, Role: wire.RoleFollower, Flags: wire.CopyLogFailed,
			Cause: wire.LogFailNoSpace},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("copies\n%+v\nwant\n%+v", got, want)
	}
	if n := allocs.In(t, 100, func() { b.OnTick(1) }); n != 0 {
		t.Fatalf("%d allocations in 100 heartbeats with failed copies, want 0", n)
	}
}

func TestLogFailCause_FromErrno(t *testing.T) {
	cases := []struct {
		err  error
		want wire.LogFailCause
	}{
		{fmt.Errorf("segment: group commit: %w", syscall.ENOSPC), wire.LogFailNoSpace},
		{fmt.Errorf("quota: %w", syscall.EDQUOT), wire.LogFailNoSpace},
		{fmt.Errorf("group commit: %w", segment.ErrShortWrite), wire.LogFailNoSpace}, // a file system filling mid-write
		{fmt.Errorf("fdatasync: %w", syscall.EIO), wire.LogFailIO},
		{fmt.Errorf("open: %w", syscall.EROFS), wire.LogFailReadOnly},
		{fmt.Errorf("scan: %w", segment.ErrCorrupt), wire.LogFailCorrupt},
		{errors.New("something else"), wire.LogFailOther},
	}
	for _, c := range cases {
		if got := LogFailCause(c.err); got != c.want {
			t.Errorf("%v: %v, want %v", c.err, got, c.want)
		}
	}
}
