package streamsim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/ringstream/ringstream/engine/control"
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/segment"
)

// Variant selects the protocol the simulator runs: the real one, or a test-only broken variant the
// checks must catch.
type Variant uint8

const (
	Correct Variant = iota
	// RawTailSeal: a seal fences and reports the copy's raw tails without first cutting the copy onto
	// the recorded history (the copy is cut only when it applies an assignment).
	RawTailSeal
	// NoPrefixGuard: the confirmed-prefix guard never holds a promotion back. The controller and
	// meta keep their guard, so the host makes it vacuous: a seal reply reports a record tail of at
	// least the latest history start the seal carried.
	NoPrefixGuard
	// SealRMinus1: the controller and meta stamp local_durable (W = E, so R = 1) while the copies
	// confirm by majority_durable: recoveries seal one copy fewer than R for E = 3.
	SealRMinus1
	// ConfirmWMinus1: the copies confirm on one copy fewer than their assignment's W (through a
	// count policy handed to the copies only).
	ConfirmWMinus1
	// AckBeforeFsync: the host reports an owner's appends durable as soon as it queues them.
	AckBeforeFsync
	// RestartedOwnerKept: an owner that reopened within its epoch applies a newer assignment that keeps
	// it owner without having been sealed for it (a follower addition), as before the known gap was
	// closed.
	RestartedOwnerKept
	// FailedLogHealthy: a disk error (Options.DiskErrors) is ignored: the host reports the failed
	// group commit durable, as a segment layer that dropped the error would, and the copy goes on
	// as healthy (no LogFailed, no wire.CopyLogFailed).
	FailedLogHealthy
	// OwnerQuorumOne: the host counts an owner's R24 quorum as 1 (the broker's copyGroup.Quorum
	// broken): an owner never loses its quorum, and one cut off from its followers serves on.
	OwnerQuorumOne
	// QuorumBackAfterOneReply: an owner that lost its quorum serves again after one follower's reply,
	// whatever W is (the broker's OnCommitReply broken).
	QuorumBackAfterOneReply
	// BatchCommitsAll: a batch metadata op with an entry whose guard fails commits every entry
	// anyway, as a meta that checked the batch's guards as one would (batchforce.go).
	BatchCommitsAll
)

func (v Variant) String() string {
	return [...]string{"correct", "raw-tail seal", "no prefix guard", "seal R-1", "confirm W-1",
		"ack before fsync", "restarted owner kept", "failed log healthy", "owner quorum one",
		"quorum back after one reply", "batch commits all"}[v]
}

// Options are one run's shape. Zero values are drawn from the seed.
type Options struct {
	Seed    uint64
	Variant Variant
	Nodes   int // 3..5
	Streams int
	Copies  int // E of each stream (1..Nodes); 0 draws it per stream
	// Ticks of faults and load; a heal phase of Ticks/4 follows.
	Ticks int
	// Scripted: no random faults, no load, no random delays: the caller drives everything.
	Scripted bool
	// Control is the controller's configuration; zero takes a short one for the simulator.
	Control control.Config
	// Members, in a scripted run, places each stream on its first Members nodes only (0: Copies).
	Members int
	// MetaNode is the node of the first metadata primary (0: node 1).
	MetaNode uint16
	// RecordChecksOnly turns off the checks that fire before a confirmed record is lost (owner below
	// its start, follower agreement, an owner confirming past its durable tail or past the next
	// epoch's start), to see which variants a lost record alone catches.
	RecordChecksOnly bool
	// ControllerChecksPerTick checks the controller's invariants once a tick instead of after every
	// Ready (each delivery to the metadata node): they read every recovery, so at tens of thousands
	// of streams the per-delivery checks outweigh the run. MeasureRecovery sets it.
	ControllerChecksPerTick bool
	// MetaDelayTicks is how long a proposal takes to commit in the metadata group (0: drawn).
	MetaDelayTicks int
	// DiskErrors adds disk errors to the faults (diskfault.go): ENOSPC and EIO on the group commits
	// of owners and followers, healed after a while and in the heal phase, and the liveness check at
	// the end of the run.
	DiskErrors bool
	// NoInPlace makes every applied assignment reopen its copy from the disk (stream.New), never
	// stream.Copy.Reassign in place as the broker does when no cut intervened (for comparison).
	NoInPlace bool
	// QuorumWindowTicks is the owners' R24 quorum window (0: defaultQuorumWindowTicks).
	QuorumWindowTicks int
	// NoStaleIncarnation: no stream is created twice, and no node holds an older incarnation's copy.
	NoStaleIncarnation bool
	// QuorumOncePerEpoch reports an owner's lost quorum at most once per epoch, as the shard's
	// heartbeat.Primary did before issue 22 (quorum.go).
	QuorumOncePerEpoch bool
	// QuorumReplyAtArrival counts a follower's CommitReply as hearing it when the reply arrives, as
	// heartbeat.Primary did before issue 22, not when the Commit it answers was sent (quorum.go).
	QuorumReplyAtArrival bool
	// Log receives one line per notable event when set.
	Log func(format string, args ...any)
}

