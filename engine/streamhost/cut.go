package streamhost

import (
	"errors"
	"fmt"

	"github.com/ringstream/ringstream/segment"
)

// cutWork is the cut a seal (tagSealCut) or an assignment (tagApplyCut) runs.
type cutWork struct {
	tag      uint64
	rec, cur uint64
}

// startCut runs the cut of both logs onto rec and cur as a job; Done reports it (cutDone).
func (cg *copyGroup) startCut(tag, rec, cur uint64) error {
	cg.cut = cutWork{tag: tag, rec: rec, cur: cur}
	return cg.seg.Cut(tag, rec, cur)
}

// cutDone takes the end of a cut. One that fell inside a batch (a start recorded by another owner's
// batching) reads the batch that holds it and cuts again at the batch's start: the copy fetches the
// rest from its owner. Other outcomes go to the seal or the assignment that asked.
func (cg *copyGroup) cutDone(r segment.Result) {
	if r.Err == nil {
		cg.cutSinceScan = true // the protocol copy's knowledge of the logs is stale
	}
	if errors.Is(r.Err, segment.ErrNotBoundary) {
		if err := cg.read(cg.seg.Records(), tagBoundary, cg.cut.rec, scanBytes); err == nil {
			return // boundaryDone goes on
		}
	}
	cg.cutEnded(r.Err)
}

func (cg *copyGroup) cutEnded(err error) {
	if cg.cut.tag == tagSealCut {
		cg.sealCutDone(err)
	} else {
		cg.applyCutDone(err)
	}
}

// boundaryDone: the read of the batch holding the cut ended; the cut runs again at its start.
func (cg *copyGroup) boundaryDone(b *buffer, data []byte, err error) {
	defer cg.h.pool.unref(b)
	if err == nil {
		it := segment.NewBatchIter(data, cg.cut.rec)
		h, _, ok := it.Next()
		switch {
		case ok && h.BaseOffset < cg.cut.rec:
			cg.h.stats.CutsInsideBatch++
			if err = cg.startCut(cg.cut.tag, h.BaseOffset, cg.cut.cur); err == nil {
				return
			}
		case it.Err() != nil:
			err = it.Err()
		default:
			err = fmt.Errorf("streamhost: stream %d: no batch holds the cut at %d", cg.spec.Stream, cg.cut.rec)
		}
	}
	cg.cutEnded(err)
}
