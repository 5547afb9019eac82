package streamhost

// parkAfterOp parks a copy whose storage just did one of the operations that reopen a parked copy
// and leave it idle: its open, a seal. At boot every copy opens at once, and one that
// stayed open until its scan and log epoch were done would hold its four descriptors while thousands
// of others queue behind it; a node failing over thousands of streams reopens each copy for its
// seal, and one that then stayed open for idle_close_after would hold its descriptors that long. Its scan reads open their own segments; its first append or seal reopens what it needs. A
// ring without room for the closes, or storage still busy, leaves it to the next tick, unless the
// copy is used meanwhile (parkIfIdle).
func (cg *copyGroup) parkAfterOp() {
	if cg.h.h.cfg.IdleCloseTicks < 0 || cg.seg == nil {
		return
	}
	cg.activity = cg.seg.Activity()
	cg.parkNow = !cg.park()
}

// parkCheckTicks is how often a copy compares its storage's activity count: every copy's check
// reads its storage's logs, memory the idle copy's tick does not touch otherwise.
const parkCheckTicks = 16

// parkIfIdle parks the copy's storage once it saw no append, read or seal for IdleCloseTicks,
// checked every parkCheckTicks (staggered by stream id), and at once after an open that could not
// park.
func (cg *copyGroup) parkIfIdle(tick uint64) {
	idle := cg.h.h.cfg.IdleCloseTicks
	if idle < 0 || cg.seg == nil || cg.state >= stateClosing || (!cg.parkNow && (tick+uint64(cg.stagger))%parkCheckTicks != 0) {
		return
	}
	if a := cg.seg.Activity(); a != cg.activity {
		// Reads leave a parked copy parked; anything that reopened it counted too.
		cg.activity, cg.activeAt, cg.parkNow, cg.parked = a, tick, false, cg.seg.Parked()
		return
	}
	if cg.parked {
		return // parked, and nothing reopened it since: a reopen counts as activity
	}
	if cg.parkNow || tick-cg.activeAt >= uint64(idle) {
		cg.parkNow = !cg.park()
	}
}

// park parks the copy's storage unless it is parked or busy (segment.Copy.Park), and says whether
// it is parked now (cg.parked).
func (cg *copyGroup) park() bool {
	if !cg.seg.Parked() {
		if !cg.seg.Park() {
			return false
		}
		cg.h.stats.Parks++
	}
	cg.parked = true
	cg.h.markTail(cg)
	return true
}
