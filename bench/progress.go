package bench

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
)

// showProgress draws a progress line on w over the load's duration, with the records confirmed and
// the rate of the last second; the returned func stops it. A nil w shows nothing.
func showProgress(w io.Writer, start time.Time, d time.Duration, confirmed *atomic.Int64) func() {
	if w == nil {
		return func() {}
	}
	bar := progressbar.NewOptions64(d.Milliseconds(), progressbar.OptionSetWriter(w),
		progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetPredictTime(false), progressbar.OptionClearOnFinish(),
		progressbar.OptionSetDescription("bench"))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		var last int64
		lastAt := start
		for {
			select {
			case <-stop:
				bar.Finish()
				return
			case now := <-t.C:
				n := confirmed.Load()
				rate := float64(n-last) / now.Sub(lastAt).Seconds()
				last, lastAt = n, now
				bar.Describe(fmt.Sprintf("%9d confirmed %8.0f rec/s", n, rate))
				bar.Set64(min(time.Since(start).Milliseconds(), d.Milliseconds()))
			}
		}
	}()
	return func() {
		close(stop)
		<-done
		fmt.Fprintln(w)
	}
}
