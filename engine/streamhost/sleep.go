package streamhost

// Sleeping copies (shard.Sleeper). A node holds tens of thousands of copies of quiet streams; polling
// each on every tick made the idle walk most of a core. A serving copy that has nothing queued,
// waiting or timed sleeps: the shard does not tick it until its next idle check (a copy not parked
// yet), its next retention pass (a spec with limits) or the shard's next send tick, whichever comes
// first. Every input of a copy wakes it first (cg.wake): a frame the shard routes to it (the shard
// wakes it), a control frame, a storage completion, a client's request (Host.serving), and every
// carryOut and markDirty, so a state change made by an input is seen on the next tick as before.
// The tails published for the node heartbeats (tails.go) are rebuilt only for the copies polled
// awake since the last publish (a woken copy is polled on the next tick): a node of sleeping copies
// publishes nothing new and walks nothing.

// SleepUntil implements shard.Sleeper: the tick the copy next needs OnTick at, or 0 for every tick.
// A copy with a seal step or an assignment under way stays awake until it is done (a failover's
// copies); one whose seal was answered may sleep (a repeated seal is an input that wakes it).
func (cg *copyGroup) SleepUntil(now uint64) uint64 {
	if cg.dirty || cg.fail.active || cg.c == nil || cg.state != stateServing || cg.opening || cg.ticking ||
		cg.retain || cg.delWait || cg.epochWait || cg.parkNow || len(cg.readWait) > 0 ||
		cg.seal.phase == sealQueued || cg.seal.busy() || cg.apply.phase != applyNone {
		return 0
	}
	until := ^uint64(0)
	if sp := &cg.spec; sp.RetainBytes != 0 || sp.RetainAgeMs != 0 {
		until = cg.retainAt
	}
	if cg.h.h.cfg.IdleCloseTicks >= 0 && !cg.parked {
		// The next tick of the copy's idle check (parkIfIdle): (tick+stagger) a multiple of parkCheckTicks.
		k := (now + uint64(cg.stagger)) % parkCheckTicks
		until = min(until, now+parkCheckTicks-k)
	}
	if until > now+1 {
		cg.sleeping = true
	}
	return until
}

// wake tells the shard that a copy it may have put to sleep has an input: it is polled on every
// tick again until it may sleep anew.
func (cg *copyGroup) wake() {
	if cg.sleeping {
		cg.sleeping = false
		cg.h.send.Wake(cg.spec.Stream)
	}
}
