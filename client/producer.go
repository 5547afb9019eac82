package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/ringstream/ringstream/wire"
)

// ProducerConfig describes a Producer. Zero values take the defaults.
type ProducerConfig struct {
	// Stream is the stream's name.
	Stream string
	// BatchBytes is when a batch is full and sent without waiting for Linger: once its records (as
	// encoded, before compression) reach this many bytes. It is also the largest encoded record
	// (default and maximum 1 MiB, the nodes' default batch limit).
	BatchBytes int
	// BatchRecords, if above 0, also makes a batch full once it holds this many records, whatever
	// their size (default 0: by BatchBytes alone).
	BatchRecords int
	// Linger is how long a batch's first record waits for more while another batch is in flight
	// (default 2 ms; negative: send at once). With nothing in flight a batch is sent at once, full or
	// not: a record alone never waits for a timer. With InFlight 1 the next batch can only go out once
	// the one in flight is confirmed, so records gather while it is and go at its confirm; Linger
	// matters only with InFlight above 1.
	Linger time.Duration
	// Codec compresses each batch (CodecNone, CodecZstd, CodecS2).
	Codec Codec
	// Format is the batches' record format (0: FormatRecords, with keys, headers and timestamps).
	// FormatValues writes values only, for readers that predate FormatRecords; AppendRecord then refuses
	// a record with a key or headers, and its records' timestamps are their batch's append time.
	Format Format
	// ProducerID names this producer to the stream's owner, which answers a retried batch (same id and
	// sequence) with its first offset instead of appending it again. 0 draws a random id. Sequences
	// start at 1 in each Producer, so an id set here must not be reused by another Producer of the
	// same stream: the owner would take its batches for retries of the first one's.
	ProducerID uint64
	// InFlight is how many batches may wait for their confirm at once (default 1, at most 4). Above 1
	// the next batch goes out before the previous one is confirmed, in sequence order on the owner's
	// connection; after a failure the window is resent oldest first, one batch at a time.
	InFlight int
	// OnConfirm, if set, is called on the producer's goroutine for each confirmed batch, in order. It
	// should return quickly: the next batch waits for it.
	OnConfirm func(Confirmed)
	// OnTrace, if set, is called on the producer's goroutine for each confirmed batch, before
	// OnConfirm, with the instants it passed the client's stages (BatchTrace). Tracing reads the clock
	// four more times per batch, never per record, and only when this is set.
	OnTrace func(BatchTrace)
}

// BatchTrace is when one confirmed batch passed the client's stages, on this process's clock (each
// time.Time carries Go's monotonic reading). `ringstream bench --trace-stages` lines these up with the
// nodes' stage marks. With retries, Sent and ReplyRead are the last attempt's.
type BatchTrace struct {
	ProducerID uint64
	Sequence   uint64
	Count      uint32
	Appended   time.Time // the batch's first record was appended
	Taken      time.Time // the sender took the batch to encode and send it
	Sent       time.Time // the write of its request to the owner's connection began
	ReplyRead  time.Time // the connection's reader handed its reply over
	Woken      time.Time // the sender had the reply
}

// Confirmed reports one confirmed batch: its records hold offsets BaseOffset to BaseOffset+Count-1.
type Confirmed struct {
	BaseOffset uint64
	Count      uint32
	Epoch      uint32 // the owner's epoch that confirmed it
	Sequence   uint64 // the batch's producer sequence
	Duplicate  bool   // a retry the owner had appended before: answered from its producer table
}

const (
	batchBytesMax = 1 << 20
	defaultLinger = 2 * time.Millisecond
)

func (c ProducerConfig) withDefaults() ProducerConfig {
	if c.BatchBytes == 0 {
		c.BatchBytes = batchBytesMax
	}
	if c.Linger == 0 {
		c.Linger = defaultLinger
	}
	if c.InFlight == 0 {
		c.InFlight = 1
	}
	if c.Format == 0 {
		c.Format = FormatRecords
	}
	if c.ProducerID == 0 {
		for c.ProducerID == 0 {
			c.ProducerID = rand.Uint64()
		}
	}
	return c
}

