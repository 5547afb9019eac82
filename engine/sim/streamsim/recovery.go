package streamsim

import (
	"fmt"

	"github.com/ringstream/ringstream/engine/control"
	"github.com/ringstream/ringstream/engine/stream"
)

// RecoveryTimes are the ticks from an owner's loss (its node killed, links closed) to each stage of
// the failover of the last of the streams that lost it.
type RecoveryTimes struct {
	Streams     int
	WithPrimary bool   // the lost node also held the metadata primary
	Recorded    uint64 // every pending recovery committed in meta
	Committed   uint64 // every new assignment committed
	Applied     uint64 // every new owner applied its assignment (log epoch durable)
	Confirmed   uint64 // a produce sent to each new owner once it applied is acknowledged
}

func (r RecoveryTimes) String() string {
	with := ""
	if r.WithPrimary {
		with = " (with the metadata primary)"
	}
	return fmt.Sprintf("%d streams%s: recorded %d, committed %d, owners applied %d, first confirm %d ticks",
		r.Streams, with, r.Recorded, r.Committed, r.Applied, r.Confirmed)
}

// MeasureRecovery runs streams three-copy streams owned by node 1 of three nodes with the controller
// on node 3, or on node 1 itself with withPrimary (control.DefaultConfig, one tick per network hop,
// metaDelay ticks per metadata commit, a view change of viewChangeTicks), produces one batch to each,
// kills node 1 and measures how many ticks each failover stage takes for all of them.
func MeasureRecovery(streams int, metaDelay int, withPrimary bool) (RecoveryTimes, error) {
	metaNode := uint16(3)
	if withPrimary {
		metaNode = 1
	}
	s, err := New(Options{Seed: 1, Nodes: 3, Streams: streams, Copies: 3, Scripted: true, MetaNode: metaNode,
		MetaDelayTicks: metaDelay, Control: control.DefaultConfig(), Ticks: 1 << 20, ControllerChecksPerTick: true})
	if err != nil {
		return RecoveryTimes{}, err
	}
	out := RecoveryTimes{Streams: streams, WithPrimary: withPrimary}
	run := func(limit int, cond func() bool) (uint64, error) {
		start := s.now
		for range limit {
			if cond() {
				return s.now - start, nil
			}
			if err := s.RunTicks(1); err != nil {
				return 0, err
			}
		}
		return 0, fmt.Errorf("streamsim: not within %d ticks", limit)
	}
	all := func(f func(si int) bool) func() bool {
		return func() bool {
			for si := range s.strs {
				if !f(si) {
					return false
				}
			}
			return true
		}
	}
	applied := func(si int) bool {
		a, _ := s.meta.state.Assignment(s.strs[si].st.ID)
		n := s.nodes[a.Owner]
		hc := n.copies[si]
		return n.up && hc != nil && hc.asg.Epoch == a.Epoch && hc.c.Role() == stream.RoleOwner &&
			n.disks[si].ownEpoch() == a.Epoch
	}
	if _, err := run(100, all(applied)); err != nil {
		return out, err
	}
	for si := range s.strs {
		s.Produce(si, 1, 1, 1, 1)
	}
	acked := func(seq uint64) func(si int) bool {
		return func(si int) bool {
			_, ok := s.work.acked[ackKey{stream: s.strs[si].st.ID, pid: 1, seq: seq}]
			return ok
		}
	}
	if _, err := run(100, all(acked(1))); err != nil {
		return out, err
	}
	s.kill(s.nodes[1], 0)
	start := s.now
	if _, err := run(2000, func() bool { return len(s.meta.state.Recoveries()) == streams }); err != nil {
		return out, err
	}
	out.Recorded = s.now - start
	if _, err := run(2000, all(func(si int) bool {
		a, _ := s.meta.state.Assignment(s.strs[si].st.ID)
		return a.Epoch == 2
	})); err != nil {
		return out, err
	}
	out.Committed = s.now - start
	sent := make([]bool, streams)
	if _, err := run(2000, all(func(si int) bool {
		if !applied(si) {
			return false
		}
		if !sent[si] {
			sent[si] = true
			a, _ := s.meta.state.Assignment(s.strs[si].st.ID)
			s.Produce(si, a.Owner, 1, 2, 1)
		}
		return true
	})); err != nil {
		return out, err
	}
	out.Applied = s.now - start
	if _, err := run(2000, all(acked(2))); err != nil {
		return out, err
	}
	out.Confirmed = s.now - start
	return out, nil
}
