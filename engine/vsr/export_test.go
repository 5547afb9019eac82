package vsr

// BreakIgnoreLogView makes r pick the longest do-view-change log whatever its log view: the broken
// variant the simulator must catch (broken_test.go).
func BreakIgnoreLogView(r *Replica) { r.broken.ignoreLogView = true }

// BreakPrepareOKEarly makes r acknowledge a prepare before the entry is durable.
func BreakPrepareOKEarly(r *Replica) { r.broken.prepareOKEarly = true }

// BreakViewChangeEarly makes r send do-view-change and start-view before the log they carry is durable.
func BreakViewChangeEarly(r *Replica) { r.broken.viewChangeEarly = true }

// BreakSkipRecovery makes r, if it starts in recovery, skip it: it takes part at once with the empty
// state it has.
func BreakSkipRecovery(r *Replica) { r.skipRecovery() }

// BreakMixChunks makes r assemble a checkpoint from chunks of whichever checkpoints come and install it
// unchecked (transfer.go).
func BreakMixChunks(r *Replica) { r.broken.mixChunks = true }
