package shard

import (
	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard/heartbeat"
)

// saveState tracks one group's superblock save (R12).
type saveState uint8

const (
	saveNone     saveState = iota // nothing pending: the group's entries may join a batch
	saveInFlight                  // the write and fdatasync are on the ring: the group waits
	saveDone                      // durable, entries not yet sent: they go in the turn's late batch or the next tick's
	saveFailed                    // failed or deferred: left out until a later tick asks again
)

// groupSlot is the shard's view of one group: the group, its heartbeat state and what the shard cached
// at the last tick. It is the ring Handler of the group's superblock saves, so a save's completion
// finds its group through the slot itself, never through a position in a slice, and a save of a
// group removed meanwhile completes on a slot the shard no longer holds.
type groupSlot struct {
	s       *Shard
	g       Group
	id      uint64
	role    Role
	view    uint32
	primIdx uint8
	self    uint8
	nodes   [heartbeat.MembersMax]uint16 // member index -> node id (0: not a member)
	links   [heartbeat.MembersMax]*link  // member index -> this shard's link to its node (nil: none)
	primary heartbeat.Primary
	backup  heartbeat.Backup
	save    saveState
	saveErr error
	late    bool // on s.late
	removed bool // taken off the shard (RemoveGroup); completions still arrive here
	saveOps int  // save operations of this slot on the ring
	// Sleeping (sleep.go): sleeper is g as a Sleeper (nil: never sleeps); asleep while off every
	// tick's poll; sleeps counts its sleeps (an older alarm is stale); onAwake while on s.awake.
	sleeper Sleeper
	asleep  bool
	onAwake bool
	sleeps  uint32
}

// issueSaves starts the superblock saves of every primary that owes entries and has one pending, all
// on the ring in one go: a write linked to an fdatasync per group (R12). A group whose save is still
// in flight from an earlier tick is not asked again until it completes.
func (s *Shard) issueSaves(polled []*groupSlot) {
	issued := 0
	for _, gs := range polled {
		if gs.role != RolePrimary || gs.save == saveInFlight {
			continue
		}
		if owed, _ := gs.primary.Owed(); owed == 0 {
			continue
		}
		sb, pending := gs.g.PendingSuperblock()
		if !pending {
			gs.save = saveNone
			continue
		}
		if issued == tickSaveLimit || !s.queueSave(gs, sb) {
			// No room on the ring this tick: the group hears that its save did not run, is left out of
			// this batch, and is tried again on a later tick (R12).
			gs.save = saveFailed
			gs.saveErr = ErrSaveDeferred
			s.stats.SuperblockSavesDeferred.Add(1)
			gs.g.SuperblockSaved(ErrSaveDeferred)
			continue
		}
		issued++
	}
	if issued > 0 {
		s.ring.Submit()
	}
}

// queueSave queues one group's write and fdatasync. It reports false when the ring has no room.
func (s *Shard) queueSave(gs *groupSlot, sb SuperblockSave) bool {
	if s.ring.InFlight()+2 > int(s.ring.Info().SQEntries) {
		return false
	}
	if err := s.ring.Write(gs, tagSaveWrite, sb.FD, sb.Buf, sb.Off, ring.Link); err != nil {
		return false
	}
	gs.saveOps++
	if err := s.ring.Fsync(gs, tagSaveSync, sb.FD, true, 0); err != nil {
		// The write is queued with Link and nothing after it: it still runs, and its completion is
		// ignored because the group is not in flight.
		return false
	}
	gs.saveOps++
	gs.save = saveInFlight
	s.stats.SuperblockSaves.Add(1)
	return true
}

// Complete receives the completions of the slot's superblock save.
func (gs *groupSlot) Complete(c ring.Completion) {
	gs.saveOps--
	switch c.Tag {
	case tagSaveWrite:
		if c.Res < 0 {
			gs.onSaveDone(c.Err(), false)
		}
	case tagSaveSync:
		gs.onSaveDone(c.Err(), true)
	default:
		assert.True(false, "shard: save completion with an unknown tag")
	}
}

// onSaveDone records a save's outcome. A group whose save completes after its tick's flush goes in
// the late batch at the end of this loop turn, with the commit point its superblock now holds: the
// other groups and the replies did not wait for it (R12, R28).
func (gs *groupSlot) onSaveDone(err error, sync bool) {
	if gs.save != saveInFlight {
		return // the write failed first and was already counted; this is its cancelled fdatasync
	}
	s := gs.s
	if gs.removed {
		gs.save = saveNone
		s.stats.SavesOfRemovedGroups.Add(1)
		return
	}
	if err != nil {
		gs.save = saveFailed
		gs.saveErr = err
		s.stats.SuperblockSaveFailures.Add(1)
		if owed, _ := gs.primary.Owed(); owed != 0 {
			s.stats.EntriesDeferredSave.Add(uint64(owed.Count()))
		}
		gs.g.SuperblockSaved(err)
		return
	}
	assert.True(sync, "shard: save done before its fdatasync")
	gs.save = saveDone
	gs.g.SuperblockSaved(nil)
	if !gs.late {
		gs.late = true
		s.late = append(s.late, gs)
	}
}

// flushLate sends the groups whose saves completed during this turn, one Commit batch per peer that
// holds any of them. Replies are not sent here: they leave with the tick's batches (R27).
func (s *Shard) flushLate() {
	if len(s.late) == 0 {
		return
	}
	for i, gs := range s.late {
		gs.late = false
		s.late[i] = nil
		if gs.removed || gs.save != saveDone || gs.role != RolePrimary {
			continue
		}
		gs.save = saveNone
		if owed, state := gs.primary.Owed(); owed != 0 {
			s.appendGroup(gs, owed, state)
		}
	}
	s.late = s.late[:0]
	for _, l := range s.links {
		l.endCommitBatch()
		l.kick()
	}
}