func (c ProducerConfig) validate() error {
	if err := checkName("stream", c.Stream); err != nil {
		return err
	}
	switch {
	case c.BatchBytes < 16 || c.BatchBytes > batchBytesMax:
		return fmt.Errorf("%w: ProducerConfig.BatchBytes %d, want 16..%d", ErrConfig, c.BatchBytes, batchBytesMax)
	case c.BatchRecords < 0:
		return fmt.Errorf("%w: ProducerConfig.BatchRecords %d, want 0 or more", ErrConfig, c.BatchRecords)
	case c.InFlight < 1 || c.InFlight > inflightMax:
		return fmt.Errorf("%w: ProducerConfig.InFlight %d, want 1..%d", ErrConfig, c.InFlight, inflightMax)
	case c.Codec > CodecS2:
		return fmt.Errorf("%w: ProducerConfig.Codec %d", ErrConfig, c.Codec)
	}
	if err := wire.ValidateFormat(uint8(c.Format)); err != nil {
		return fmt.Errorf("%w: ProducerConfig.Format: %w", ErrConfig, err)
	}
	return nil
}

// Producer appends records to one stream in batches, each sent with the producer's id and the next
// sequence and retried with the same ones until the owner confirms it, across failovers, so a record is
// never appended twice. One batch is in flight at a time while the next one fills. A Producer is safe for
// concurrent use.
type Producer struct {
	c   *Client
	cfg ProducerConfig

	ctx    context.Context // ends the sender's requests when the producer is aborted
	cancel context.CancelFunc
	done   chan struct{} // closed when the sender returns
	kick   chan struct{} // one token: the open batch changed

	mu        sync.Mutex
	open      []byte // records of the batch being filled (FormatRecords: after its base timestamp)
	openCount uint32
	openSince time.Time
	openBase  int64  // FormatRecords: the open batch's base timestamp, unix ms
	openFull  bool   // a record waits for room: send the open batch now
	spare     []byte // the other buffer, free while no batch is in flight
	seq       uint64 // the sequence of the next batch sent
	appended  uint64 // records accepted by Append
	taken     uint64 // records taken into sent batches
	confirmed uint64 // records confirmed
	flushUpTo uint64 // records a Flush waits for
	closing   bool
	err       error // sticky: a batch that could not be confirmed, or Close
	// Waiters' wakeups, each closed and replaced when what its waiters wait for may have moved:
	// roomC when the open batch was taken (Append waits for room), confirmedC when a batch was
	// confirmed (Flush and Close wait for their records); both when the producer fails. Two, so that
	// a Flush is not woken for nothing when its batch is only taken (a wakeup per batch the
	// closed-loop bench paid for, issue 26).
	roomC      chan struct{}
	confirmedC chan struct{}

	// The sender's own state.
	windowMax  int       // the most batches a pipelined sender had in flight (read by tests after Close)
	confWaits  int       // times a Flush or Close slept until a confirm (p.mu; read by tests)
	takenSince time.Time // the openSince of the batch take returned last
	q          produceRequest
	cl         *call
	zenc       *zstd.Encoder
	zbuf       []byte
}

type produceRequest struct{ m wire.Produce }

func (q *produceRequest) appendTo(dst []byte, from wire.From, id uint64, r *Route) []byte {
	q.m.RequestID, q.m.Stream, q.m.Incarnation = id, r.Stream, r.Incarnation
	return wire.AppendProduce(dst, from, &q.m)
}

// Producer starts a producer of cfg.Stream. Close it to send what it holds and end its goroutine.
func (c *Client) Producer(cfg ProducerConfig) (*Producer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Producer{c: c, cfg: cfg, ctx: ctx, cancel: cancel, done: make(chan struct{}), kick: make(chan struct{}, 1),
		open: make([]byte, 0, cfg.BatchBytes), spare: make([]byte, 0, cfg.BatchBytes), seq: 1,
		roomC: make(chan struct{}), confirmedC: make(chan struct{}), cl: newCall()}
	p.q.m = wire.Produce{ProducerID: cfg.ProducerID, Codec: uint8(cfg.Codec), Format: uint8(cfg.Format)}
	if cfg.Codec == CodecZstd {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest))
		if err != nil {
			cancel()
			return nil, fmt.Errorf("client: zstd encoder: %w", err)
		}
		p.zenc = enc
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cancel()
		return nil, ErrClosed
	}
	c.prods[p] = struct{}{}
	c.workers.Add(1)
	c.mu.Unlock()
	if cfg.InFlight > 1 {
		go p.runPipelined()
	} else {
		go p.run()
	}
	return p, nil
}

