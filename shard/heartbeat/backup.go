package heartbeat

// Backup is the heartbeat side of one group this node follows: it watches the primary of its current
// view. The zero Backup is stopped; Follow starts it.
type Backup struct {
	ticks   Ticks
	running bool

	view          uint32
	primary       uint8
	lastTimestamp uint64
	restartTick   uint64
	timeoutTicks  uint64
	silent        bool
}

// Follow starts watching member index primary as the primary of view at tick now, with the busy
// timeout. Call it when the group becomes a backup or moves to a new view.
func (b *Backup) Follow(t Ticks, now uint64, view uint32, primary uint8) {
	*b = Backup{ticks: t, running: true, view: view, primary: primary, restartTick: now,
		timeoutTicks: t.HeartbeatTimeoutTicks}
}

// Stop stops watching (the group became primary or went offline).
func (b *Backup) Stop() { b.running = false }

// Running says whether the backup is watching a primary.
func (b *Backup) Running() bool { return b.running }

// TimeoutTicks is the timeout the last restart chose (R22).
func (b *Backup) TimeoutTicks() uint64 { return b.timeoutTicks }

// CommitVerdict says what one Commit entry did to the backup's timeout.
type CommitVerdict uint8

const (
	CommitRestarted  CommitVerdict = iota + 1 // newer, from the current primary: timeout restarted
	CommitBadState                            // heartbeat_state is not Busy, Idle or Eager (R21, R17)
	CommitNotBackup                           // the group is not following a primary
	CommitOldView                             // from an older view
	CommitViewAhead                           // from a newer view: the group must catch up (R8)
	CommitNotPrimary                          // replica is not the primary of the current view (R8)
	CommitNotNewer                            // same view, timestamp not above the newest seen (R22)
)

// Accepted says whether the entry was a newer Commit from the current primary.
func (v CommitVerdict) Accepted() bool { return v == CommitRestarted }

// OnCommit handles one Commit entry at tick now. Only a newer Commit (same view, higher
// timestamp_monotonic) from the primary of the current view restarts the timeout (R8, R22); Idle
// chooses commit_idle_heartbeat_timeout, Busy and Eager commit_heartbeat_timeout.
func (b *Backup) OnCommit(now uint64, view uint32, timestamp uint64, state State, replica uint8) CommitVerdict {
	switch {
	case !state.Valid():
		return CommitBadState
	case !b.running:
		return CommitNotBackup
	case view < b.view:
		return CommitOldView
	case view > b.view:
		return CommitViewAhead
	case replica != b.primary:
		return CommitNotPrimary
	case timestamp <= b.lastTimestamp:
		return CommitNotNewer
	}
	b.lastTimestamp = timestamp
	b.restartTick = now
	b.silent = false
	if state == StateIdle {
		b.timeoutTicks = b.ticks.IdleHeartbeatTimeoutTicks
	} else {
		b.timeoutTicks = b.ticks.HeartbeatTimeoutTicks
	}
	return CommitRestarted
}

// SilentAt is the tick at which Silent will report the primary silent if no newer Commit restarts
// the timeout first; the largest tick when it will not report (stopped, or reported already).
func (b *Backup) SilentAt() uint64 {
	if !b.running || b.silent {
		return ^uint64(0)
	}
	return b.restartTick + b.timeoutTicks
}

// Silent reports, once per restart, that at tick now the timeout expired: the primary is silent.
func (b *Backup) Silent(now uint64) bool {
	if !b.running || b.silent || now-b.restartTick < b.timeoutTicks {
		return false
	}
	b.silent = true
	return true
}
