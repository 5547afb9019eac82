package vsr

// BreakIgnoreLogView makes r pick the longest do-view-change log whatever its log view: the broken
// variant the simulator must catch (broken_test.go).
func BreakIgnoreLogView(r *Replica) { r.brokenIgnoreLogView = true }
