package kafka

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// Where group state lives. A group's committed offsets are records in one of groupStreams internal
// streams, "__kafka_groups-N" with N the group id's FNV-1a hash mod groupStreams; the owner of that
// stream is the group's coordinator (FindCoordinator answers its Kafka broker). On the owner's node
// the coordinator of each internal stream lives on the stream's shard (shard.ShardOf of its id), in
// that shard's shardState.coords: every Kafka connection, on any shard, reaches it through
// shard.Node.Run, and its answers come back the same way. The coordinator rebuilds the offsets by
// reading the stream from its head to its confirmed tail the first time a request reaches it
// (load); membership (group) is in memory only. An OffsetCommit is one produce of one record per
// partition, answered once the stream's policy confirmed it.

// groupStreams is the number of internal streams the groups are spread over. It must never change
// on a cluster: a group's stream is its hash mod this.
const groupStreams = 8

// groupStreamPrefix starts the internal streams' names. A name without ".<partition>" is no
// topic: Metadata does not list them, and Kafka clients cannot produce to them.
const groupStreamPrefix = "__kafka_groups-"

// groupStreamName is the internal stream holding groupID's offsets.
func groupStreamName(groupID string) string {
	f := fnv.New32a()
	_, _ = f.Write([]byte(groupID))
	return groupStreamPrefix + strconv.Itoa(int(f.Sum32()%groupStreams))
}

// Coordinator timers.
const (
	groupTickEvery  = 100 * time.Millisecond // groups' session and rebalance timeouts are checked this often
	groupProbeEvery = time.Second            // a loaded coordinator checks it still owns its stream this often
	groupLoadBytes  = 1 << 20                // one fetch of a load
)

// coordState is where a coordinator is in its life.
type coordState uint8

const (
	coordLoading coordState = iota // reading the stream: requests wait (waiters)
	coordLoaded                    // serving
)

// partKey is one partition of one topic.
type partKey struct {
	topic     string
	partition int32
}

// committed is a committed offset as OffsetFetch answers it.
type committed struct {
	offset      int64
	leaderEpoch int32
	metadata    string
}

// coordinator is the group coordinator of one internal stream on this node: the groups whose stream
// it is, their members (in memory) and their committed offsets (rebuilt from the stream). It lives
// on its stream's shard and is used on that shard's goroutine only.
type coordinator struct {
	h       *Handler
	stream  uint64
	name    string
	state   coordState
	waiters []func(code int16)
	groups  map[string]*group
	offsets map[string]map[partKey]committed // by group
	// end is the stream's end as this coordinator knows it: what the load read, moved by each of its
	// own commits. A confirmed tail beyond it means another owner wrote meanwhile: reload.
	end       uint64
	inflight  int // commits submitted and not answered
	probing   bool
	lastProbe time.Time
	ids       memberIDs
	head      uint64 // the stream's retained head when the load began
	// incarnation is the stream's incarnation the load read: appends name it (a stream deleted
	// and made again refuses them), and a probe that finds another one unloads.
	incarnation uint32
	gone        bool  // unloaded: replies still in flight are dropped
	goneCode    int16 // the error it was unloaded with
	// groupRecs are the last group record of each group read by the load, restored when it ends.
	groupRecs map[string]*groupRecord
	// s and st are the home shard, where every method runs.
	s  *shard.Shard
	st *shardState
}

// coordinatorFor is the coordinator of internal stream id on this (its home) shard, made and
// loading when there is none.
func (h *Handler) coordinatorFor(s *shard.Shard, st *shardState, id uint64, name string) *coordinator {
	if c := st.coords[id]; c != nil {
		return c
	}
	var nb [6]byte
	_, _ = rand.Read(nb[:])
	c := &coordinator{h: h, stream: id, name: name, groups: make(map[string]*group),
		offsets: make(map[string]map[partKey]committed), ids: memberIDs{nonce: hex.EncodeToString(nb[:])},
		groupRecs: make(map[string]*groupRecord), s: s, st: st}
	st.coords[id] = c
	h.startGroupTicker(s.Index())
	h.gm.groupLoads.Inc()
	c.load(s, st)
	return c
}

// whenLoaded runs f once the coordinator is loaded (errNone) or found not to be one (its error),
// at once when that is known already: a load refused on this shard ends within coordinatorFor.
func (c *coordinator) whenLoaded(f func(code int16)) {
	switch {
	case c.gone:
		f(c.goneCode)
		return
	case c.state == coordLoaded:
		f(errNone)
		return
	}
	c.waiters = append(c.waiters, f)
}

