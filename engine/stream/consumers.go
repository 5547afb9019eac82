package stream

import (
	"github.com/ringstream/ringstream/wire"
)

// fetchSlot is one fetch held for the confirmed tail (parked) or reading the log.
type fetchSlot struct {
	inUse    bool
	reading  bool
	client   uint64
	req      wire.Fetch
	deadline uint64 // tick at which a parked fetch is answered empty
	gen      uint32
}

// onFetch serves confirmed records from the requested offset: a read when records are confirmed
// there, else a long poll until they are or WaitMs runs out. An owner that cannot yet prove its
// confirmed tail (readable) holds a long poll until it can, and refuses a fetch that does not wait
// as unavailable: it never answers a tail below one a reader may have seen before.
func (c *Copy) onFetch(client uint64, m *wire.Fetch) {
	if !c.refuseRequest(client, m.RequestID, m.Stream, m.Incarnation) {
		return
	}
	if m.Offset < c.head {
		c.refuse(client, m.RequestID, wire.CodeInvalidRequest, msgBelowHead)
		return
	}
	if m.WaitMs == 0 && !c.readable() {
		c.refuse(client, m.RequestID, wire.CodeUnavailable, msgNotProven)
		return
	}
	if m.Offset >= c.confirmed && m.WaitMs == 0 {
		c.fetchEmpty(client, m)
		return
	}
	i := c.freeFetchSlot()
	if i < 0 {
		c.refuse(client, m.RequestID, wire.CodeOverloaded, msgFetchesFull)
		return
	}
	f := &c.fetches[i]
	f.inUse, f.client, f.req = true, client, *m
	f.req.Stream, f.req.Incarnation = c.cfg.Stream, c.cfg.Incarnation
	if m.Offset < c.confirmed && c.readable() {
		c.startFetchRead(i)
		return
	}
	ticks := (uint64(m.WaitMs) + uint64(c.cfg.TickMs) - 1) / uint64(c.cfg.TickMs)
	f.deadline = c.now + min(ticks, c.cfg.FetchWaitTicksMax)
	c.parked++
}

func (c *Copy) freeFetchSlot() int {
	if c.fetches == nil {
		c.fetches = make([]fetchSlot, c.cfg.FetchesMax)
	}
	for i := range c.fetches {
		if !c.fetches[i].inUse {
			return i
		}
	}
	return -1
}

func (c *Copy) freeFetch(i int) {
	f := &c.fetches[i]
	if f.inUse && !f.reading {
		c.parked--
	}
	gen := f.gen + 1
	*f = fetchSlot{gen: gen}
}

func (c *Copy) startFetchRead(i int) {
	f := &c.fetches[i]
	bytes := min(int(f.req.BytesMax), c.cfg.ReadBytes)
	bytes = max(bytes, c.cfg.BatchHeaderBytes+c.cfg.BatchBytesMax)
	f.reading = true
	c.fx.Reads = append(c.fx.Reads, Read{Tag: makeTag(tagFetch, i, f.gen), Log: wire.LogRecords, From: f.req.Offset, BytesMax: bytes})
}

// fetchEmpty answers a fetch with no records: nothing is confirmed at its offset yet.
func (c *Copy) fetchEmpty(client uint64, m *wire.Fetch) {
	r := Reply{Client: client, Kind: ReplyFetch}
	r.Fetch = wire.FetchReply{RequestID: m.RequestID, Stream: c.cfg.Stream, Incarnation: c.cfg.Incarnation,
		BaseOffset: min(m.Offset, c.confirmed), ConfirmedTail: c.confirmed}
	c.fx.Replies = append(c.fx.Replies, r)
}

