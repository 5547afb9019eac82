package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ringstream/ringstream/client"
)

// readBackWait is the long poll of each read-back fetch.
const readBackWait = 200 * time.Millisecond

// readBackRetry is the wait before a read-back fetch that failed is tried again.
const readBackRetry = 100 * time.Millisecond

// verify reads every stream back from offset 0 and checks each ledger.
func (r *run) verify(ctx context.Context, ledgers map[string]*ledger) Verification {
	ctx, cancel := context.WithTimeout(ctx, verifyTimeout)
	defer cancel()
	var v Verification
	for _, name := range sortedKeys(ledgers) {
		l := ledgers[name]
		l.beginRead()
		read := r.readBack
		if r.cfg.Client == ClientKafka {
			read = r.readBackKafka
		}
		if err := read(ctx, l); err != nil {
			v.Examples = append(v.Examples, fmt.Sprintf("%s: read back stopped: %v", name, err))
		}
		l.check(&v)
	}
	return v
}

// readBack reads l's stream from offset 0 up to the last confirmed offset and the confirmed tail,
// whichever is further.
func (r *run) readBack(ctx context.Context, l *ledger) error {
	var target uint64
	for _, c := range l.confirmed {
		target = max(target, c.offset+1)
	}
	cs, err := r.cl.Consumer(l.stream, 0, client.FetchOptions{BytesMax: 4 << 20, Wait: readBackWait})
	if err != nil {
		return err
	}
	var lastErr error
	for cs.Offset() < target || target == 0 {
		recs, err := cs.Poll(ctx)
		if err != nil {
			// The cluster may still be settling after the faults (a recovery, a node catching up):
			// retry until verifyTimeout, then report the last error.
			lastErr = err
			if sleepCtx(ctx, readBackRetry) != nil {
				return fmt.Errorf("%w (at offset %d of %d)", lastErr, cs.Offset(), target)
			}
			continue
		}
		for recs.Next() {
			l.read(recs.Offset(), recs.Value())
		}
		if err := recs.Err(); err != nil {
			return err
		}
		target = max(target, recs.ConfirmedTail)
		if target == 0 {
			return nil
		}
	}
	return nil
}

// gapParts is the mean of each failover-related histogram the nodes export, in milliseconds, over
// the run (d is the run's metrics delta): the parts of the failover gap where the nodes measure them.
func gapParts(d Metrics) map[string]float64 {
	out := map[string]float64{}
	for _, name := range sortedKeys(d) {
		base, ok := cutSuffix(name, "_seconds_sum")
		if !ok || !containsAny(base, "failover", "seal", "recovery", "assignment", "promot", "detect") {
			continue
		}
		if n := d[base+"_seconds_count"]; n > 0 {
			out[base] = d[name] / n * 1000
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func cutSuffix(s, suffix string) (string, bool) {
	if len(s) < len(suffix) || s[len(s)-len(suffix):] != suffix {
		return s, false
	}
	return s[:len(s)-len(suffix)], true
}

func containsAny(s string, subs ...string) bool {
	return slices.ContainsFunc(subs, func(sub string) bool { return strings.Contains(s, sub) })
}
