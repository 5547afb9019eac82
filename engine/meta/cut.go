package meta

// Cut is where a copy's two logs must be cut to bring it onto the recorded history of an epoch
// (stream-failover spec, "Copies with a longer tail"). Record and Cursor are taken separately: each is
// the lowest start of its own log among the starts the rule picks. A cut at or past a log's tail
// leaves that log alone, so storage applies both as given.
type Cut struct {
	Record uint64
	Cursor uint64
}

// LogEpoch is one entry of a copy's log epochs as the cut rule reads it: from Epoch on, the copy's
// record log followed that epoch's owner from RecordStart and its cursor event log from CursorStart.
// (segment stores epochs as u64; a copy converts its entries, which never exceed the u32 epochs that
// meta and wire carry.)
type LogEpoch struct {
	Epoch       uint32
	RecordStart uint64
	CursorStart uint64
}

// OwnEpoch is the epoch whose owner's history a copy follows: the epoch of its last log-epochs entry,
// 0 for a copy with none. It is not the copy's fence: a seal advances the fence without new data, so
// a sealed copy still follows the history of its last log epoch.
func OwnEpoch(logEpochs []LogEpoch) uint32 {
	if len(logEpochs) == 0 {
		return 0
	}
	return logEpochs[len(logEpochs)-1].Epoch
}

// CutPoint says where the copy held by node, with its log epochs, must cut its logs before a role
// change at epoch target (or before it answers a seal fencing at target), given the stream's history
// starts in epoch order. The cut is the lowest history start recorded for an epoch after the copy's
// own (OwnEpoch) and up to target, the record and the cursor start each taken on its own. It returns
// ok false when no start applies and the copy keeps its logs:
//   - a copy already on the target history (own epoch at or past target) is left alone, so a
//     follower that caught up past a start never loses confirmed records;
//   - the start recorded for node itself is skipped: the owner of an epoch is never cut at its own
//     start. A start from a sealed recovery is exactly the copy's fenced tail, so skipping it changes
//     nothing; a start from an accepted owner loss is the tails the owner last published, which can
//     lag its log, and cutting there would drop the owner's own records.
//
// A log-epochs entry that starts exactly at the cut stays (segment keeps entries that start at the
// cut), so the copy's own epoch is unchanged and computing the cut again gives the same answer.
// Where the caller cuts below the retained head, or inside a batch, is storage's business.
func CutPoint(node uint16, logEpochs []LogEpoch, target uint32, starts []HistoryStart) (cut Cut, ok bool) {
	own := OwnEpoch(logEpochs)
	if own >= target {
		return Cut{}, false
	}
	for _, s := range starts {
		if s.Epoch <= own || s.Epoch > target || s.Node == node {
			continue
		}
		if !ok {
			cut, ok = Cut{Record: s.RecordStart, Cursor: s.CursorStart}, true
			continue
		}
		cut.Record = min(cut.Record, s.RecordStart)
		cut.Cursor = min(cut.Cursor, s.CursorStart)
	}
	return cut, ok
}

// SealThreshold is R = E - W + 1 for this assignment, with W from ConfirmCount (the path the owner
// confirms by), so the owner's W and the recovery's R cannot disagree.
func (a Assignment) SealThreshold() int {
	return a.Copies() - a.ConfirmCount() + 1
}
