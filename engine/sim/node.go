package sim

import (
	"errors"
	"fmt"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/wire"
)

// errReadFault is the simulated disk's read error at restart.
var errReadFault = errors.New("sim: injected read error")

// node is one replica with its disk and its heartbeat schedule, as shard 0 of a node would run it.
type node struct {
	index    int
	up       bool
	replica  *vsr.Replica
	machine  vsr.StateMachine
	disk     disk
	schedule heartbeat.Schedule
	primary  heartbeat.Primary
	backup   heartbeat.Backup
	tick     uint64 // this node's tick count since it (re)started

	sentCommit uint64 // last commit handed to the heartbeat primary
	backupView uint32 // view the heartbeat backup follows
	checked    uint64 // ops up to here were checked against the committed history
	digestAt   uint64 // commit+1 at which the digest was last checked; 0 for none
	msg        wire.VSRMessage

	downAt      uint64 // the tick it last crashed
	view        uint32 // the replica's view at the last check
	viewAt      uint64 // the tick its view last changed
	pausedUntil uint64 // the process is stopped until this tick
	skew        int    // +1: ticks fast; -1: ticks slow
	fullUntil   uint64 // ENOSPC: persists fail until this tick
	oldCopy     *disk  // the synced state at an earlier crash, for an old-copy restore
	// Lost state (the fault budget): damaged from a fault that lost acknowledged state until the next
	// start, then recovering until the replica has rejoined.
	damaged, recovering bool
}

// lostState: the node may have lost state it acknowledged and has not recovered yet.
func (n *node) lostState() bool { return n.damaged || n.recovering }

func (n *node) paused(now uint64) bool { return now < n.pausedUntil }

// checkedMachine wraps a replica's state machine to check its digest after every op it applies. The
// digest walks the whole state, so it is kept until the state changes again (Apply or Restore).
type checkedMachine struct {
	vsr.StateMachine
	sim         *Sim
	node        *node
	digest      uint64
	digestValid bool
}

func (m *checkedMachine) Apply(op []byte, opNumber uint64, result []byte) []byte {
	result = m.StateMachine.Apply(op, opNumber, result)
	m.digest, m.digestValid = m.StateMachine.Digest(), true
	m.sim.checkApplied(m.node, opNumber, m.digest)
	return result
}

func (m *checkedMachine) Restore(snapshot []byte) error {
	m.digestValid = false
	return m.StateMachine.Restore(snapshot)
}

func (m *checkedMachine) Digest() uint64 {
	if !m.digestValid {
		m.digest, m.digestValid = m.StateMachine.Digest(), true
	}
	return m.digest
}

func (s *Sim) newMachine(n *node) vsr.StateMachine {
	var m vsr.StateMachine = newCounterMachine()
	if s.opts.Machine == MachineMeta {
		m = meta.NewState()
	}
	return &checkedMachine{StateMachine: m, sim: s, node: n}
}

// start (re)creates the node's replica from its disk. It fails on an injected read error.
func (s *Sim) start(n *node) error {
	if s.chance(s.opts.ReadErrorPPM) {
		return errReadFault
	}
	lost := n.lostState()
	if n.damaged {
		n.damaged, n.recovering = false, true
	}
	n.disk.broken = s.opts.BrokenStorage
	d, valid, err := vsr.Recover(n.disk.superblocks, n.disk.snapshots, n.disk.log)
	if err != nil {
		return fmt.Errorf("recover replica %d: %w", n.index, err)
	}
	if d.Cause != nil && !lost {
		// Crashes, torn and failed persists and misdirected superblock copies lose nothing a replica
		// acknowledged: the storage must prove the state it holds (vsr's storage notes).
		return fmt.Errorf("replica %d lost no acknowledged state, yet its storage proves none: %w", n.index, d.Cause)
	}
	n.disk.log = n.disk.log[:valid] // cut the torn tail before appending after it
	n.disk.repairSuperblocks(d)
	n.disk.durable = durableMark{}
	if d.Recovering {
		n.disk.durable.view = d.Superblock.View // a recovering replica holds no log
	} else {
		n.disk.durable.raise(d.Superblock)
	}
	if d.Recovering {
		d.RecoveryNonce = s.rng.Uint64() | 1
	}
	m := s.newMachine(n)
	r, err := vsr.New(s.opts.VSR(s.opts.Replicas, uint8(n.index)), m, d)
	if err != nil {
		return fmt.Errorf("restart replica %d: %w", n.index, err)
	}
	if s.opts.OnReplica != nil {
		s.opts.OnReplica(r)
	}
	if r.Recovering() {
		n.recovering = true // whatever the cause: a replica in recovery cannot help a quorum
		s.trace("r%d starts in recovery (cause: %v)", n.index, d.Cause)
	}
	n.replica, n.machine, n.up = r, m, true
	n.schedule = heartbeat.NewSchedule(s.opts.Heartbeat)
	n.primary, n.backup = heartbeat.Primary{}, heartbeat.Backup{}
	n.tick, n.sentCommit, n.checked, n.digestAt = 0, r.Commit(), min(n.checked, r.Commit()), 0
	n.pausedUntil = 0
	return nil
}

// crash stops the node: its unsynced writes are lost, or the first of them torn.
func (s *Sim) crash(n *node) {
	n.up, n.downAt = false, s.now
	n.replica = nil
	torn := s.chance(s.opts.TornWritePPM)
	n.disk.crash(torn, s.rng.IntN, persistOK)
	if s.opts.LostState && s.chance(s.opts.OldCopyPPM) {
		c := n.disk.clone()
		n.oldCopy = &c
	}
}