// load reads the stream's head and confirmed tail from this node's copy (only the owner serves
// them: any other node is no coordinator), then every record between.
func (c *coordinator) load(s *shard.Shard, st *shardState) {
	h := c.h
	bg := &request{silent: true}
	rid := st.nextRequestID()
	b := wire.AppendListCursors(st.takeBuf(), h.from, &wire.ListCursors{RequestID: rid, Stream: c.stream, Limit: 1})
	h.submit(s, st, bg, rid, c.stream, b, func(s *shard.Shard, st *shardState, rep *reply) {
		if code, msg := rep.errorCode(); code != errNone {
			c.loadFailed(st, groupCodeOf(code), msg)
			return
		}
		lr, _, err := wire.DecodeListCursorsReply(&rep.h, rep.body)
		if err != nil {
			c.loadFailed(st, errCoordinatorNotAvailable, err.Error())
			return
		}
		c.head, c.incarnation = lr.Head, lr.Incarnation
		c.read(s, st, lr.Head, lr.ConfirmedTail)
	})
	st.giveBuf(b)
}

// read applies the records from off to tail, a fetch at a time.
func (c *coordinator) read(s *shard.Shard, st *shardState, off, tail uint64) {
	if off >= tail {
		c.end = tail
		c.state = coordLoaded
		c.lastProbe = time.Now()
		members := 0
		for id, rec := range c.groupRecs {
			if len(rec.members) > 0 {
				c.groups[id] = restoreGroup(rec, &c.ids, c, c.lastProbe)
				c.h.gm.groups.Inc()
				members += len(rec.members)
			}
		}
		c.groupRecs = nil
		c.h.log.Info("kafka: group coordinator loaded", "stream", c.name, "head", c.head, "tail", tail, "offset_groups", len(c.offsets),
			"groups_restored", len(c.groups), "members_restored", members)
		c.runWaiters(errNone)
		return
	}
	h := c.h
	bg := &request{silent: true}
	rid := st.nextRequestID()
	b := wire.AppendFetch(st.takeBuf(), h.from, &wire.Fetch{RequestID: rid, Stream: c.stream,
		Incarnation: c.incarnation, Offset: off, BytesMax: groupLoadBytes})
	h.submit(s, st, bg, rid, c.stream, b, func(s *shard.Shard, st *shardState, rep *reply) {
		if code, msg := rep.errorCode(); code != errNone {
			c.loadFailed(st, groupCodeOf(code), msg)
			return
		}
		fr, err := wire.DecodeFetchReply(&rep.h, rep.body)
		if err != nil {
			c.loadFailed(st, errCoordinatorNotAvailable, err.Error())
			return
		}
		next, err := c.applyBatches(fr.Batches, off)
		if err != nil || next <= off {
			c.loadFailed(st, errCoordinatorNotAvailable, "internal stream read made no progress")
			return
		}
		c.read(s, st, next, tail)
	})
	st.giveBuf(b)
}

// applyBatches applies the offset records of stored batches (a fetch reply's) and returns the
// offset after the last batch. A record that is no offset record is counted, logged and skipped.
func (c *coordinator) applyBatches(stored []byte, off uint64) (uint64, error) {
	le := binary.LittleEndian
	next := off
	for len(stored) > 0 {
		if len(stored) < sbHeaderSize {
			return next, ErrStoredBatch
		}
		n := int(le.Uint32(stored[sbPayloadLen:]))
		if n > len(stored)-sbHeaderSize {
			return next, ErrStoredBatch
		}
		hdr, payload := stored[:sbHeaderSize], stored[sbHeaderSize:sbHeaderSize+n]
		stored = stored[sbHeaderSize+n:]
		next = le.Uint64(hdr[sbBaseOffset:]) + uint64(le.Uint32(hdr[sbCount:]))
		if le.Uint16(hdr[sbVersion:]) != uint16(wire.FormatValues) || hdr[sbCodec] != codecNone {
			c.badRecord(errOffsetRecord)
			continue
		}
		err := eachValue(payload, func(v []byte) {
			if len(v) > 0 && v[0] == groupRecordKind {
				g, err := decodeGroupRecord(v)
				if err != nil {
					c.badRecord(err)
					return
				}
				c.groupRecs[g.group] = &g
				return
			}
			o, err := decodeOffsetRecord(v)
			if err != nil {
				c.badRecord(err)
				return
			}
			c.setOffset(&o)
		})
		if err != nil {
			c.badRecord(err)
		}
	}
	return next, nil
}

func (c *coordinator) badRecord(err error) {
	c.h.gm.groupBadRecords.Inc()
	c.h.log.Warn("kafka: internal group stream record skipped", "stream", c.name, "err", err)
}

func (c *coordinator) setOffset(o *offsetRecord) {
	m := c.offsets[o.group]
	if m == nil {
		m = make(map[partKey]committed)
		c.offsets[o.group] = m
	}
	m[partKey{o.topic, o.partition}] = committed{offset: o.offset, leaderEpoch: o.leaderEpoch, metadata: o.metadata}
}