// ID is the producer id the batches carry.
func (p *Producer) ID() uint64 { return p.cfg.ProducerID }

// fullLocked reports whether the open batch has no room for one more record of size bytes (0: whether
// it is full now); p.mu is held.
func (p *Producer) fullLocked(size int) bool {
	if p.cfg.BatchRecords > 0 && int(p.openCount) >= p.cfg.BatchRecords {
		return true
	}
	if size == 0 {
		return len(p.open) >= p.cfg.BatchBytes
	}
	return len(p.open)+size > p.cfg.BatchBytes
}

// Flush sends the open batch at once and waits until every record appended before the call is
// confirmed, or the producer failed.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	target := p.appended
	p.flushUpTo = max(p.flushUpTo, target)
	p.mu.Unlock()
	p.poke()
	return p.waitConfirmed(ctx, target)
}

func (p *Producer) waitConfirmed(ctx context.Context, target uint64) error {
	for {
		p.mu.Lock()
		if p.confirmed >= target {
			p.mu.Unlock()
			return nil
		}
		if p.err != nil {
			err := p.err
			p.mu.Unlock()
			return err
		}
		ch := p.confirmedC
		p.confWaits++
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close sends what the producer holds, waits until it is confirmed (or ctx ends), and ends the
// producer's goroutine. It returns the producer's error, if a batch failed.
func (p *Producer) Close(ctx context.Context) error {
	p.mu.Lock()
	target := p.appended
	p.closing = true
	p.flushUpTo = max(p.flushUpTo, target)
	p.mu.Unlock()
	p.poke()
	err := p.waitConfirmed(ctx, target)
	p.abort(fmt.Errorf("client: produce to %q: %w", p.cfg.Stream, ErrClosed))
	<-p.done
	p.c.mu.Lock()
	delete(p.c.prods, p)
	p.c.mu.Unlock()
	return err
}

// abort fails the producer with err (unless it already failed) and ends its sender's requests.
func (p *Producer) abort(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.broadcast()
	p.mu.Unlock()
	p.cancel()
	p.poke()
}

// poke wakes the sender.
func (p *Producer) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// broadcast wakes everyone waiting on the state (the producer failed); p.mu is held.
func (p *Producer) broadcast() {
	p.roomFreed()
	p.confirmedMoved()
}

// roomFreed wakes the Appends waiting for room; p.mu is held.
func (p *Producer) roomFreed() {
	close(p.roomC)
	p.roomC = make(chan struct{})
}

// confirmedMoved wakes the Flushes and Closes waiting for their records; p.mu is held.
func (p *Producer) confirmedMoved() {
	close(p.confirmedC)
	p.confirmedC = make(chan struct{})
}

// run is the sender with one batch in flight: it takes the open batch as soon as it holds a record
// (nothing is in flight then, so it is due), sends it and waits for its confirm, while the next batch
// fills, until the producer fails or is aborted. No timer: Linger has nothing to wait for here.
func (p *Producer) run() {
	defer p.c.workers.Done()
	defer close(p.done)
	defer p.cancel()
	if p.zenc != nil {
		defer p.zenc.Close()
	}
	for {
		batch, count, _, ok := p.take(true)
		if !ok {
			return
		}
		if count == 0 {
			select {
			case <-p.kick:
			case <-p.ctx.Done():
			}
			continue
		}
		if !p.send(batch, count) {
			return
		}
	}
}

// take returns the open batch if it is due, or how long until its linger ends (0: no batch open).
// idle says no batch is in flight: then an open batch is due at once, full or not. ok is false once
// the producer failed.
func (p *Producer) take(idle bool) (batch []byte, count uint32, wait time.Duration, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return nil, 0, 0, false
	}
	if p.openCount == 0 {
		return nil, 0, 0, true
	}
	due := idle || p.openFull || p.fullLocked(0) || p.flushUpTo > p.taken || p.closing || p.cfg.Linger < 0
	if !due {
		wait = p.cfg.Linger - time.Since(p.openSince)
		if wait > 0 {
			return nil, 0, wait, true
		}
	}
	batch, count = p.open, p.openCount
	p.takenSince = p.openSince
	p.open, p.spare = p.spare[:0], nil
	p.openCount = 0
	p.openFull = false
	p.taken += uint64(count)
	p.roomFreed() // Append may fill the other buffer now
	return batch, count, 0, true
}

// send sends one batch with the next sequence until it is confirmed, and reports whether the producer
// goes on.
func (p *Producer) send(batch []byte, count uint32) bool {
	p.mu.Lock()
	seq := p.seq
	p.mu.Unlock()
	p.cl.trace = p.cfg.OnTrace != nil
	if p.cl.trace {
		p.cl.appended, p.cl.taken = p.takenSince, time.Now()
	}
	p.zbuf = p.encode(&p.q, batch, count, seq, p.zbuf)
	err := p.c.exchange(p.ctx, p.cfg.Stream, &p.q, p.cl, wire.CommandProduceReply, 0)
	if !p.finish(p.cl, err, count, seq) {
		return false
	}
	p.mu.Lock()
	p.spare = batch[:0]
	p.mu.Unlock()
	return true
}

// encode fills q with one batch: its records compressed by the codec into zbuf (returned, grown as
// needed), its count and its sequence. A FormatRecords batch's base timestamp stays in front,
// uncompressed.
func (p *Producer) encode(q *produceRequest, batch []byte, count uint32, seq uint64, zbuf []byte) []byte {
	payload := batch
	prefix := 0
	if p.cfg.Format == FormatRecords {
		prefix = baseTimestampSize
	}
	switch p.cfg.Codec {
	case CodecZstd:
		zbuf = p.zenc.EncodeAll(batch[prefix:], append(zbuf[:0], batch[:prefix]...))
		payload = zbuf
	case CodecS2:
		if n := prefix + s2.MaxEncodedLen(len(batch)-prefix); cap(zbuf) < n {
			zbuf = make([]byte, n)
		}
		copy(zbuf[:prefix], batch[:prefix])
		payload = zbuf[:prefix+len(s2.Encode(zbuf[prefix:cap(zbuf)], batch[prefix:]))]
	}
	q.m.Sequence, q.m.Count, q.m.Batch = seq, count, payload
	return zbuf
}

// finish takes the outcome of one batch's produce (err, or the reply in cl): a confirm is handed to
// OnConfirm and counted, a failure fails the producer for good. It reports whether the batch was
// confirmed.
func (p *Producer) finish(cl *call, err error, count uint32, seq uint64) bool {
	var m wire.ProduceReply
	if err == nil {
		m, err = wire.DecodeProduceReply(&cl.h, cl.body)
		if err == nil && m.Count != count {
			err = fmt.Errorf("confirmed %d records of a batch of %d", m.Count, count)
		}
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrProtocol, err)
		}
	}
	if err == nil && cl.trace {
		p.cfg.OnTrace(BatchTrace{ProducerID: p.cfg.ProducerID, Sequence: seq, Count: m.Count, Appended: cl.appended,
			Taken: cl.taken, Sent: cl.sent, ReplyRead: cl.replyRead, Woken: time.Now()})
	}
	if err == nil && p.cfg.OnConfirm != nil {
		p.cfg.OnConfirm(Confirmed{BaseOffset: m.BaseOffset, Count: m.Count, Epoch: m.Epoch, Sequence: seq,
			Duplicate: m.Duplicate}) // before the confirm is counted, so a Flush returns after it
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if p.err == nil {
			p.err = fmt.Errorf("client: produce to %q: batch of %d records (producer %d, sequence %d) not confirmed: %w",
				p.cfg.Stream, count, p.cfg.ProducerID, seq, err)
		}
		p.broadcast()
		return false
	}
	p.seq++
	p.confirmed += uint64(count)
	p.confirmedMoved()
	return true
}