// fetchRead answers fetch i with the confirmed batches its read found: whole batches from the one
// holding the offset asked for, at least one, then up to BytesMax bytes and RecordsMax records.
func (c *Copy) fetchRead(i int, gen uint32, data []byte, err error) {
	if i >= len(c.fetches) || !c.fetches[i].inUse || !c.fetches[i].reading || c.fetches[i].gen != gen {
		c.stats.Ignored[IgnoreStaleRead]++
		return
	}
	f := &c.fetches[i]
	client, req := f.client, f.req
	c.freeFetch(i)
	switch {
	case c.role != RoleOwner:
		c.refuse(client, req.RequestID, wire.CodeFenced, msgSealed)
		return
	case c.failed:
		c.refuse(client, req.RequestID, wire.CodeLogFailed, msgLogFailed)
		return
	case err != nil:
		c.refuse(client, req.RequestID, wire.CodeInternal, msgReadFailed)
		return
	}
	r := c.takeRun(data, req.Offset, c.confirmed, int(req.BytesMax), uint64(req.RecordsMax))
	if r.start < 0 {
		c.fetchEmpty(client, &req)
		return
	}
	base := r.next - r.count
	reply := Reply{Client: client, Kind: ReplyFetch}
	reply.Fetch = wire.FetchReply{RequestID: req.RequestID, Stream: c.cfg.Stream, Incarnation: c.cfg.Incarnation,
		BaseOffset: base, Count: uint32(r.count), ConfirmedTail: c.confirmed, Batches: data[r.start:r.end]}
	c.fx.Replies = append(c.fx.Replies, reply)
}

// wakeFetches starts the reads of parked fetches whose offset the confirmed tail passed.
func (c *Copy) wakeFetches() {
	if c.parked == 0 || !c.readable() {
		return
	}
	for i := range c.fetches {
		f := &c.fetches[i]
		if f.inUse && !f.reading && f.req.Offset < c.confirmed {
			c.parked--
			c.startFetchRead(i)
		}
	}
}

// onFetchTick answers the parked fetches whose wait ran out.
func (c *Copy) onFetchTick() {
	if c.parked == 0 {
		return
	}
	for i := range c.fetches {
		f := &c.fetches[i]
		if f.inUse && !f.reading && c.now >= f.deadline {
			client, req := f.client, f.req
			c.freeFetch(i)
			if !c.readable() {
				c.refuse(client, req.RequestID, wire.CodeUnavailable, msgNotProven)
				continue
			}
			c.fetchEmpty(client, &req)
		}
	}
}

// onCommitCursor appends a cursor event on the owner's cursor log. It gets no fsync of its own: the
// owner syncs queued events within CursorSyncTicks, and followers receive them once durable. The
// commit is answered at once: a cursor lost to a crash only makes a reader see records again.
func (c *Copy) onCommitCursor(client uint64, m *wire.CursorRequest) {
	if !c.refuseRequest(client, m.RequestID, m.Stream, m.Incarnation) {
		return
	}
	if m.Offset > c.confirmed && !c.readable() {
		c.refuse(client, m.RequestID, wire.CodeUnavailable, msgNotProven)
		return
	}
	if m.Offset > c.confirmed {
		c.refuse(client, m.RequestID, wire.CodeInvalidRequest, msgCursorTooFar)
		return
	}
	h := BatchHeader{BaseOffset: c.cur.appended, Count: 1, Epoch: c.asg.Epoch}
	c.fx.Appends = append(c.fx.Appends, Append{Log: wire.LogCursors, Header: h, CursorName: m.Consumer, CursorOffset: m.Offset})
	c.cur.appended++
	c.setCursor(m.Consumer, m.Offset)
	if c.cursorDue == 0 {
		c.cursorDue = c.now + c.cfg.CursorSyncTicks
	}
	r := Reply{Client: client, Kind: ReplyCommitCursor}
	r.Cursor = wire.CursorReply{RequestID: m.RequestID, Stream: c.cfg.Stream, Incarnation: c.cfg.Incarnation, Offset: m.Offset, Found: true}
	c.fx.Replies = append(c.fx.Replies, r)
}

// onGetCursor answers a consumer's last committed offset.
func (c *Copy) onGetCursor(client uint64, m *wire.CursorRequest) {
	if !c.refuseRequest(client, m.RequestID, m.Stream, m.Incarnation) {
		return
	}
	r := Reply{Client: client, Kind: ReplyGetCursor}
	r.Cursor = wire.CursorReply{RequestID: m.RequestID, Stream: c.cfg.Stream, Incarnation: c.cfg.Incarnation}
	if p, ok := c.cursors[string(m.Consumer)]; ok {
		r.Cursor.Offset, r.Cursor.Found = *p, true
	}
	c.fx.Replies = append(c.fx.Replies, r)
}

func (c *Copy) setCursor(name []byte, off uint64) {
	if p, ok := c.cursors[string(name)]; ok {
		*p = off
		return
	}
	if c.cursors == nil {
		c.cursors = make(map[string]*uint64)
	}
	v := off
	c.cursors[string(name)] = &v
}
