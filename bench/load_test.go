package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringstream/ringstream/client"
)

// A bench batch of N records is full at N records: the client Producer is told the count, and its
// byte bound holds N records as the client encodes them (up to 1 MiB), for record sizes on both sides
// of a length prefix's byte boundary. A bound of N length-prefixed values (the record format before
// FormatRecords) is smaller than one FormatRecords record and made every --batch 1 produce fail.
func TestProducerConfigBatchIsNRecords(t *testing.T) {
	for _, size := range []int{16, 127, 128, 1024, 16383, 16384} {
		for _, batch := range []int{1, 2, 16, 64} {
			p := &producer{stream: "s", cfg: &Config{RecordSize: size, Batch: batch}}
			pc := p.producerConfig(client.CodecNone)
			if pc.BatchRecords != batch {
				t.Fatalf("size %d batch %d: BatchRecords %d, want %d", size, batch, pc.BatchRecords, batch)
			}
			if want := min(client.BatchBytesFor(batch, size), 1<<20); pc.BatchBytes != want {
				t.Fatalf("size %d batch %d: BatchBytes %d, want %d (%d records as the client encodes them)",
					size, batch, pc.BatchBytes, want, batch)
			}
		}
	}
}

// fakeAppender logs the calls appendUntilError makes, and ends the load (cancel) after stop appends.
type fakeAppender struct {
	calls   []string
	appends int
	stop    int
	cancel  context.CancelFunc
}

func (f *fakeAppender) Append(context.Context, []byte) error {
	f.calls = append(f.calls, "append")
	if f.appends++; f.appends >= f.stop {
		f.cancel()
	}
	return nil
}

func (f *fakeAppender) Flush(context.Context) error {
	f.calls = append(f.calls, "flush")
	return nil
}

// In a closed loop a bench producer waits for each batch's confirm (Flush) before it appends the next,
// so that it never has more than one batch unconfirmed: --batch 1 --in-flight 1 is one record at a
// time. An open loop (--rate) never waits for a confirm.
func TestClosedLoopConfirmsEachBatchBeforeTheNext(t *testing.T) {
	for _, c := range []struct {
		name  string
		rate  float64
		batch int
		want  string
	}{
		{"closed, batch 1", 0, 1, "append flush append flush append flush"},
		{"closed, batch 2", 0, 2, "append append flush append"},
		{"open, batch 1", 100000, 1, "append append append"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p := &producer{cfg: &Config{RecordSize: 64, Batch: c.batch}, pad: newPad(64 - recordHeaderBytes)}
			f := &fakeAppender{stop: 3, cancel: cancel}
			pacer := newPacer(time.Now(), c.rate)
			_ = p.appendUntilError(ctx, f, make([]byte, 64), pacer)
			if got := strings.Join(f.calls, " "); got != c.want {
				t.Fatalf("calls %q, want %q", got, c.want)
			}
		})
	}
}

// An open loop's pacer waits on a Go timer only until pacerCoarse before each due time and sleeps the
// rest precisely (a Go timer fires up to a millisecond late when the process is idle, which the
// latency of --rate runs measured): with a timer 1.5 ms late, the precise sleep gets the last 0.5 ms;
// with a timer later than pacerCoarse, or a due time already past, nothing more is waited. The due
// times are the schedule's either way.
func TestPacerSleepsTheLastStretchPrecisely(t *testing.T) {
	for _, c := range []struct {
		name       string
		timerLate  time.Duration
		wantTimer  time.Duration // 0: not checked
		wantSleeps []time.Duration
	}{
		{"timer 1.5 ms late", 1500 * time.Microsecond, 3 * time.Millisecond, []time.Duration{500 * time.Microsecond,
			500 * time.Microsecond}},
		{"timer 3 ms late", 3 * time.Millisecond, 0, nil}, // appends run late: their timers vary
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Unix(1000, 0)
			cur := start
			p := newPacer(start, 1000/5.0) // one every 5 ms
			var sleeps []time.Duration
			p.now = func() time.Time { return cur }
			p.onTimer = func(_ context.Context, d time.Duration) bool {
				if c.wantTimer != 0 && d != c.wantTimer {
					t.Errorf("timer of %v, want %v", d, c.wantTimer)
				}
				cur = cur.Add(d + c.timerLate)
				return true
			}
			p.sleep = func(d time.Duration) { sleeps = append(sleeps, d); cur = cur.Add(d) }
			for i := range 3 {
				due, ok := p.next(context.Background())
				if want := start.Add(time.Duration(i) * 5 * time.Millisecond); !ok || !due.Equal(want) {
					t.Fatalf("append %d due %v (%v), want %v", i, due.Sub(start), ok, want.Sub(start))
				}
				if c.timerLate < pacerCoarse {
					cur = due // appended at once
				}
			}
			if fmt.Sprint(sleeps) != fmt.Sprint(c.wantSleeps) {
				t.Fatalf("precise sleeps %v, want %v", sleeps, c.wantSleeps)
			}
		})
	}
}

// preciseSleep sleeps at least what it is asked, across the signals the Go runtime sends its threads
// (an interrupted nanosleep resumes with what is left).
func TestPreciseSleepSleepsItsDuration(t *testing.T) {
	for range 20 {
		start := time.Now()
		preciseSleep(time.Millisecond)
		if d := time.Since(start); d < time.Millisecond {
			t.Fatalf("slept %v of 1 ms", d)
		}
	}
}
