package stream

import (
	"slices"
	"strings"

	"github.com/ringstream/ringstream/wire"
)

// cursorDeletesMax bounds the cursor deletes waiting for W copies; one more is refused as overloaded.
// Deletes are an operator's action, rare next to commits.
const cursorDeletesMax = 64

// pendingDelete is a cursor delete waiting until its tombstone, ending at end in the cursor log, is
// durable on W copies.
type pendingDelete struct {
	client    uint64
	requestID uint64
	end       uint64
	offset    uint64 // the cursor it deleted
}

// onListCursors answers a page of the cursor map in name order, with the confirmed tail and the
// retained head. An owner that has not proven its confirmed tail refuses as unavailable (retryable):
// a lag computed against a tail that is not yet the stream's would understate it.
func (c *Copy) onListCursors(client uint64, m *wire.ListCursors) {
	if !c.refuseRequest(client, m.RequestID, m.Stream, m.Incarnation) {
		return
	}
	if !c.readable() {
		c.refuse(client, m.RequestID, wire.CodeUnavailable, msgNotProven)
		return
	}
	c.cursorNames = c.cursorNames[:0]
	for name := range c.cursors {
		c.cursorNames = append(c.cursorNames, name)
	}
	slices.Sort(c.cursorNames) // the map's order never shows
	from := string(m.From)
	i, found := slices.BinarySearchFunc(c.cursorNames, from, strings.Compare)
	if found && m.After {
		i++
	}
	limit := min(int(m.Limit), wire.CursorListMax)
	end := min(i+limit, len(c.cursorNames))
	first := len(c.fx.cursorInfos) // a reply of the same step keeps its entries (an older array when this grows)
	for _, name := range c.cursorNames[i:end] {
		c.fx.cursorInfos = append(c.fx.cursorInfos, wire.CursorInfo{Consumer: c.fx.addText(name), Offset: *c.cursors[name]})
	}
	infos := c.fx.cursorInfos[first:len(c.fx.cursorInfos):len(c.fx.cursorInfos)]
	r := Reply{Client: client, Kind: ReplyListCursors, Cursors: infos}
	r.CursorList = wire.ListCursorsReply{RequestID: m.RequestID, Stream: c.cfg.Stream, Incarnation: c.cfg.Incarnation,
		ConfirmedTail: c.confirmed, Head: c.head, Total: uint32(len(c.cursorNames)), More: end < len(c.cursorNames)}
	c.fx.Replies = append(c.fx.Replies, r)
	clear(c.cursorNames) // keep no deleted consumer's name alive
}

// onDeleteCursor deletes a consumer's cursor: a tombstone appended to the cursor log, synced at once
// and answered once W copies hold it durably, as a produce is. A consumer without a cursor is answered
// at once, not found, and nothing is written.
func (c *Copy) onDeleteCursor(client uint64, m *wire.CursorRequest) {
	if !c.refuseRequest(client, m.RequestID, m.Stream, m.Incarnation) {
		return
	}
	p, ok := c.cursors[string(m.Consumer)]
	if !ok {
		r := Reply{Client: client, Kind: ReplyDeleteCursor}
		r.Cursor = wire.CursorReply{RequestID: m.RequestID, Stream: c.cfg.Stream, Incarnation: c.cfg.Incarnation}
		c.fx.Replies = append(c.fx.Replies, r)
		return
	}
	if c.deletes.len() >= cursorDeletesMax {
		c.refuse(client, m.RequestID, wire.CodeOverloaded, msgDeletesFull)
		return
	}
	off := *p
	h := BatchHeader{BaseOffset: c.cur.appended, Count: 1, Epoch: c.asg.Epoch}
	c.fx.Appends = append(c.fx.Appends, Append{Log: wire.LogCursors, Header: h, CursorName: m.Consumer, CursorDelete: true})
	c.cur.appended++
	delete(c.cursors, string(m.Consumer))
	c.fx.SyncCursors = true // the operator waits for it: no CursorSyncTicks delay
	c.deletes.push(pendingDelete{client: client, requestID: m.RequestID, end: c.cur.appended, offset: off})
}

// confirmDeletes answers the deletes whose tombstones W copies hold durably: the W-th highest of the
// owner's durable cursor tail and its followers' acknowledged ones, capped at the owner's.
func (c *Copy) confirmDeletes() {
	if c.deletes.len() == 0 {
		return
	}
	c.tails[0] = c.cur.durable
	for i := range c.followers {
		c.tails[i+1] = c.followers[i].cmatch
	}
	t := min(confirmedTail(c.tails, c.w), c.cur.durable)
	for c.deletes.len() > 0 && c.deletes.front().end <= t {
		d := c.deletes.front()
		r := Reply{Client: d.client, Kind: ReplyDeleteCursor}
		r.Cursor = wire.CursorReply{RequestID: d.requestID, Stream: c.cfg.Stream, Incarnation: c.cfg.Incarnation,
			Offset: d.offset, Found: true}
		c.fx.Replies = append(c.fx.Replies, r)
		c.deletes.pop()
	}
}

// refuseDeletes refuses every delete waiting for W copies: the copy can no longer confirm them. The
// tombstone may still reach a later owner; a retry there answers found or not found.
func (c *Copy) refuseDeletes(code wire.ErrorCode, msg string) {
	for c.deletes.len() > 0 {
		d := c.deletes.front()
		c.refuse(d.client, d.requestID, code, msg)
		c.deletes.pop()
	}
}