func (c *coordinator) loadFailed(st *shardState, code int16, msg string) {
	c.h.gm.loadFailures.WithLabelValues(strconv.Itoa(int(code))).Inc()
	c.h.log.Debug("kafka: group coordinator not loaded", "stream", c.name, "code", code, "err", msg)
	c.unload(st, code)
}

func (c *coordinator) runWaiters(code int16) {
	ws := c.waiters
	c.waiters = nil
	for _, f := range ws {
		f(code)
	}
}

// unload drops the coordinator: what waits is answered code, every group's members are forgotten
// (they rejoin wherever FindCoordinator sends them). The next request makes a new one, which loads
// again.
func (c *coordinator) unload(st *shardState, code int16) {
	if c.gone {
		return
	}
	c.gone, c.goneCode = true, code
	if st.coords[c.stream] == c {
		delete(st.coords, c.stream)
	}
	c.runWaiters(code)
	for _, g := range c.groups {
		c.h.gm.members.Sub(float64(len(g.members)))
		g.abandon(code)
	}
	c.h.gm.groups.Sub(float64(len(c.groups)))
	clear(c.groups)
	if c.state == coordLoaded {
		c.h.log.Info("kafka: group coordinator unloaded", "stream", c.name, "code", code)
	}
}

// group is groupID's membership, made when make is set and there is none.
func (c *coordinator) group(id string, make bool) *group {
	g := c.groups[id]
	if g == nil && make {
		g = newGroup(id, &c.ids, c)
		c.groups[id] = g
		c.h.gm.groups.Inc()
	}
	return g
}

// memberAdded implements groupEvents.
func (c *coordinator) memberAdded(*group, string) { c.h.gm.members.Inc() }

// rebalanced implements groupEvents.
func (c *coordinator) rebalanced(g *group) {
	c.h.gm.rebalances.Inc()
	c.h.log.Info("kafka: group rebalanced", "group", g.id, "generation", g.generation, "members", len(g.members),
		"protocol", g.protocol, "leader", g.leader)
}

// memberRemoved implements groupEvents.
func (c *coordinator) memberRemoved(g *group, id, reason string) {
	c.h.gm.members.Dec()
	c.h.gm.membersRemoved.WithLabelValues(reason).Inc()
	c.h.log.Info("kafka: group member removed", "group", g.id, "member", id, "reason", reason)
}

// tick runs the groups' timeouts, drops groups with nothing left in memory, and probes the
// stream's ownership every groupProbeEvery.
func (c *coordinator) tick(s *shard.Shard, st *shardState, now time.Time) {
	if c.state != coordLoaded {
		return
	}
	for id, g := range c.groups {
		g.tick(now)
		if c.gone { // a group record's append found the stream gone: unloaded
			return
		}
		if g.idle() {
			delete(c.groups, id)
			c.h.gm.groups.Dec()
		}
	}
	if !c.probing && c.inflight == 0 && now.Sub(c.lastProbe) >= groupProbeEvery {
		c.probe(s, st, now)
	}
}

// probe asks this node's copy of the stream for its confirmed tail: a copy that is no owner any
// more, or a tail that moved past what this coordinator knows (another owner wrote meanwhile),
// unloads it.
func (c *coordinator) probe(s *shard.Shard, st *shardState, now time.Time) {
	h := c.h
	c.probing, c.lastProbe = true, now
	bg := &request{silent: true}
	rid := st.nextRequestID()
	b := wire.AppendListCursors(st.takeBuf(), h.from, &wire.ListCursors{RequestID: rid, Stream: c.stream, Limit: 1})
	h.submit(s, st, bg, rid, c.stream, b, func(s *shard.Shard, st *shardState, rep *reply) {
		c.probing = false
		if c.gone {
			return
		}
		code, msg := rep.errorCode()
		switch groupCodeOf(code) {
		case errNone:
		case errNotCoordinator:
			h.log.Info("kafka: group coordinator lost its stream", "stream", c.name, "err", msg)
			c.unload(st, errNotCoordinator)
			return
		default:
			return // passing: asked again at the next probe
		}
		lr, _, err := wire.DecodeListCursorsReply(&rep.h, rep.body)
		if err != nil || c.inflight > 0 {
			return
		}
		if lr.ConfirmedTail != c.end || lr.Incarnation != c.incarnation {
			h.log.Info("kafka: group stream written elsewhere, reloading", "stream", c.name, "known", c.end,
				"confirmed", lr.ConfirmedTail, "incarnation", c.incarnation, "now", lr.Incarnation)
			c.unload(st, errNotCoordinator)
		}
	})
	st.giveBuf(b)
}

