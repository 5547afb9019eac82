package client

import (
	"errors"
	"time"

	"github.com/ringstream/ringstream/wire"
)

// inflightMax bounds ProducerConfig.InFlight: the owner's producer table remembers a producer's last five
// batches, and a resend after a failure must find every batch of the window there.
const inflightMax = 4

// slot is one batch of a pipelined producer's window.
type slot struct {
	batch []byte // the records, uncompressed
	zbuf  []byte
	count uint32
	seq   uint64
	q     produceRequest
	cl    *call
	cn    *conn // the connection it went out on
	sent  bool  // its request went out: its reply, or its connection's failure, arrives on cl.done
	err   error // why it could not be sent
}

// window is the pipelined producer's batches in flight, oldest first.
type window struct {
	slots []*slot // a ring of InFlight slots
	head  int
	n     int
}

func (w *window) front() *slot   { return w.slots[w.head] }
func (w *window) at(i int) *slot { return w.slots[(w.head+i)%len(w.slots)] }
func (w *window) push() *slot    { s := w.at(w.n); w.n++; return s }
func (w *window) pop()           { w.head = (w.head + 1) % len(w.slots); w.n-- }

// runPipelined is run with up to InFlight batches in flight on the owner's connection, written in
// sequence order. When a batch fails (a refusal, a lost connection), the sender waits for every
// other batch in flight to be answered or failed, then resends the window oldest first, one at a
// time through exchange (its retries, lookups and backoff): batches the owner already holds are
// answered from its producer table, so none is appended twice and none overtakes an older one at a
// new owner. After the window is confirmed, pipelining resumes.
func (p *Producer) runPipelined() {
	defer p.c.workers.Done()
	defer close(p.done)
	defer p.cancel()
	if p.zenc != nil {
		defer p.zenc.Close()
	}
	w := window{slots: make([]*slot, p.cfg.InFlight)}
	free := make([][]byte, 0, p.cfg.InFlight)
	for i := range w.slots {
		w.slots[i] = &slot{cl: newCall()}
		if i > 0 {
			free = append(free, make([]byte, 0, p.cfg.BatchBytes))
		}
	}
	for _, s := range w.slots {
		s.q.m = p.q.m
	}
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		wait, ok := p.fill(&w, &free)
		if !ok {
			return
		}
		var lingerC <-chan time.Time
		if wait > 0 {
			linger.Reset(wait)
			lingerC = linger.C
		}
		var frontDone <-chan struct{}
		if w.n > 0 {
			if !w.front().sent {
				if !p.recover(&w, &free) {
					return
				}
				continue
			}
			frontDone = w.front().cl.done
		}
		kick := p.kick
		if w.n == len(w.slots) {
			kick = nil // no room: only an answer moves the window
		}
		select {
		case <-frontDone:
			s := w.front()
			err := s.cl.err
			if err == nil {
				err = p.c.checkReply(s.cn, s.cl, wire.CommandProduceReply)
			}
			if err != nil {
				s.err, s.sent = err, false
				if !p.recover(&w, &free) {
					return
				}
				break
			}
			if !p.finish(s.cl, nil, s.count, s.seq) {
				return
			}
			free = append(free, s.batch[:0])
			w.pop()
		case <-kick:
		case <-lingerC:
		case <-p.ctx.Done():
			return
		}
		linger.Stop()
	}
}

// fill takes due batches into the window and sends them while it has room. It returns how long the
// open batch may still linger (0: none open), and false once the producer failed.
func (p *Producer) fill(w *window, free *[][]byte) (time.Duration, bool) {
	for w.n < len(w.slots) {
		p.mu.Lock()
		if p.spare == nil && len(*free) > 0 {
			p.spare = (*free)[len(*free)-1]
			*free = (*free)[:len(*free)-1]
		}
		p.mu.Unlock()
		batch, count, wait, ok := p.take(w.n == 0)
		if !ok {
			return 0, false
		}
		if count == 0 {
			return wait, true
		}
		p.mu.Lock()
		seq := p.seq + uint64(w.n)
		p.mu.Unlock()
		s := w.push()
		p.windowMax = max(p.windowMax, w.n)
		s.batch, s.count, s.seq = batch, count, seq
		s.cl.trace = p.cfg.OnTrace != nil
		if s.cl.trace {
			s.cl.appended, s.cl.taken = p.takenSince, time.Now()
		}
		s.zbuf = p.encode(&s.q, batch, count, seq, s.zbuf)
		s.sent, s.err = false, nil
		if w.n > 1 && !w.at(w.n-2).sent {
			continue // an older batch is waiting to be resent: this one goes out with it, in order
		}
		if err := p.launch(s); err != nil {
			s.err = err
		} else {
			s.sent = true
		}
	}
	return 0, true
}

// launch sends s's request on its stream owner's connection without waiting for the answer.
func (p *Producer) launch(s *slot) error {
	r, err := p.c.route(p.ctx, p.cfg.Stream, s.cl, 0)
	if err != nil {
		return err
	}
	cn, err := p.c.connTo(p.ctx, r.OwnerAddr)
	if err != nil {
		p.c.forget(p.cfg.Stream)
		return err
	}
	s.cl.route, s.cn = r, cn
	s.cl.id = p.c.id()
	s.cl.out = s.q.appendTo(s.cl.out[:0], wire.From{Cluster: p.c.cfg.Cluster}, s.cl.id, &s.cl.route)
	return cn.send(p.ctx, s.cl, p.c.cfg.RequestTimeout)
}

// recover handles a failed batch at the front of the window: it waits until every batch sent after
// it was answered or failed, then resends the whole window in order, one batch at a time, through
// exchange, and reports whether the producer goes on. A refusal that cannot clear is met again by
// the resend (one more request) and fails the producer there, like any other error exchange returns.
func (p *Producer) recover(w *window, free *[][]byte) bool {
	for i := 0; i < w.n; i++ {
		s := w.at(i)
		if s.sent && i > 0 {
			select {
			case <-s.cl.done: // its answer, whatever it is: the resend below asks again
			case <-p.ctx.Done():
				return false
			}
		}
	}
	var refused *Error
	if f := w.front(); errors.As(f.err, &refused) {
		if ownerGone(refused.Code) {
			p.c.lostOwner(p.cfg.Stream, f.cl.route.Epoch) // the resend's lookup waits for the next owner
		}
		p.c.forget(p.cfg.Stream)
	}
	// A lost connection keeps the route: the resend reconnects to the same owner, and if that fails
	// it waits for the next one (exchange).
	for w.n > 0 {
		s := w.front()
		err := p.c.exchange(p.ctx, p.cfg.Stream, &s.q, s.cl, wire.CommandProduceReply, 0)
		if !p.finish(s.cl, err, s.count, s.seq) {
			return false
		}
		*free = append(*free, s.batch[:0])
		w.pop()
	}
	return true
}
