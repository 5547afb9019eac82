package streamsim

import (
	"encoding/binary"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

// producer sends one batch at a time to the stream's owner (as the metadata state names it) and
// waits for its confirm, retrying the same sequence until it is answered.
type producer struct {
	id      uint64
	si      int
	seq     uint64
	count   uint32
	waiting bool
	retryAt uint64
	since   uint64 // tick the waiting batch was first sent
}

// consumer fetches a stream from the owner below the confirmed tail and commits its cursor. A
// consumer with cached set keeps sending to the node that last answered it, as a client with a
// cached route does, until that node refuses it or stays silent for routeTimeoutTicks: an old owner
// that still serves after its failover is read from.
type consumer struct {
	si     int
	next   uint64
	sendAt uint64
	cached bool
	route  uint16 // cached: the node that last answered; 0: look the owner up
	heard  uint64 // cached: tick of the last answer
}

// routeTimeoutTicks is how long a cached-route consumer waits for an answer before it looks the
// owner up again.
const routeTimeoutTicks = 20

type workload struct {
	producers []producer
	consumers []consumer
	acked     map[ackKey]uint64 // acknowledged batch -> base offset
	requests  uint64
	byPID     map[uint64]int // producer id (the client id of its requests) -> index in producers
	nextPID   uint64
}

type ackKey struct {
	stream uint64
	pid    uint64
	seq    uint64
}

// retryTicks is how long a producer waits for an answer before it sends again.
const retryTicks = 12

// fetchWaitMs is the wait of a consumer's long poll: 3 ticks at the copies' default TickMs.
const fetchWaitMs = 30

func (w *workload) init(s *Sim) {
	w.acked = make(map[ackKey]uint64)
	w.byPID = make(map[uint64]int)
	for si := range s.strs {
		for range 2 {
			w.nextPID++
			w.byPID[w.nextPID] = len(w.producers)
			w.producers = append(w.producers, producer{id: w.nextPID, si: si})
		}
		w.consumers = append(w.consumers, consumer{si: si}, consumer{si: si, cached: true})
	}
}

func payloadOf(pid, seq uint64, size int) []byte {
	b := make([]byte, size)
	binary.LittleEndian.PutUint64(b, pid)
	binary.LittleEndian.PutUint64(b[8:], seq)
	return b
}

func (w *workload) owner(s *Sim, si int) uint16 {
	a, _ := s.meta.state.Assignment(s.strs[si].st.ID)
	return a.Owner
}

// step sends what is due: new batches and retries, fetches, cursor commits.
func (w *workload) step(s *Sim) {
	for i := range w.producers {
		p := &w.producers[i]
		if p.waiting && s.now < p.retryAt {
			continue
		}
		if !p.waiting {
			if s.rng.IntN(3) != 0 {
				continue
			}
			p.seq++
			p.count = 1 + uint32(s.rng.IntN(3))
			p.waiting, p.since = true, s.now
		}
		p.retryAt = s.now + retryTicks
		w.produce(s, p, w.owner(s, p.si))
	}
	for i := range w.consumers {
		c := &w.consumers[i]
		if s.now < c.sendAt {
			continue
		}
		c.sendAt = s.now + 4
		st := s.strs[c.si].st
		to := w.owner(s, c.si)
		client := uint64(1000 + c.si)
		if c.cached {
			to, client = c.routeTo(s, to), uint64(3000+c.si)
		}
		w.requests++
		m := stream.Message{Kind: stream.KindFetch, Client: client}
		m.Fetch = wire.Fetch{RequestID: w.requests, Stream: st.ID, Incarnation: st.Incarnation, Offset: c.next,
			BytesMax: 2048, RecordsMax: 64}
		if w.requests%3 == 0 {
			m.Fetch.WaitMs = fetchWaitMs // a long poll (no draw: the seeds' runs stay as they were)
		}
		s.reads.onFetchSent(s, c.si, w.requests)
		s.send(envelope{from: clientNode, to: to, kind: kindRequest, stream: st.ID, request: m})
		if !c.cached && s.rng.IntN(5) == 0 {
			m := stream.Message{Kind: stream.KindCommitCursor, Client: uint64(2000 + c.si)}
			m.Cursor = wire.CursorRequest{RequestID: w.requests, Stream: st.ID, Incarnation: st.Incarnation,
				Consumer: []byte("c1"), Offset: c.next}
			s.send(envelope{from: clientNode, to: to, kind: kindRequest, stream: st.ID, request: m})
		}
	}
}

func (w *workload) produce(s *Sim, p *producer, to uint16) {
	st := s.strs[p.si].st
	m := stream.Message{Kind: stream.KindProduce, Client: p.id}
	m.Produce = wire.Produce{RequestID: p.seq, Stream: st.ID, Incarnation: st.Incarnation, ProducerID: p.id,
		Sequence: p.seq, Count: p.count, Batch: payloadOf(p.id, p.seq, 16+s.rng.IntN(48))}
	s.send(envelope{from: clientNode, to: to, kind: kindRequest, stream: st.ID, request: m})
}

// Produce sends one batch from a scripted producer (id pid, sequence seq) to node to.
func (s *Sim) Produce(streamIdx int, to uint16, pid, seq uint64, count uint32) {
	st := s.strs[streamIdx].st
	m := stream.Message{Kind: stream.KindProduce, Client: pid}
	m.Produce = wire.Produce{RequestID: seq, Stream: st.ID, Incarnation: st.Incarnation, ProducerID: pid,
		Sequence: seq, Count: count, Batch: payloadOf(pid, seq, 24)}
	s.send(envelope{from: clientNode, to: to, kind: kindRequest, stream: st.ID, request: m})
}

// onReply takes a node's answer to a client.
func (w *workload) onReply(s *Sim, e envelope) {
	r := &e.reply
	si, ok := s.streamIndex(e.stream)
	if !ok {
		return
	}
	switch r.Kind {
	case stream.ReplyProduce:
		w.onProduced(s, si, r)
	case stream.ReplyFetch:
		w.onFetched(s, si, e.from, r)
	case stream.ReplyError:
		if c := w.cachedConsumer(r.Client); c != nil && e.from == c.route {
			c.route = 0 // refused: look the owner up again
		}
		p := w.producer(r.Client)
		switch {
		case p == nil || !p.waiting || r.Error.RequestID != p.seq:
		case r.Error.Code == wire.CodeSequenceGap:
			// The owner's log lost this producer's last batches (an accepted owner loss): it goes on
			// under a new producer id, as a client would.
			w.nextPID++
			w.byPID[w.nextPID] = w.byPID[p.id]
			p.id, p.seq, p.waiting = w.nextPID, 0, false
		default:
			p.retryAt = min(p.retryAt, s.now+2)
		}
	}
}

// onProduced records an acknowledged batch and lets its producer go on. Client is the producer id and
// RequestID its sequence.
func (w *workload) onProduced(s *Sim, si int, r *stream.Reply) {
	k := ackKey{stream: s.strs[si].st.ID, pid: r.Client, seq: r.Produce.RequestID}
	if base, ok := w.acked[k]; ok && base != r.Produce.BaseOffset {
		s.fail("stream %d: batch %d/%d acknowledged at %d and at %d", k.stream, k.pid, k.seq, base, r.Produce.BaseOffset)
		return
	}
	w.acked[k] = r.Produce.BaseOffset
	s.chk.onAck(s, si, k, r.Produce.BaseOffset, r.Produce.Count)
	s.reads.onAcked(si, r.Produce.BaseOffset+uint64(r.Produce.Count))
	if p := w.producer(r.Client); p != nil && p.waiting && p.seq == r.Produce.RequestID {
		p.waiting = false
	}
}

// onFetched checks a fetch reply against the confirmed records and moves the consumer on.
func (w *workload) onFetched(s *Sim, si int, from uint16, r *stream.Reply) {
	f := &r.Fetch
	b := f.Batches
	end := f.BaseOffset
	for len(b) > 0 {
		h, n, err := decodeBatch(b)
		if err != nil {
			s.fail("stream %d: fetch reply from %d holds a bad batch: %v", f.Stream, from, err)
			return
		}
		id := batchID{base: h.BaseOffset, count: h.Count, epoch: h.Epoch, pid: h.ProducerID, seq: h.Sequence}
		if id.end() > f.ConfirmedTail {
			s.fail("stream %d: node %d served %s past the confirmed tail %d", f.Stream, from, id, f.ConfirmedTail)
			return
		}
		s.chk.onRead(s, si, from, id)
		end = id.end()
		b = b[n:]
	}
	s.reads.onFetched(s, si, from, f.RequestID, f.ConfirmedTail)
	for i := range w.consumers {
		if c := &w.consumers[i]; c.si == si && !c.cached && f.Count > 0 && end > c.next {
			c.next = end
		}
	}
	if c := w.cachedConsumer(r.Client); c != nil {
		c.route, c.heard = from, s.now
		if f.Count > 0 && end > c.next {
			c.next = end
		}
	}
}

// routeTo is where a cached-route consumer sends its next fetch: its route, or owner when it has
// none or its route was silent too long.
func (c *consumer) routeTo(s *Sim, owner uint16) uint16 {
	if c.route == 0 || s.now-c.heard > routeTimeoutTicks {
		c.route, c.heard = owner, s.now
	}
	return c.route
}

// cachedConsumer is the cached-route consumer whose client id is client, or nil.
func (w *workload) cachedConsumer(client uint64) *consumer {
	if client < 3000 {
		return nil
	}
	for i := range w.consumers {
		if c := &w.consumers[i]; c.cached && uint64(3000+c.si) == client {
			return c
		}
	}
	return nil
}

// producer returns the producer whose current id is pid, or nil.
func (w *workload) producer(pid uint64) *producer {
	i, ok := w.byPID[pid]
	if !ok || w.producers[i].id != pid {
		return nil
	}
	return &w.producers[i]
}