// ErrViolation: a check failed. The error names the seed, the tick and the check.
var ErrViolation = errors.New("streamsim: violation")

// Sim is one simulated cluster. Everything runs on the caller's goroutine; one seeded *rand.Rand
// draws every choice.
type Sim struct {
	opt    Options
	rng    *rand.Rand
	now    uint64
	nodes  []*node // index = node id; nodes[0] is nil
	net    network
	meta   metaGroup
	strs   []simStream
	work   workload
	chk    checker
	reads  readChecker
	fault  faults
	err    error
	byID   map[uint64]int // stream id -> index in strs
	counts struct{ shrunken, empty, pauses, inPlace, quorumLost, batchOps, batchRefused int }
}

// simStream is one stream of the run.
type simStream struct {
	st  meta.Stream
	idx int
}

// node is one simulated node: its disks survive crashes, its copies do not.
type node struct {
	id          uint16
	up          bool
	pausedUntil uint64 // 0: running
	restartAt   uint64
	disks       []*disk     // per stream index; nil: never held a copy
	copies      []*hostCopy // per stream index; nil: no open copy
	hbSeq       uint64
	// Scripted runs only: holdSync keeps the node's record logs from syncing; a power loss of a node
	// with loseUnsynced keeps nothing that was not synced.
	holdSync, loseUnsynced bool
	stale                  []staleCopy // copies of older incarnations not deleted yet (incarnation.go)
}

func (n *node) running(now uint64) bool { return n.up && n.pausedUntil <= now }

// New builds a cluster from opt: nodes registered, streams created, the controller on node 1.
func New(opt Options) (*Sim, error) {
	s := &Sim{opt: opt, rng: rand.New(rand.NewPCG(opt.Seed, 0x5eed))}
	s.drawOptions()
	s.net.side = make([]uint8, s.opt.Nodes+1)
	s.nodes = make([]*node, s.opt.Nodes+1)
	for id := 1; id <= s.opt.Nodes; id++ {
		s.nodes[id] = &node{id: uint16(id), up: true, disks: make([]*disk, s.opt.Streams),
			copies: make([]*hostCopy, s.opt.Streams)}
	}
	if err := s.meta.init(s); err != nil {
		return nil, err
	}
	s.byID = make(map[uint64]int, len(s.strs))
	for i := range s.strs {
		s.byID[s.strs[i].st.ID] = i
	}
	s.chk.init(s)
	s.reads.init(len(s.strs))
	s.work.init(s)
	return s, nil
}

func (s *Sim) drawOptions() {
	o := &s.opt
	if o.Nodes == 0 {
		o.Nodes = 3 + s.rng.IntN(3)
	}
	if o.Streams == 0 && o.Variant == BatchCommitsAll {
		o.Streams = 4 + s.rng.IntN(5) // the variant breaks what only batches of many entries exercise
	} else if o.Streams == 0 {
		o.Streams = 1 + s.rng.IntN(3)
	}
	if o.Ticks == 0 {
		o.Ticks = 500 + s.rng.IntN(300)
	}
	if o.Variant == FailedLogHealthy {
		o.DiskErrors = true // the variant breaks what only disk errors exercise
	}
	if o.MetaDelayTicks == 0 {
		o.MetaDelayTicks = 1 + s.rng.IntN(4)
	}
	if o.Control == (control.Config{}) {
		o.Control = control.Config{NodeLivenessTimeoutTicks: 40, EagerFailoverGraceTicks: 8,
			SealTimeoutTicks: 20, SealRetryTimeoutTicks: 5, ProposalTimeoutTicks: 60}
	}
	if !o.Scripted {
		s.net.lossPct = s.rng.IntN(6)
		s.net.dupPct = s.rng.IntN(4)
		s.net.delayMax = 1 + s.rng.IntN(4)
	} else {
		s.net.delayMax = 1
	}
}