// tickNode runs one tick of the node: the replica's timeouts, then the heartbeat schedule.
func (s *Sim) tickNode(n *node) error {
	r := n.replica
	n.tick++
	r.Tick()
	if err := s.flush(n); err != nil {
		return err
	}
	t := n.schedule.Advance()
	if r.IsPrimary() {
		n.backup.Stop()
		s.tickPrimary(n, t)
	} else {
		n.primary.Stop()
		if r.Normal() {
			if !n.backup.Running() || r.View() != n.backupView {
				n.backup.Follow(s.opts.Heartbeat, t.Number, r.View(), r.PrimaryIndex())
				n.backupView = r.View()
			}
			if n.backup.Silent(t.Number) {
				r.OnPrimarySilent()
			}
		} else {
			n.backup.Stop()
		}
	}
	return s.flush(n)
}

// tickPrimary runs the primary's side of the heartbeat schedule: Commit entries and the quorum
// window (R24).
func (s *Sim) tickPrimary(n *node, t heartbeat.Tick) {
	r := n.replica
	self := uint8(n.index)
	if !n.primary.Running() || n.primary.View() != r.View() {
		s.trace("r%d primary of view %d: op=%d commit=%d", n.index, r.View(), r.Op(), r.Commit())
		var backups heartbeat.Members
		for i := 0; i < s.opts.Replicas; i++ {
			if i != n.index {
				backups |= heartbeat.MemberOf(uint8(i))
			}
		}
		n.primary.Start(s.opts.Heartbeat, t.Number, r.View(), r.Commit(), self, backups, s.quorum())
		n.sentCommit = r.Commit()
	}
	if r.Commit() != n.sentCommit {
		n.sentCommit = r.Commit()
		n.primary.Committed(t.Number, r.Commit(), heartbeat.Members(r.Holders()))
	}
	n.primary.Plan(t)
	owed, state := n.primary.Owed()
	if owed != 0 {
		ts := n.primary.Timestamp(t.Number)
		for i := 0; i < s.opts.Replicas; i++ {
			if owed.Has(uint8(i)) {
				s.net.send(packet{kind: packetCommit, from: n.index, to: i, commit: wire.CommitEntry{
					View: r.View(), Commit: r.Commit(), TimestampMonotonic: ts,
					HeartbeatState: wire.HeartbeatState(state), Replica: self}}, true)
			}
		}
		n.primary.Sent(owed, ts)
	}
	if n.primary.QuorumLost(t.Number) {
		r.OnQuorumLost()
	}
}

// onCommit is a backup receiving a Commit entry (R8, R22).
func (s *Sim) onCommit(n *node, p *packet) error {
	e := p.commit
	v := n.backup.OnCommit(n.tick, e.View, e.TimestampMonotonic, heartbeat.State(e.HeartbeatState), e.Replica)
	switch {
	case v.Accepted():
		n.replica.OnCommitEntry(e.View, e.Commit)
		s.net.send(packet{kind: packetCommitReply, from: n.index, to: p.from, reply: wire.CommitReplyEntry{
			View: e.View, TimestampMonotonic: e.TimestampMonotonic, Replica: uint8(n.index)}}, true)
	case v == heartbeat.CommitViewAhead:
		n.replica.OnCommitEntry(e.View, e.Commit)
	}
	return s.flush(n)
}

// onCommitReply is the primary counting a reply toward its quorum window (R24).
func (s *Sim) onCommitReply(n *node, p *packet) {
	n.primary.OnReply(n.tick, p.reply.View, p.reply.TimestampMonotonic, p.reply.Replica)
}

// onFrame decodes a VSR frame and steps the replica with it. Frames that do not parse are dropped.
func (s *Sim) onFrame(n *node, p *packet) error {
	h, body, err := wire.ParseFrame(p.frame)
	if err != nil {
		s.stats.Corrupt++
		return nil
	}
	if err := wire.DecodeVSR(&h, body, &n.msg); err != nil {
		s.stats.Corrupt++
		return nil
	}
	n.replica.Step(&n.msg)
	return s.flush(n)
}

// flush carries out the replica's effects until it has none.
func (s *Sim) flush(n *node) error {
	r := n.replica
	for {
		fx := r.Ready()
		if fx.PersistID == 0 && len(fx.Messages) == 0 && len(fx.Replies) == 0 {
			break
		}
		if fx.PersistID != 0 {
			n.disk.persist(fx, s.persistDoneAt(), s.persistFault(n))
		}
		for i := range fx.Messages {
			env := &fx.Messages[i]
			if err := s.checkDurable(n, &env.Msg); err != nil {
				return err
			}
			frame := wire.AppendVSRFrame(nil, wire.From{Cluster: 1, Node: uint16(n.index + 1)}, 0, &env.Msg)
			s.net.send(packet{kind: packetVSR, from: n.index, to: int(env.To), frame: frame}, true)
		}
		for _, rep := range fx.Replies {
			c := s.clientIndex(rep.Client)
			if c < 0 {
				continue
			}
			s.net.send(packet{kind: packetReply, from: n.index, to: c, client: rep.Client, request: rep.Request,
				payload: append([]byte(nil), rep.Result...)}, false)
		}
	}
	return s.check(n)
}
