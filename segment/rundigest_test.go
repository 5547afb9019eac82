package segment

import (
	"testing"
)

// A segment closed by a roll gets its digest from the bytes the log queued into it: no byte is read
// back for it, and the digest is the file's (VerifySync hashes the files and compares, in memory and
// after a reopen from the sidecars). A segment that was open with bytes in it (a reopen) or that a
// cut shortened is read back when it closes, and its digest is right too.
func TestDigest_RolledSegmentsHashedAsQueued(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		const rec = 1000
		e.cfg.SegmentBytes = 8 << 10
		e.cfg.PrewriteBytes = 4 << 10
		c := e.open()
		e.appendBatches(c, 40, 1, rec, 1)
		e.until(c, func() bool { return !c.Records().Busy() })
		if n := c.Records().Segments(); n < 4 {
			t.Fatalf("%d segments, want several rolls", n)
		}
		if got := c.Records().DigestBytesRead(); got != 0 {
			t.Fatalf("closing digests read %d bytes back, want 0 (hashed as queued)", got)
		}
		verify := func(when string) {
			t.Helper()
			if _, err := c.Records().VerifySync(); err != nil {
				t.Fatalf("%s: %v", when, err)
			}
		}
		verify("after the rolls")

		// A cut inside a closed segment makes it active again, shorter; refilled with batches of the
		// same size it closes at the size it had, and its old running digest is no longer its digest.
		segs := c.Records().segs
		if !segs[1].runKnown {
			t.Fatalf("the second segment has no running digest")
		}
		if err := c.CutSync(segs[1].base+2, 0); err != nil {
			t.Fatal(err)
		}
		e.appendBatches(c, 12, 1, rec, 1)
		e.until(c, func() bool { return !c.Records().Busy() })
		if c.Records().DigestBytesRead() == 0 {
			t.Fatalf("the segment a cut shortened closed without being read back")
		}
		verify("after a cut and a roll")
		e.close(c)

		c = e.open() // the active segment opens with bytes the running digest never saw
		verify("after a reopen, against the sidecars")
		e.appendBatches(c, 10, 1, rec, 1)
		e.until(c, func() bool { return !c.Records().Busy() })
		if c.Records().DigestBytesRead() == 0 {
			t.Fatalf("the segment open with bytes in it closed without being read back")
		}
		verify("after a roll of the reopened segment")
		e.close(c)
		c = e.open()
		verify("after the last reopen")
		e.close(c)
	})
}