// copyConfig is the stream.Config of node's copy of st: small limits, so that catch-up and
// back-pressure happen in short runs.
func copyConfig(self uint16, st meta.Stream) stream.Config {
	return stream.Config{Self: self, Stream: st.ID, Incarnation: st.Incarnation, Decode: decodeBatch,
		BatchHeaderBytes: segment.BatchHeaderSize, BatchBytesMax: 1 << 10, PendingBytesMax: 16 << 10,
		InflightBytesMax: 8 << 10, InflightPreparesMax: 8, ReadBytes: 4 << 10, ResendTicks: 4,
		CursorSyncTicks: 3}
}

func (s *Sim) logf(format string, args ...any) {
	if s.opt.Log != nil {
		s.opt.Log("t=%d "+format, append([]any{s.now}, args...)...)
	}
}

// fail records the first violation; the run stops at the end of the step.
func (s *Sim) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("%w: seed=%d variant=%s tick=%d: %s", ErrViolation, s.opt.Seed, s.opt.Variant, s.now,
			fmt.Sprintf(format, args...))
	}
}

// Err is the first violation found, or nil.
func (s *Sim) Err() error { return s.err }

// Now is the current tick.
func (s *Sim) Now() uint64 { return s.now }

// Run runs the fault and load phase, then the heal phase, checking after every step. It returns what
// the run did and the first violation (ErrViolation), or a panic of a checked invariant of the real
// code as an error.
func Run(opt Options) (Stats, error) {
	s, err := New(opt)
	if err != nil {
		return Stats{}, err
	}
	err = s.RunTicks(s.opt.Ticks + s.opt.Ticks/4)
	return s.Stats(), err
}

// ParseVariant returns the variant named name (as Variant.String spells it).
func ParseVariant(name string) (Variant, error) {
	for v := Correct; v <= BatchCommitsAll; v++ {
		if v.String() == name {
			return v, nil
		}
	}
	return 0, fmt.Errorf("streamsim: unknown variant %q", name)
}

// RunTicks runs n ticks (stopping at the first violation) and returns s.Err.
func (s *Sim) RunTicks(n int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			msg, ok := r.(string)
			if !ok || !isInvariant(msg) {
				panic(r)
			}
			s.fail("invariant panic: %s", msg)
			err = s.err
		}
	}()
	for range n {
		if s.err != nil {
			break
		}
		s.step()
	}
	return s.err
}

