package streamhost

// parkAfterOpen parks a copy whose storage just opened: at boot every copy opens at once, and one
// that stayed open until its scan and log epoch were done would hold its four descriptors while
// thousands of others queue behind it. Its scan reads open their own segments; its first append or
// seal reopens what it needs. A ring without room for the closes leaves it to the next tick.
func (cg *copyGroup) parkAfterOpen() {
	if cg.h.h.cfg.IdleCloseTicks < 0 {
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
