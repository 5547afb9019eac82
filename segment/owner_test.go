package segment

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/ringstream/ringstream/internal/allocs"
)

// logBytes concatenates the .log files of one log directory, in offset order.
func logBytes(t *testing.T, dir string) []byte {
	t.Helper()
	var all []byte
	for _, p := range segFiles(t, dir) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

// The owner encodes each batch once (AppendBatch) into its own buffer, appends those bytes with
// AppendEncoded and sends the same buffer to followers, which store it with AppendEncoded: the
// owner's files, the bytes it sent and each follower's files are identical, and the owner's path
// allocates nothing per batch.
func TestAppend_OwnerSendsTheBytesItAppended(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 4 << 20 // no roll inside the measured loop: a roll allocates once
		ev := &countEvents{}
		owner, _, err := OpenSync(e.r, e.dir, e.cfg, ev)
		if err != nil {
			t.Fatal(err)
		}
		follower, _, err := OpenSync(e.r, e.dir+"-follower", e.cfg, ev)
		if err != nil {
			t.Fatal(err)
		}
		payload := recordPayload(nil, 0, 3, 100)
		var frame, sent []byte
		send := func() {
			h := BatchHeader{BaseOffset: owner.Records().NextOffset(), RecordCount: 3, Epoch: 1}
			frame = AppendBatch(frame[:0], &h, payload) // the one encoding
			if _, err := owner.AppendEncoded(1, frame); err != nil {
				t.Fatal(err)
			}
			if _, err := follower.AppendEncoded(1, frame); err != nil { // "received" as sent
				t.Fatal(err)
			}
			owner.Flush()
			follower.Flush()
			for owner.Records().DurableTail() != owner.Records().NextOffset() ||
				follower.Records().DurableTail() != follower.Records().NextOffset() {
				if err := e.r.Wait(1); err != nil {
					t.Fatal(err)
				}
				e.r.Dispatch()
			}
		}
		for i := 0; i < 100; i++ {
			send()
			sent = append(sent, frame...)
		}
		if got := allocs.In(t, 50, send); got != 0 {
			t.Fatalf("%d allocations in 50 encoded appends, want 0", got)
		}
		e.close(owner)
		e.close(follower)
		got := logBytes(t, filepath.Join(e.dir, "records"))
		if !bytes.Equal(got[:len(sent)], sent) {
			t.Fatalf("the owner's log differs from the bytes it sent")
		}
		if !bytes.Equal(got, logBytes(t, filepath.Join(e.dir+"-follower", "records"))) {
			t.Fatalf("the follower's log differs from the owner's")
		}
	})
}
