package segment

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
)

// parkState is a log's descriptors while its copy is parked (Copy.Park): the log directory and the
// active segment are closed, and reopened through the ring when work needs them.
type parkState struct {
	parked  bool
	seg     *segment // the segment that was active when the log parked: the one reopened
	opening int      // reopen operations in flight
	dirfd   int      // reopened descriptors, until both are back
	segfd   int
	err     error
}

// Reopen operations' tag indexes.
const (
	unparkDir = 0
	unparkSeg = 1
)

// Park closes, through the ring, the descriptors a quiet copy holds between operations (its two log
// directories and its two active segments: segment's package doc), so an idle copy holds none. It
// returns whether the copy is parked. It parks only a copy that is open, runs no rare operation or
// seal, and whose logs have nothing queued or in flight; otherwise it returns false and changes
// nothing, except that cursor events waiting for a commit are asked to commit (Sync), so that a
// later Park can succeed. A parked copy works as before: an append, a sync or a seal reopens the
// files it needs through the ring first (two OPENATs per log, reported by completion like every
// other step, never a plain syscall); reads open the segment they read for themselves, as reads of
// closed segments do, and leave the copy parked; the rare operations reopen what they touch. A
// failed reopen fails the log (ErrFailed), as a failed write does. Parking loses nothing: every
// byte the copy reported durable was fdatasynced before, and closing a descriptor syncs nothing
// and needs nothing synced. Prewritten zeros past the data stay in the file (a clean Close still
// trims them; recovery cuts them after a crash).
func (c *Copy) Park() bool {
	if !c.ready || c.closed || c.job != nil || c.seal.active || c.seal.fenceOps > 0 {
		return false
	}
	if c.records.pk.parked && c.cursors.pk.parked {
		return true
	}
	quiet := true
	for _, l := range []*Log{c.records, c.cursors} {
		if l.failed != nil || l.shut || l.held {
			return false
		}
		if l.Busy() {
			l.Sync() // queued cursor events otherwise wait for the next record commit
			quiet = false
		}
	}
	if !quiet || !c.records.room(4) {
		return false // the next attempt
	}
	for _, l := range []*Log{c.records, c.cursors} {
		if !l.pk.parked {
			l.park()
		}
	}
	return true
}

// Parked says whether the copy is open and holds no descriptor (see Park).
func (c *Copy) Parked() bool { return c.ready && !c.closed && c.parkedLogs == 2 }

// Activity counts the copy's appends, reads and seals since it opened, and the reopens of its
// parked logs (a rare operation's, say a retention's, counts too). A host that sees it unchanged
// over its idle period parks the copy (Park); one that parked it and sees it unchanged since knows
// the copy is still parked.
func (c *Copy) Activity() uint64 { return c.activity }

// park closes the log's descriptors through the ring (closeFd); the log must be quiet.
func (l *Log) park() {
	assert.True(!l.Busy() && !l.pk.parked, "segment: parking a busy log")
	for _, s := range l.segs {
		if s.fd >= 0 {
			l.closeFd(s.fd)
			s.fd = -1
		}
	}
	if l.dirfd >= 0 {
		l.closeFd(l.dirfd)
		l.dirfd = -1
	}
	l.pk.parked, l.pk.seg = true, l.segs[len(l.segs)-1]
	if l.quiet != nil {
		l.quiet.logParked(true)
	}
}

// unpark queues the reopening of a parked log's directory and active segment; work waiting for
// them (a group commit, a seal digest) resumes from the completion. On a full ring the next Flush
// tries again.
func (l *Log) unpark() {
	pk := &l.pk
	if !pk.parked || pk.opening > 0 || l.failed != nil || l.shut || !l.room(2) {
		return
	}
	s := pk.seg // still active, or closed by appends queued since: their group needs it either way
	pk.dirfd, pk.segfd, pk.err = -1, -1, nil
	if err := l.r.Openat(l, makeTag(tagUnpark, unparkDir), unix.AT_FDCWD, l.dir, unix.O_RDONLY|unix.O_DIRECTORY, 0, 0); err != nil {
		l.unparkFailed(fmt.Errorf("queue openat %s: %w", l.dir, err))
		return
	}
	pk.opening++
	if err := l.r.Openat(l, makeTag(tagUnpark, unparkSeg), unix.AT_FDCWD, l.path(s.base), unix.O_RDWR, 0, 0); err != nil {
		pk.err = fmt.Errorf("queue openat %s: %w", l.path(s.base), err)
		return // the directory's completion ends the reopen
	}
	pk.opening++
}

// onUnpark takes one reopen completion; the last one ends the reopen.
func (l *Log) onUnpark(c ring.Completion) {
	pk := &l.pk
	assert.True(pk.opening > 0, "segment: reopen completion without reopen")
	pk.opening--
	switch err := c.Err(); {
	case err != nil && pk.err == nil:
		name := l.dir
		if tagIndex(c.Tag) == unparkSeg {
			name = l.path(pk.seg.base)
		}
		pk.err = fmt.Errorf("reopen %s: %w", name, err)
	case err != nil:
	case tagIndex(c.Tag) == unparkDir:
		pk.dirfd = int(c.Res)
	default:
		pk.segfd = int(c.Res)
	}
	if pk.opening > 0 {
		return
	}
	if pk.err != nil || l.shut {
		for _, fd := range []int{pk.dirfd, pk.segfd} {
			if fd >= 0 {
				l.closeFd(fd)
			}
		}
		pk.dirfd, pk.segfd = -1, -1
		if pk.err != nil {
			l.unparkFailed(pk.err)
		}
		return
	}
	l.dirfd, pk.seg.fd = pk.dirfd, pk.segfd
	pk.dirfd, pk.segfd, pk.parked, pk.seg = -1, -1, false, nil
	if l.activity != nil {
		*l.activity++ // a host that saw the copy parked and no activity since knows it still is
	}
	if l.quiet != nil {
		l.quiet.logParked(false)
	}
	l.Flush()
	l.wake()
}

// unparkFailed fails the log: the appends queued behind the reopen get the error, and so does a
// seal digest waiting for it.
func (l *Log) unparkFailed(err error) {
	if l.failed == nil {
		l.failed = fmt.Errorf("%w: %s log: %w", ErrFailed, l.kind, err)
	}
	l.log.Warn("segment: reopen of a parked log failed", "log", l.kind.String(), "dir", l.dir, "err", err)
	for _, a := range l.commit.pend.acks {
		l.events.AppendDone(l.kind, a.token, a.end, l.failed)
	}
	l.commit.pend.reset()
	l.commit.wantSync = false
	l.failDigestJobs()
	if l.quiet != nil {
		l.quiet.logQuiet(l)
	}
}

// unparkSync reopens a parked log on a rare path (a job or a ...Sync call), waiting for the reopen
// through the ring.
func (l *Log) unparkSync() error {
	for l.pk.parked {
		if l.failed != nil {
			return l.failed
		}
		if l.shut {
			return ErrClosed
		}
		l.unpark()
		if err := l.sr.turn(); err != nil {
			return fmt.Errorf("segment: reopen %s log: %w", l.kind, err)
		}
	}
	return l.failed
}

// at names the file name of the log directory for an *at call: relative to the directory's
// descriptor, or by its whole path while the log is parked.
func (l *Log) at(name string) (int, string) {
	if l.dirfd >= 0 {
		return l.dirfd, name
	}
	return unix.AT_FDCWD, filepath.Join(l.dir, name)
}
