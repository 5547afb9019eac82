package engine

import (
	"sync"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
)

// timeline keeps the controller hosts' events with the time each was heard.
type timeline struct {
	mu     sync.Mutex
	events []timedEvent
}

type timedEvent struct {
	at time.Time
	ControlEvent
}

func (tl *timeline) observe(e ControlEvent) {
	tl.mu.Lock()
	tl.events = append(tl.events, timedEvent{at: time.Now(), ControlEvent: e})
	tl.mu.Unlock()
}

// first is the time of the first event after from that match says yes to (zero if none).
func (tl *timeline) first(from time.Time, match func(ControlEvent) bool) time.Time {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, e := range tl.events {
		if !e.at.Before(from) && match(e.ControlEvent) {
			return e.at
		}
	}
	return time.Time{}
}

// gapParts is one failover's gap and its parts, in milliseconds.
type gapParts struct {
	gap, detect, record, seal, commit, apply float64
}

func committed(op meta.OpKind) func(ControlEvent) bool {
	return func(e ControlEvent) bool { return e.Kind == ControlCommitted && e.Op == op && e.OK }
}

// measureFailover builds a three-node cluster (default eager grace), creates a stream, produces to it,
// kills its owner's node and produces until the first confirm on the new owner. With ownerIsPrimary
// false the metadata primary is first moved off node 1 (it is killed and restarted before the
// stream exists), so the owner's node is not the primary's.
func measureFailover(b *testing.B, ownerIsPrimary bool) gapParts {
	c := newFailoverCluster(b, 200)
	defer c.stop()
	if !ownerIsPrimary {
		waitForTB(b, "a metadata primary", func() bool { return c.primary(0) != nil })
		c.nodes[1].Kill()
		waitForTB(b, "a metadata primary on 2 or 3", func() bool { return c.primary(1) != nil })
		c.restart(1)
	}
	id := c.createStream("orders")
	p := newProducer(c, "orders", id)
	victim := p.owner
	if isPrimary := c.nodes[victim].Meta().Status().Primary; isPrimary != ownerIsPrimary {
		b.Fatalf("owner %d is the metadata primary: %v, want %v", victim, isPrimary, ownerIsPrimary)
	}
	p.produceFor(50, 100*time.Millisecond)
	var tl timeline
	for _, n := range c.nodes {
		n.Controller().SetObserver(tl.observe)
	}
	killed := time.Now()
	p.dead[victim] = true
	c.nodes[victim].Kill()
	for p.firstNewAck.IsZero() {
		p.step(false)
	}
	lost := tl.first(killed, func(e ControlEvent) bool { return e.Kind == ControlNodeLost })
	recorded := tl.first(lost, committed(meta.OpRecordRecovery))
	sealed := tl.first(recorded, func(e ControlEvent) bool { return e.Kind == ControlSealSent })
	proposed := tl.first(sealed, func(e ControlEvent) bool {
		return e.Kind == ControlProposed && e.Op == meta.OpCommitRecovery
	})
	done := tl.first(proposed, committed(meta.OpCommitRecovery))
	for _, t := range []time.Time{lost, recorded, sealed, proposed, done} {
		if t.IsZero() {
			b.Fatalf("a failover step was not observed: lost %v recorded %v sealed %v proposed %v committed %v",
				lost, recorded, sealed, proposed, done)
		}
	}
	ms := func(from, to time.Time) float64 { return float64(to.Sub(from).Microseconds()) / 1000 }
	if testing.Verbose() {
		tl.mu.Lock()
		for _, e := range tl.events {
			b.Logf("%8.1f ms %+v", ms(killed, e.at), e.ControlEvent)
		}
		tl.mu.Unlock()
	}
	return gapParts{gap: ms(killed, p.firstNewAck), detect: ms(killed, lost), record: ms(lost, recorded),
		seal: ms(recorded, proposed), commit: ms(proposed, done), apply: ms(done, p.firstNewAck)}
}

func benchFailover(b *testing.B, ownerIsPrimary bool) {
	var sum gapParts
	for b.Loop() {
		g := measureFailover(b, ownerIsPrimary)
		sum.gap += g.gap
		sum.detect += g.detect
		sum.record += g.record
		sum.seal += g.seal
		sum.commit += g.commit
		sum.apply += g.apply
		b.Logf("gap %.1f ms: detection %.1f, pending-recovery commit %.1f, seal round trip %.1f, guarded commit %.1f, apply and first confirm %.1f",
			g.gap, g.detect, g.record, g.seal, g.commit, g.apply)
	}
	n := float64(b.N)
	b.ReportMetric(sum.gap/n, "gap-ms")
	b.ReportMetric(sum.detect/n, "detect-ms")
	b.ReportMetric(sum.record/n, "record-ms")
	b.ReportMetric(sum.seal/n, "seal-ms")
	b.ReportMetric(sum.commit/n, "commit-ms")
	b.ReportMetric(sum.apply/n, "apply-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkFailoverGap: owner loss to the first confirmed produce on the new owner, three real nodes,
// the default eager_failover_grace (200 ms), the owner's node not the metadata primary's. Parts:
// detection (kill to the controller's node lost: the grace), pending-recovery commit (RecordRecovery
// applied), seal round trip (the seals out to the guarded commit proposed), guarded commit
// (CommitRecovery applied), apply (the new owner reopened and its first confirm seen by the
// producer, with its lookup and reconnect). Run with -benchtime=5x: each iteration builds a cluster.
func BenchmarkFailoverGap(b *testing.B) { benchFailover(b, false) }

// BenchmarkFailoverGapWithPrimary: the same when the lost node also held the metadata primary
// (detection then includes the view change and the new controller's start).
func BenchmarkFailoverGapWithPrimary(b *testing.B) { benchFailover(b, true) }
