package streamsim

// readChecker checks that no read goes back in time (issue 22, finding 8): a fetch's confirmed
// tail is at least the highest confirm acknowledged before the fetch was sent (a produce's end, on
// any owner of any epoch) and at least the confirmed tail of every fetch answered before it was
// sent. An operator's accepted owner loss gives up what was confirmed before it, so it starts the
// stream's floor again and fetches sent before it are not checked.
type readChecker struct {
	floor   []uint64 // per stream: the highest acknowledged confirm or answered confirmed tail
	gen     []uint64 // per stream: bumped by an accepted owner loss
	pending map[uint64]readStart
	checked int // fetch replies checked
	held    int // fetch refusals of an owner that had not proved its confirmed tail yet
}

// readStart is what a fetch must see, fixed when it is sent.
type readStart struct {
	si    int
	floor uint64
	gen   uint64
	sent  uint64 // tick
}

func (r *readChecker) init(streams int) {
	r.floor = make([]uint64, streams)
	r.gen = make([]uint64, streams)
	r.pending = make(map[uint64]readStart)
}

// onFetchSent fixes the floor of the fetch with request id req.
func (r *readChecker) onFetchSent(s *Sim, si int, req uint64) {
	r.pending[req] = readStart{si: si, floor: r.floor[si], gen: r.gen[si], sent: s.now}
}

// onAcked raises the floor to the end of an acknowledged produce.
func (r *readChecker) onAcked(si int, end uint64) {
	r.floor[si] = max(r.floor[si], end)
}

// onFetched checks a fetch reply against its floor, then raises the floor to its confirmed tail.
// A request answered twice (a duplicated message) is checked each time.
func (r *readChecker) onFetched(s *Sim, si int, from uint16, req uint64, tail uint64) {
	st, ok := r.pending[req]
	if !ok || st.si != si {
		return
	}
	if st.gen == r.gen[si] {
		r.checked++
		if tail < st.floor {
			s.fail("stream %d: node %d answered a fetch sent at tick %d with confirmed tail %d, below %d "+
				"(confirmed and seen before the fetch began): a read went back in time",
				s.strs[si].st.ID, from, st.sent, tail, st.floor)
			return
		}
	}
	r.floor[si] = max(r.floor[si], tail)
}

// onAcceptedLoss starts stream si's floor again: what was confirmed before may be gone.
func (r *readChecker) onAcceptedLoss(si int) {
	r.floor[si] = 0
	r.gen[si]++
}
