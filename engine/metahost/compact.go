package metahost

import (
	"fmt"
	"math"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/ring"
)

// Log compaction after a checkpoint, every step on shard 0's ring: read the log file; open log.new;
// write the header area as read (the superblock copies of both areas) and the records past the
// checkpoint to it and fdatasync; rename it over the log and fsync the directory
// (linked, so the fsync covers the rename). Until the rename the old log holds everything; after it the
// new one holds every record the superblock's chain can reach; the directory fsync makes the rename
// durable before any append lands in the new file. Compaction is maintenance: when the ring has no
// room for a step, it is given up (log.new is truncated by the next one) and the next checkpoint tries
// again. The next persist waits until it is over.

// startCompaction begins the rewrite of the log without the records at or below snapOp, which the
// durable superblock names as checkpointed.
func (s *metaStore) startCompaction(id, snapOp uint64) {
	s.cur = metaPersist{id: id}
	if s.logEnd == 0 {
		s.kick() // nothing to rewrite
		return
	}
	size := metaHeaderSize + s.logEnd
	if size > math.MaxInt32 || !s.room(1) {
		s.skipCompaction("no room on the ring, or a log too large for one read")
		return
	}
	s.compact = metaCompaction{snapOp: snapOp, old: make([]byte, size), fd: -1}
	s.want[0] = int32(size)
	if err := s.rg.Read(s, 0, s.logFD, s.compact.old, 0, 0); err != nil {
		s.skipCompaction(err.Error())
		return
	}
	s.stage, s.pending = stageCompactRead, 1
}

func (s *metaStore) room(n int) bool { return s.rg.InFlight()+n <= int(s.rg.Info().SQEntries) }

// skipCompaction gives this compaction up and starts the next persist.
func (s *metaStore) skipCompaction(why string) {
	s.log.Warn("metadata log compaction skipped", "checkpoint_op", s.compact.snapOp, "why", why)
	if s.compact.fd >= 0 {
		_ = unix.Close(s.compact.fd)
	}
	s.compact = metaCompaction{fd: -1}
	s.kick()
}

// nextCompactionStage queues the step after stage, which completed without error. It reports whether
// a step is in flight; when not, the compaction is over (done or given up) and the caller kicks.
func (s *metaStore) nextCompactionStage(stage metaStage) bool {
	c := &s.compact
	queued := 0
	var err error
	switch stage {
	case stageCompactRead:
		if err := c.keepLive(); err != nil {
			s.fail(s.cur.id, err)
			return true // failed: nothing more runs
		}
		if !s.room(1) {
			s.skipCompaction("no room on the ring to open " + metaLogFile + ".new")
			return true
		}
		s.stage = stageCompactOpen
		if err = s.rg.Openat(s, 0, s.dirFD, metaLogFile+".new", unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC,
			0o644, 0); err == nil {
			queued++
		}
	case stageCompactOpen:
		if !s.room(2) {
			s.skipCompaction("no room on the ring to write " + metaLogFile + ".new")
			return true
		}
		s.want[0] = int32(len(c.kept))
		s.stage = stageCompactWrite
		if err = s.rg.Write(s, 0, c.fd, c.kept, 0, ring.Link); err == nil {
			queued++
			if err = s.rg.Fsync(s, 1, c.fd, true, 0); err == nil {
				queued++
			}
		}
	case stageCompactWrite:
		if !s.room(2) {
			s.skipCompaction("no room on the ring to rename " + metaLogFile + ".new")
			return true
		}
		s.stage = stageCompactRename
		fl := ring.Link
		if s.brokenNoDirSync {
			fl = 0
		}
		if err = s.rg.RenameAt(s, 0, s.dirFD, metaLogFile+".new", s.dirFD, metaLogFile, 0, fl); err == nil {
			queued++
			if !s.brokenNoDirSync {
				if err = s.rg.Fsync(s, 1, s.dirFD, false, 0); err == nil {
					queued++
				}
			}
		}
	case stageCompactRename:
		s.installCompacted()
		return false
	}
	s.pending = queued
	if err != nil {
		// What is queued of this step still completes; the compaction fails then.
		s.opErr = fmt.Errorf("queue: %w", err)
		if queued == 0 {
			s.finish()
		}
		return true
	}
	if _, err := s.rg.Submit(); err != nil {
		s.log.Warn("metadata log compaction: submit", "err", err) // the shard's Wait submits again
	}
	return true
}

// keepLive keeps the header area as read and the records of the log that are past the checkpoint.
func (c *metaCompaction) keepLive() error {
	c.kept = make([]byte, 0, metaHeaderSize+(len(c.old)-metaHeaderSize)/2)
	c.kept = append(c.kept, c.old[:metaHeaderSize]...)
	for off := metaHeaderSize; off < len(c.old); {
		e, n, err := vsr.DecodeLogRecord(c.old[off:])
		if err != nil {
			return fmt.Errorf("%w: compact: record at %d: %w", ErrStorage, off, err)
		}
		if e.Op > c.snapOp {
			c.kept = append(c.kept, c.old[off:off+n]...)
		}
		off += n
	}
	return nil
}

// installCompacted appends to the new log from its end; the old log's fd is closed.
func (s *metaStore) installCompacted() {
	c := &s.compact
	_ = unix.Close(s.logFD)
	snapOp, before, after := c.snapOp, len(c.old)-metaHeaderSize, len(c.kept)-metaHeaderSize
	s.logFD, s.logEnd = c.fd, int64(after)
	s.compact = metaCompaction{fd: -1}
	s.log.Info("metadata log compacted", "checkpoint_op", snapOp, "bytes_before", before, "bytes_after", after)
}
