package vsr

// BreakIgnoreLogView makes r pick the longest do-view-change log whatever its log view: the broken
// variant the simulator must catch.
func BreakIgnoreLogView(r *Replica) { r.brokenIgnoreLogView = true }

// CheckInvariantsForTest exposes the invariant check to this package's tests.
func (r *Replica) StatusForTest() string { return r.status.String() }
