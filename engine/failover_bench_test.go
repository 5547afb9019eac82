package engine

import (
	"flag"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/controlhost"
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
)

var failoverStreams = flag.Int("failover.streams", 0, "BenchmarkFailoverStreams: also this many streams (the cluster holds three times as many)")

// timeline keeps the controller hosts' events with the time each was heard.
type timeline struct {
	mu     sync.Mutex
	events []timedEvent
}

type timedEvent struct {
	at time.Time
	controlhost.Event
}

func (tl *timeline) observe(e controlhost.Event) {
	tl.mu.Lock()
	tl.events = append(tl.events, timedEvent{at: time.Now(), Event: e})
	tl.mu.Unlock()
}

// first is the time of the first event after from that match says yes to (zero if none).
func (tl *timeline) first(from time.Time, match func(controlhost.Event) bool) time.Time {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, e := range tl.events {
		if !e.at.Before(from) && match(e.Event) {
			return e.at
		}
	}
	return time.Time{}
}

// gapParts is one failover's gap and its parts, in milliseconds.
type gapParts struct {
	gap, detect, record, seal, commit, apply float64
}

func committed(op meta.OpKind) func(controlhost.Event) bool {
	return func(e controlhost.Event) bool { return e.Kind == controlhost.Committed && e.Op == op && e.OK }
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
	lost := tl.first(killed, func(e controlhost.Event) bool { return e.Kind == controlhost.NodeLost })
	recorded := tl.first(lost, committed(meta.OpRecordRecovery))
	sealed := tl.first(recorded, func(e controlhost.Event) bool { return e.Kind == controlhost.SealSent })
	proposed := tl.first(sealed, func(e controlhost.Event) bool {
		return e.Kind == controlhost.Proposed && e.Op == meta.OpCommitRecovery
	})
	done := tl.first(proposed, committed(meta.OpCommitRecovery))
	for _, t := range []time.Time{lost, recorded, sealed, proposed, done} {
		if t.IsZero() {
			b.Fatalf("a failover step was not observed: lost %v recorded %v sealed %v proposed %v committed %v",
				lost, recorded, sealed, proposed, done)
		}
	}
	ms := func(from, to time.Time) float64 { return float64(to.Sub(from).Microseconds()) / 1000 }
	if testing.Verbose() || p.firstNewAck.Sub(killed) > 400*time.Millisecond {
		tl.mu.Lock()
		for _, e := range tl.events {
			b.Logf("%8.1f ms %+v", ms(killed, e.at), e.Event)
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

// streamStages sums up, over the streams the controller worked on since killed, how long each step of
// their failovers took: p50, p90 and max in milliseconds.
func (tl *timeline) streamStages(killed time.Time) string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	type steps struct{ recordProposed, recorded, sealSent, lastReply, commitProposed, committed time.Time }
	per := map[uint64]*steps{}
	seals := 0
	first := func(t *time.Time, at time.Time) {
		if t.IsZero() {
			*t = at
		}
	}
	for _, e := range tl.events {
		if e.Stream == 0 {
			continue
		}
		x := per[e.Stream]
		if x == nil {
			x = &steps{}
			per[e.Stream] = x
		}
		switch {
		case e.Kind == controlhost.Proposed && e.Op == meta.OpRecordRecovery:
			first(&x.recordProposed, e.at)
		case e.Kind == controlhost.Committed && e.Op == meta.OpRecordRecovery:
			first(&x.recorded, e.at)
		case e.Kind == controlhost.SealSent:
			seals++
			first(&x.sealSent, e.at)
		case e.Kind == controlhost.SealReply && x.commitProposed.IsZero():
			x.lastReply = e.at
		case e.Kind == controlhost.Proposed && e.Op == meta.OpCommitRecovery:
			first(&x.commitProposed, e.at)
		case e.Kind == controlhost.Committed && e.Op == meta.OpCommitRecovery:
			first(&x.committed, e.at)
		}
	}
	var parts [5][]float64
	ms := func(from, to time.Time) float64 { return float64(to.Sub(from).Microseconds()) / 1000 }
	for _, x := range per {
		parts[0] = append(parts[0], ms(killed, x.recordProposed))
		parts[1] = append(parts[1], ms(x.recordProposed, x.recorded))
		parts[2] = append(parts[2], ms(x.sealSent, x.lastReply))
		parts[3] = append(parts[3], ms(x.lastReply, x.commitProposed))
		parts[4] = append(parts[4], ms(x.commitProposed, x.committed))
	}
	out := fmt.Sprintf("%d streams, %d seals sent; p50 / p90 / max ms:", len(per), seals)
	for i, name := range []string{"kill to recovery proposed", "recovery committed", "seal answers",
		"last answer to guarded commit proposed", "guarded commit"} {
		v := parts[i]
		if len(v) == 0 {
			continue
		}
		slices.Sort(v)
		out += fmt.Sprintf(" %s %.1f / %.1f / %.1f;", name, v[len(v)/2], v[len(v)*9/10], v[len(v)-1])
	}
	return out
}

// measureManyStreams creates streams three-copy streams (all owned by node 1, whose node does not
// hold the metadata primary), kills node 1, and times until every stream's recovery committed a new
// owner, and until every new owner's copy serves at its new epoch.
func measureManyStreams(b *testing.B, streams int) (committed, serving time.Duration) {
	c := newFailoverCluster(b, 200)
	defer c.stop()
	waitForTB(b, "a metadata primary", func() bool { return c.primary(0) != nil })
	c.nodes[1].Kill()
	waitForTB(b, "a metadata primary on 2 or 3", func() bool { return c.primary(1) != nil })
	c.restart(1)
	// Owners rotate over the nodes (placement spreads them), so 3n streams put n on node 1: the
	// cluster holds three times the streams that fail over, as in production.
	all := c.createStreams(b, "s", 3*streams)
	var ids []uint64
	c.metaState(c.primary(1).ID(), func(s *meta.State) {
		for _, id := range all {
			if a, _ := s.Assignment(id); a.Owner == 1 {
				ids = append(ids, id)
			}
		}
	})
	if len(ids) != streams {
		b.Fatalf("node 1 owns %d of %d streams, want %d", len(ids), len(all), streams)
	}
	var tl timeline
	for _, n := range c.nodes {
		n.Controller().SetObserver(tl.observe)
	}
	killed := time.Now()
	defer func() { b.Log(tl.streamStages(killed)) }()
	c.nodes[1].Kill()
	b.Logf("Kill of node 1 (%d copies) returned after %v", len(all), time.Since(killed).Round(time.Millisecond))
	defer func() {
		if lost := tl.first(killed, func(e controlhost.Event) bool { return e.Kind == controlhost.NodeLost }); !lost.IsZero() {
			b.Logf("node lost %v after the kill", lost.Sub(killed).Round(time.Millisecond))
		}
	}()
	asgs := make([]meta.Assignment, len(ids))
	waitForTB(b, "every stream's new owner committed", func() bool {
		p := c.primary(1)
		if p == nil {
			return false
		}
		done := true
		c.metaState(p.ID(), func(s *meta.State) {
			for i, id := range ids {
				_, recovering := s.RecoveryOf(id)
				asgs[i], _ = s.Assignment(id)
				done = done && !recovering && asgs[i].Owner != 1
			}
		})
		return done
	})
	committed = time.Since(killed)
	// Each stream's new owner is seen serving with one read per (node, shard) and poll (eachCopy).
	servedAt := make([]time.Time, len(ids))
	left := len(ids)
	waitForTB(b, "every new owner serving", func() bool {
		byOwner := map[uint16][]int{}
		for i := range ids {
			if servedAt[i].IsZero() {
				byOwner[asgs[i].Owner] = append(byOwner[asgs[i].Owner], i)
			}
		}
		for owner, idx := range byOwner {
			streams := make([]uint64, len(idx))
			for j, i := range idx {
				streams[j] = ids[i]
			}
			c.eachCopy(owner, streams, func(j int, st streamhost.CopyState) {
				i := idx[j]
				if st.Open && st.Role == stream.RoleOwner && st.Epoch >= asgs[i].Epoch {
					servedAt[i] = time.Now()
					left--
				}
			})
		}
		return left == 0
	})
	last := killed
	for _, at := range servedAt {
		if at.After(last) {
			last = at
		}
	}
	return committed, last.Sub(killed)
}

// BenchmarkFailoverStreams: 1 and 100 streams lose their owner at once (node 1 killed; the
// metadata primary elsewhere), three real nodes, default grace: the time until every recovery
// committed, and until every new owner serves. Run with -benchtime=1x; -failover.streams=1000 adds
// a run of that many.
func BenchmarkFailoverStreams(b *testing.B) {
	counts := []int{1, 100}
	if *failoverStreams > 0 {
		counts = append(counts, *failoverStreams)
	}
	for _, n := range counts {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			var committed, serving time.Duration
			for b.Loop() {
				c, s := measureManyStreams(b, n)
				committed += c
				serving += s
				b.Logf("%d streams: every recovery committed %v, every new owner serving %v after the kill", n, c, s)
			}
			b.ReportMetric(float64(committed.Milliseconds())/float64(b.N), "committed-ms")
			b.ReportMetric(float64(serving.Milliseconds())/float64(b.N), "serving-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}
