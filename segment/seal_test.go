package segment

import (
	"errors"
	"path/filepath"
	"testing"
)

// seal seals c at epoch and drives the ring until SealDone.
func (e *env) seal(c *Copy, epoch uint64) Seal {
	e.t.Helper()
	e.ev.seals = e.ev.seals[:0]
	if err := c.Seal(9, epoch); err != nil {
		e.t.Fatalf("Seal(%d): %v", epoch, err)
	}
	e.until(c, func() bool { return len(e.ev.seals) == 1 })
	s := e.ev.seals[0]
	if s.err != nil || s.tag != 9 {
		e.t.Fatalf("SealDone: tag %d err %v", s.tag, s.err)
	}
	return s.seal
}

// Item 6: equal logs give equal digests; one flipped byte changes the seal digest when it is in
// the active segment, and verify mode reports it when it is in a closed one. A seal reads at most
// the active segment.
func TestSeal_DigestEqualForEqualLogsAndDiffersAfterFlip(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes = 16 << 10
		a := e.open()
		defer e.close(a)
		dirA := e.dir
		e.dir = filepath.Join(filepath.Dir(dirA), "copy-b")
		b := e.open()
		defer e.close(b)
		for _, c := range []*Copy{a, b} {
			e.appendBatches(c, 50, 2, 400, 1)
			e.until(c, func() bool { return !c.Records().Busy() })
		}
		sa, sb := e.seal(a, 2), e.seal(b, 2)
		if sa.Digest != sb.Digest || sa.RecordTail != 100 || sb.RecordTail != 100 {
			t.Fatalf("equal logs: %+v vs %+v", sa, sb)
		}
		if sa.Segments != a.Records().Segments() {
			t.Fatalf("digest covers %d segments, log has %d", sa.Segments, a.Records().Segments())
		}
		segs := a.Records().segs
		active := segs[len(segs)-1]
		if sa.BytesRead != active.size {
			t.Fatalf("seal read %d bytes, active segment holds %d", sa.BytesRead, active.size)
		}

		// A flipped byte in B's active segment changes its seal digest.
		filesB := segFiles(t, filepath.Join(e.dir, "records"))
		flipByte(t, filesB[len(filesB)-1], 100)
		if sb2 := e.seal(b, 2); sb2.Digest == sa.Digest {
			t.Fatalf("digest unchanged after a flipped byte in the active segment")
		}
		// A flipped byte in a closed segment: verify mode names it.
		flipByte(t, filesB[0], 200)
		_, _, err := b.VerifySync()
		if !errors.Is(err, ErrDigestMismatch) {
			t.Fatalf("Verify: %v, want ErrDigestMismatch", err)
		}
		if _, _, err := a.VerifySync(); err != nil {
			t.Fatalf("Verify of the intact copy: %v", err)
		}
	})
}

