package partitiontest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ringstream/ringstream/client"
)

// loadInterval is the gap between two of the load's records.
const loadInterval = 4 * time.Millisecond

// recPrefix and probePrefix start the load's and the probe's record payloads.
const (
	recPrefix   = "rec-"
	probePrefix = "probe-"
)

// load appends records rec-<k> (k from 0) to a stream at a steady pace with one producer and keeps
// the offset and epoch the owner confirmed each one at. Batches are confirmed in order, so the
// confirmed records are always the first ones appended.
type load struct {
	p    *client.Producer
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	offsets  []uint64 // offsets[k]: where record k was confirmed
	epochs   []uint32 // epochs[k]: the epoch that confirmed it
	firstAt  map[uint32]time.Time
	appended int
	err      error
	changed  chan struct{} // closed and replaced on every confirm
}

func startLoad(c *client.Client, stream string) (*load, error) {
	l := &load{stop: make(chan struct{}), done: make(chan struct{}), firstAt: map[uint32]time.Time{},
		changed: make(chan struct{})}
	p, err := c.Producer(client.ProducerConfig{Stream: stream, OnConfirm: l.onConfirm})
	if err != nil {
		return nil, err
	}
	l.p = p
	go l.run()
	return l, nil
}

func (l *load) onConfirm(cf client.Confirmed) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range uint64(cf.Count) {
		l.offsets = append(l.offsets, cf.BaseOffset+i)
		l.epochs = append(l.epochs, cf.Epoch)
	}
	if _, ok := l.firstAt[cf.Epoch]; !ok {
		l.firstAt[cf.Epoch] = time.Now()
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *load) run() {
	defer close(l.done)
	tick := time.NewTicker(loadInterval)
	defer tick.Stop()
	for k := 0; ; k++ {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		if err := l.p.Append(context.Background(), []byte(recPrefix+strconv.Itoa(k))); err != nil {
			l.mu.Lock()
			l.err = fmt.Errorf("append of record %d: %w", k, err)
			l.mu.Unlock()
			return
		}
		l.mu.Lock()
		l.appended++
		l.mu.Unlock()
	}
}

// waitConfirmed waits until more than n records are confirmed, at an epoch of at least epoch.
func (l *load) waitConfirmed(ctx context.Context, n int, epoch uint32) error {
	for {
		l.mu.Lock()
		ok := len(l.offsets) > n && l.epochs[len(l.epochs)-1] >= epoch
		ch, err := l.changed, l.err
		l.mu.Unlock()
		if ok {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%d records confirmed, want more than %d at epoch %d or later: %w", l.confirmed(), n,
				epoch, context.Cause(ctx))
		}
	}
}

// confirmed is the count of confirmed records.
func (l *load) confirmed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.offsets)
}

// firstConfirmAt is when the first batch was confirmed at epoch.
func (l *load) firstConfirmAt(epoch uint32) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.firstAt[epoch]
	return at, ok
}

// finish stops appending and waits until every appended record is confirmed.
func (l *load) finish(ctx context.Context) error {
	close(l.stop)
	<-l.done
	if err := l.p.Close(ctx); err != nil {
		return fmt.Errorf("producer close: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	if len(l.offsets) != l.appended {
		return fmt.Errorf("%d records appended, %d confirmed after the producer closed", l.appended, len(l.offsets))
	}
	return nil
}

// readBack reads stream from offset 0 up to the first offset past every confirmed record and checks
// that each confirmed record is there exactly once, at the offset it was confirmed at, and that no
// probe record (never confirmed) is. It returns the count of records read.
func (l *load) readBack(ctx context.Context, c *client.Client, stream string) (int, error) {
	l.mu.Lock()
	offsets := append([]uint64(nil), l.offsets...)
	l.mu.Unlock()
	var end uint64
	for _, o := range offsets {
		end = max(end, o+1)
	}
	cs, err := c.Consumer(stream, 0, client.FetchOptions{Wait: 100 * time.Millisecond})
	if err != nil {
		return 0, err
	}
	seen := make(map[int]uint64, len(offsets))
	var problems []string
	read := 0
	for cs.Offset() < end {
		recs, err := cs.Poll(ctx)
		if err != nil {
			return read, fmt.Errorf("read back at offset %d of %d: %w", cs.Offset(), end, err)
		}
		for recs.Next() {
			read++
			v := string(recs.Value())
			k, err := strconv.Atoi(strings.TrimPrefix(v, recPrefix))
			switch {
			case strings.HasPrefix(v, probePrefix):
				problems = append(problems, fmt.Sprintf("unconfirmed probe record %q read back at %d", v, recs.Offset()))
			case !strings.HasPrefix(v, recPrefix) || err != nil || k < 0:
				problems = append(problems, fmt.Sprintf("foreign record %q at %d", v, recs.Offset()))
			default:
				if prev, dup := seen[k]; dup {
					problems = append(problems, fmt.Sprintf("record %d at %d and %d", k, prev, recs.Offset()))
				}
				seen[k] = recs.Offset()
			}
		}
		if err := recs.Err(); err != nil {
			return read, err
		}
	}
	for k, o := range offsets {
		if got, ok := seen[k]; !ok {
			problems = append(problems, fmt.Sprintf("confirmed record %d (offset %d) missing", k, o))
		} else if got != o {
			problems = append(problems, fmt.Sprintf("confirmed record %d at %d, confirmed at %d", k, got, o))
		}
	}
	if len(problems) > 0 {
		return read, fmt.Errorf("%d problems in the read-back of %d records, first: %s", len(problems), read,
			strings.Join(problems[:min(len(problems), 10)], "; "))
	}
	return read, nil
}
