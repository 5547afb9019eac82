package segment

import (
	"testing"
	"time"

	"github.com/ringstream/ringstream/internal/allocs"
)

// Config.CommitObserver hears each successful group commit of the record log once, with a positive
// duration, after its appends became durable, and the observed commit path allocates nothing.
func TestCommitObserver_HearsEachGroupCommit(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		e.cfg.SegmentBytes, e.cfg.IndexIntervalBytes = 64<<20, 4<<10 // no roll in the measured groups
		var commits int
		var total time.Duration
		e.cfg.CommitObserver = func(log LogKind, d time.Duration) {
			if log == RecordLog {
				commits++
				total += d
			}
		}
		ev := &countEvents{}
		c, _, err := OpenSync(e.r, e.dir, e.cfg, ev)
		if err != nil {
			t.Fatal(err)
		}
		defer e.close(c)
		payload := make([]byte, 1024)
		h := BatchHeader{RecordCount: 1, Epoch: 1}
		group := func() {
			for range 4 {
				if _, err := c.Append(1, &h, payload); err != nil {
					t.Fatal(err)
				}
			}
			c.Flush()
			e.syncRecords(c)
		}
		for i := range 3 {
			group()
			if commits != i+1 || ev.appends != 4*(i+1) {
				t.Fatalf("after group %d: %d commits observed, %d appends acknowledged", i+1, commits, ev.appends)
			}
		}
		if total <= 0 {
			t.Fatalf("observed commit time %v, want above 0", total)
		}
		for range 20 {
			group() // warm up
		}
		if got := allocs.In(t, 100, group); got != 0 {
			t.Fatalf("%d allocations in 100 observed groups, want 0", got)
		}
	})
}