// Item 10 with the seal: the fence is durable, refuses appends and seals from lower epochs, lets a
// seal at the same epoch take over, and survives reopen. Appends queued before the seal are
// committed and covered by its tails.
func TestSeal_FenceRefusesLowerEpochsAndSurvivesReopen(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		c := e.open()
		e.appendBatches(c, 5, 1, 100, 3)
		h := BatchHeader{RecordCount: 1, Epoch: 3}
		if _, err := c.Append(1, &h, []byte("queued before the seal")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CommitCursor(2, 3, "reader", 4); err != nil {
			t.Fatal(err)
		}
		s := e.seal(c, 5)
		if s.Epoch != 5 || s.RecordTail != 6 || s.CursorTail != 1 {
			t.Fatalf("seal %+v, want epoch 5, record tail 6, cursor tail 1", s)
		}
		h = BatchHeader{RecordCount: 1, Epoch: 4}
		if _, err := c.Append(1, &h, []byte("old owner")); !errors.Is(err, ErrFenced) {
			t.Fatalf("append from epoch 4 after a seal at 5: %v", err)
		}
		if _, err := c.CommitCursor(2, 4, "reader", 5); !errors.Is(err, ErrFenced) {
			t.Fatalf("cursor from epoch 4 after a seal at 5: %v", err)
		}
		if err := c.Seal(1, 4); !errors.Is(err, ErrFenced) {
			t.Fatalf("seal at 4 after 5: %v", err)
		}
		if err := c.AppendEpochSync(EpochEntry{Epoch: 4}); !errors.Is(err, ErrFenced) {
			t.Fatalf("role change to 4 after a seal at 5: %v", err)
		}
		if again := e.seal(c, 5); again.Digest != s.Digest {
			t.Fatalf("a seal at the same epoch changed the digest")
		}
		e.close(c)
		c, rep := e.openReport()
		defer e.close(c)
		if rep.Fence != 5 || c.FenceEpoch() != 5 {
			t.Fatalf("fence after reopen %d/%d, want 5", rep.Fence, c.FenceEpoch())
		}
		if _, err := c.Append(1, &h, []byte("old owner")); !errors.Is(err, ErrFenced) {
			t.Fatalf("append from epoch 4 after reopen: %v", err)
		}
		h.Epoch = 5
		if _, err := c.Append(1, &h, []byte("new owner")); err != nil {
			t.Fatalf("append at the fence epoch: %v", err)
		}
		e.syncRecords(c)
		if c.Records().DurableTail() != 7 {
			t.Fatalf("tail %d", c.Records().DurableTail())
		}
	})
}

// The fence file keeps the previous value when the newest slot is torn.
func TestFence_TornSlotFallsBackToPrevious(t *testing.T) {
	var b [2 * fenceSlotSize]byte
	encodeFenceSlot(b[fenceSlotSize:], 1, 7)
	encodeFenceSlot(b[:fenceSlotSize], 2, 9)
	if g, ep := decodeFence(b[:]); g != 2 || ep != 9 {
		t.Fatalf("got gen %d epoch %d", g, ep)
	}
	b[10] ^= 1 // tear generation 2's slot
	if g, ep := decodeFence(b[:]); g != 1 || ep != 7 {
		t.Fatalf("after a torn slot: gen %d epoch %d, want 1 and 7", g, ep)
	}
	if g, ep := decodeFence(b[:5]); g != 0 || ep != 0 {
		t.Fatalf("short file: gen %d epoch %d", g, ep)
	}
}

// A role change recorded at or past the fence lifts it for records: the copy then follows that
// epoch's owner, which sends older epochs' records to a follower catching up after its seal. Before
// the role change, and after a reopen without one, the fence still refuses them; after a reopen with
// one, they are taken.
func TestSeal_RoleChangeAtTheFenceTakesOlderRecords(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		c := e.open()
		if err := c.AppendEpochSync(EpochEntry{Epoch: 1}); err != nil {
			t.Fatal(err)
		}
		e.appendBatches(c, 2, 1, 100, 1)
		e.seal(c, 2)
		h := BatchHeader{RecordCount: 1, Epoch: 1}
		if _, err := c.Append(1, &h, []byte("epoch 1, fenced")); !errors.Is(err, ErrFenced) {
			t.Fatalf("append from epoch 1 after a seal at 2: %v", err)
		}
		e.close(c)
		c = e.open()
		if _, err := c.Append(1, &h, []byte("epoch 1, fenced")); !errors.Is(err, ErrFenced) {
			t.Fatalf("append from epoch 1 after reopen: %v", err)
		}
		if err := c.AppendEpochSync(EpochEntry{Epoch: 2, RecordStart: 2}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Append(1, &h, []byte("epoch 1 from the new owner")); err != nil {
			t.Fatalf("append from epoch 1 after the role change at 2: %v", err)
		}
		e.syncRecords(c)
		e.close(c)
		c = e.open()
		defer e.close(c)
		h.BaseOffset = 3
		if _, err := c.Append(1, &h, []byte("after reopen")); err != nil {
			t.Fatalf("append from epoch 1 after reopen with the role change: %v", err)
		}
		e.syncRecords(c)
		if tail := c.Records().DurableTail(); tail != 4 {
			t.Fatalf("tail %d, want 4", tail)
		}
	})
}