func isInvariant(msg string) bool {
	for _, p := range []string{"stream: ", "control: ", "meta: ", "wire: "} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// healing reports whether the run is past its fault phase.
func (s *Sim) healing() bool { return s.now >= uint64(s.opt.Ticks) }

// step is one tick of the whole cluster.
func (s *Sim) step() {
	s.now++
	if !s.opt.Scripted {
		s.fault.step(s)
	}
	s.restartDue()
	s.meta.tick(s)
	for _, n := range s.nodes[1:] {
		if n.up && n.pausedUntil == s.now {
			s.countStaleOwners(n)
		}
		if n.running(s.now) {
			s.tickNode(n)
		}
	}
	for _, e := range s.net.due(s.now) {
		s.deliver(e)
	}
	for _, n := range s.nodes[1:] {
		if n.running(s.now) {
			s.diskStep(n)
		}
	}
	s.meta.commitDue(s)
	if !s.opt.Scripted {
		s.work.step(s)
	}
	s.chk.check(s)
}

// send queues a message, drawing its loss, duplication and delay.
func (s *Sim) send(e envelope) {
	if s.net.drop != nil && s.net.drop(&e) {
		return
	}
	if s.net.lossPct > 0 && s.rng.IntN(100) < s.net.lossPct {
		return
	}
	copies := 1
	if s.net.dupPct > 0 && s.rng.IntN(100) < s.net.dupPct {
		copies = 2
	}
	for range copies {
		s.net.seq++
		e.seq = s.net.seq
		e.at = s.now + 1 + uint64(s.rng.IntN(s.net.delayMax))
		q := e
		s.net.queue = append(s.net.queue, &q)
	}
}

// deliver hands a due message to its node (or drops it: node down, partition; a paused node gets
// it when it wakes).
func (s *Sim) deliver(p *envelope) {
	e := *p
	if e.to == clientNode {
		s.work.onReply(s, e)
		return
	}
	n := s.nodes[e.to]
	if !n.up || s.net.partitioned(e.from, e.to) {
		return
	}
	if n.pausedUntil > s.now {
		p.at = n.pausedUntil
		s.net.queue = append(s.net.queue, p)
		return
	}
	switch e.kind {
	case kindPrepare, kindPrepareOK:
		s.onStreamFrame(n, e)
	case kindHeartbeat:
		s.meta.onHeartbeat(s, e)
	case kindSeal:
		s.onSeal(n, e)
	case kindSealReply:
		s.meta.onSealReply(s, e)
	case kindAssign:
		s.onAssign(n, e)
	case kindRequest:
		s.onRequest(n, e)
	}
}

// streamIndex maps a stream id to its index in the run.
func (s *Sim) streamIndex(id uint64) (int, bool) {
	i, ok := s.byID[id]
	return i, ok
}

// Stats sums up a run: what it did, so that a test can tell a run that did nothing.
type Stats struct {
	Acked     int // produce batches acknowledged
	Confirmed int // batches confirmed, over every stream
	MaxEpoch  uint32
	Accepted  int // owner losses an operator accepted
	// AcceptedDiverged: streams where a follower disagreed with its owner after an accepted loss.
	AcceptedDiverged int
	Shrunken         int // assignments applied with fewer copies than the stream's E
	Empty            int // copies opened empty on a node that never held one (replacement followers)
	Pauses           int // owners paused and woken after their stream moved on
	// Stuck: streams with a producer still waiting at the end of the run for a batch it sent more
	// than Ticks/8 ticks before (liveness after the heal phase; counted, not checked).
	Stuck int
	// Reads: fetch replies checked against the confirms and reads that finished before they began.
	Reads int
	// InPlace: assignments applied by stream.Copy.Reassign on the open copy.
	InPlace int
	// QuorumLost: owners told they lost their quorum (R24).
	QuorumLost int
	// BatchOps: batch metadata ops applied; BatchRefused: their entries refused by a guard.
	BatchOps, BatchRefused int
}

func (s *Sim) Stats() Stats {
	st := Stats{Acked: len(s.work.acked), Shrunken: s.counts.shrunken, Empty: s.counts.empty, Pauses: s.counts.pauses,
		Reads: s.reads.checked, InPlace: s.counts.inPlace, QuorumLost: s.counts.quorumLost,
		BatchOps: s.counts.batchOps, BatchRefused: s.counts.batchRefused}
	for si := range s.strs {
		st.Confirmed += len(s.chk.ghosts[si].ids)
		st.Accepted += len(s.chk.ghosts[si].acceptedEpochs)
		if s.chk.ghosts[si].diverged {
			st.AcceptedDiverged++
		}
		a, _ := s.meta.state.Assignment(s.strs[si].st.ID)
		st.MaxEpoch = max(st.MaxEpoch, a.Epoch)
		for _, p := range s.work.producers {
			if p.si == si && p.waiting && s.now-p.since > uint64(s.opt.Ticks/8) {
				st.Stuck++
				break
			}
		}
	}
	return st
}

// countStaleOwners counts the copies of a waking node that are owners of an epoch their stream has
// left: paused owners that wake after their failover.
func (s *Sim) countStaleOwners(n *node) {
	for si, hc := range n.copies {
		if hc == nil || hc.c.Role() != stream.RoleOwner {
			continue
		}
		if a, _ := s.meta.state.Assignment(s.strs[si].st.ID); a.Epoch > hc.asg.Epoch {
			s.counts.pauses++
		}
	}
}