// commitEntry is one partition of an OffsetCommit, with where its answer goes.
type commitEntry struct {
	rec  offsetRecord
	code *int16
}

// commit appends entries as one batch of offset records to the stream and, once it is confirmed,
// records them and sets each entry's code (errNone); then done. A refused append sets every entry's
// code to the group error of the refusal.
func (c *coordinator) commit(entries []commitEntry, done func()) {
	var payload, rec []byte
	for i := range entries {
		rec = appendOffsetRecord(rec[:0], &entries[i].rec)
		payload = appendValue(payload, rec)
	}
	c.appendRecords(payload, len(entries), func(code int16) {
		for i := range entries {
			*entries[i].code = code
		}
		switch {
		case code == errNone:
			if !c.gone {
				for i := range entries {
					c.setOffset(&entries[i].rec)
				}
			}
			c.h.gm.offsetCommits.Add(float64(len(entries)))
		default:
			c.h.metrics.errorCode(offsetCommitKey, code)
		}
		done()
	})
}

// groupRecordMax bounds a group record written: a group whose record would be larger is not
// recorded (its members rejoin after a coordinator move, as without one).
const groupRecordMax = 1 << 20

// persistGroup appends g's group record, not waited for by anyone: a record lost only makes the
// members rejoin after a coordinator move.
func (c *coordinator) persistGroup(g *group) {
	rec := g.record()
	value := appendGroupRecord(nil, &rec)
	if len(value) > groupRecordMax {
		c.h.gm.groupWriteFailures.Inc()
		c.h.log.Warn("kafka: group record too large, not written", "group", g.id, "bytes", len(value))
		return
	}
	c.appendRecords(appendValue(nil, value), 1, func(code int16) {
		if code != errNone {
			c.h.gm.groupWriteFailures.Inc()
			c.h.log.Info("kafka: group record not written", "group", g.id, "generation", rec.generation, "code", code)
		}
	})
}

// appendRecords produces payload (count records of format 1) to the stream and calls done with the
// group error of the answer (errNone: confirmed). A stream this node no longer owns unloads the
// coordinator.
func (c *coordinator) appendRecords(payload []byte, count int, done func(code int16)) {
	h, s, st := c.h, c.s, c.st
	bg := &request{silent: true}
	rid := st.nextRequestID()
	b := wire.AppendProduce(st.takeBuf(), h.from, &wire.Produce{RequestID: rid, Stream: c.stream,
		Incarnation: c.incarnation, Format: wire.FormatValues, Count: uint32(count), Batch: payload})
	c.inflight++
	h.submit(s, st, bg, rid, c.stream, b, func(s *shard.Shard, st *shardState, rep *reply) {
		c.inflight--
		code, msg := rep.errorCode()
		gcode := groupCodeOf(code)
		if code == errNone {
			pr, err := wire.DecodeProduceReply(&rep.h, rep.body)
			if err != nil {
				code, gcode, msg = errUnknownServer, errUnknownServer, err.Error()
			} else {
				c.end = max(c.end, pr.BaseOffset+uint64(count))
			}
		}
		if gcode == errNotCoordinator {
			h.log.Info("kafka: group coordinator lost its stream on an append", "stream", c.name, "err", msg)
			c.unload(st, errNotCoordinator)
		} else if code != errNone {
			h.log.Debug("kafka: internal group stream append refused", "stream", c.name, "code", code, "err", msg)
		}
		done(gcode)
	})
	st.giveBuf(b)
}

// stable implements groupEvents: the generation's assignment is recorded.
func (c *coordinator) stable(g *group) { c.persistGroup(g) }

// emptied implements groupEvents: the group is recorded without members, so that a coordinator that
// takes over does not bring them back.
func (c *coordinator) emptied(g *group) { c.persistGroup(g) }

// startGroupTicker starts, once, the goroutine that runs the coordinators' timers: every
// groupTickEvery it runs tickCoordinators on each shard that holds one. It ends when the node stops.
func (h *Handler) startGroupTicker(shardIndex int) {
	h.groupShards[shardIndex].Store(true)
	h.tickerOnce.Do(func() {
		go func() {
			t := time.NewTicker(groupTickEvery)
			defer t.Stop()
			for range t.C {
				for i := range h.groupShards {
					if !h.groupShards[i].Load() {
						continue
					}
					err := h.cfg.Shards.Run(i, h.tickCoordinators)
					if errors.Is(err, shard.ErrStopped) {
						return
					}
				}
			}
		}()
	})
}

// tickCoordinators runs the timers of the coordinators on s.
func (h *Handler) tickCoordinators(s *shard.Shard) {
	st := &h.shards[s.Index()]
	now := time.Now()
	for _, c := range st.coords {
		c.tick(s, st, now)
	}
}
