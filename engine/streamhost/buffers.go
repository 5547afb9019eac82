package streamhost

import (
	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// span is one encoded batch in a buffer: its records [base, end) and its bytes [from, to).
type span struct {
	base, end uint64
	from, to  int
}

// buffer is bytes the host hands to the ring or a socket and must keep unchanged until every user is
// done: an owner's encoded appends (held until the log reports them durable, for SourceUnsynced, and
// until their sends complete), or a read's data (until the sends that alias it complete). refs counts
// those users; the buffer goes back to the shard's pool at zero.
type buffer struct {
	b     []byte
	spans []span // owner appends: one per record batch, in order
	end   uint64 // owner appends: the record offset after the last batch
	refs  int
}

// bufferMin is the smallest buffer the pool makes: owner appends of one turn and reads share sizes.
const bufferMin = 256 << 10

// poolBytesMax bounds the bytes of the free buffers a shard keeps; more are left to the garbage
// collector.
const poolBytesMax = 16 << 20

// bufferPool is a shard's free buffers, shared by its copies: an idle copy holds none.
type bufferPool struct {
	free  []*buffer
	bytes int    // capacity of the free buffers
	made  uint64 // buffers allocated (the pool had none big enough)
}

// get returns a buffer of at least n bytes of capacity with one reference.
func (p *bufferPool) get(n int) *buffer {
	for i := len(p.free) - 1; i >= 0; i-- {
		if b := p.free[i]; cap(b.b) >= n {
			last := len(p.free) - 1
			p.free[i] = p.free[last]
			p.free[last] = nil
			p.free = p.free[:last]
			p.bytes -= cap(b.b)
			b.refs = 1
			return b
		}
	}
	p.made++
	return &buffer{b: make([]byte, 0, max(n, bufferMin)), refs: 1}
}

// unref drops one reference; the last returns the buffer to the pool.
func (p *bufferPool) unref(b *buffer) {
	assert.True(b.refs > 0, "streamhost: buffer released twice")
	b.refs--
	if b.refs > 0 {
		return
	}
	b.b, b.spans, b.end = b.b[:0], b.spans[:0], 0
	if p.bytes+cap(b.b) <= poolBytesMax {
		p.free = append(p.free, b)
		p.bytes += cap(b.b)
	}
}

// sendSlot is one SendData in flight: its frame header and the buffers its body aliases.
type sendSlot struct {
	header []byte
	bufs   []*buffer
	busy   bool
}

// sends is a shard's table of data frames in flight; a frame's tag is its slot.
type sends struct {
	slots []sendSlot
	free  []int
}

func (t *sends) take() int {
	if n := len(t.free); n > 0 {
		i := t.free[n-1]
		t.free = t.free[:n-1]
		t.slots[i].busy = true
		return i
	}
	t.slots = append(t.slots, sendSlot{header: make([]byte, 0, wire.HeaderSize), busy: true})
	return len(t.slots) - 1
}

// sendData sends msg's header and body to node from the shard's sender, holding a reference on each
// of bufs until the send completes. It reports whether the shard took the frame.
func (sh *shardHost) sendData(node uint16, msg *wire.StreamPrepare, bufs ...*buffer) bool {
	i := sh.sends.take()
	sl := &sh.sends.slots[i]
	if sh.sameAsLast(msg) {
		sl.header = append(sl.header[:0], sh.lastHeader...) // the same frame to another follower
	} else {
		sl.header = wire.AppendStreamPrepareHeader(sl.header[:0], wire.From{Cluster: sh.h.cfg.Cluster, Node: sh.h.cfg.Node}, msg)
		sh.lastMsg, sh.lastHeader = *msg, append(sh.lastHeader[:0], sl.header...)
	}
	for _, b := range bufs {
		b.refs++
		sl.bufs = append(sl.bufs, b)
	}
	if err := sh.send.SendData(node, sl.header, msg.Batches, sh, uint64(i)); err != nil {
		sh.stats.SendsRefused++
		sh.release(i)
		return false
	}
	return true
}

// sameAsLast says whether msg is the prepare whose header was built last, batches included (the
// same bytes, not equal ones): the owner sends each live follower the same frame, and its header
// (with the body checksum) is built once.
func (sh *shardHost) sameAsLast(msg *wire.StreamPrepare) bool {
	l := &sh.lastMsg
	if len(msg.Batches) == 0 || len(l.Batches) != len(msg.Batches) || &l.Batches[0] != &msg.Batches[0] {
		return false
	}
	return l.Stream == msg.Stream && l.Incarnation == msg.Incarnation && l.Epoch == msg.Epoch &&
		l.PrevEpoch == msg.PrevEpoch && l.Log == msg.Log && l.BaseOffset == msg.BaseOffset &&
		l.Count == msg.Count && l.ConfirmedTail == msg.ConfirmedTail
}

// DataSent releases the frame's buffers: the kernel took the bytes, or the link failed first (the
// copy's resend timer tries again).
func (sh *shardHost) DataSent(_ uint16, tag uint64, err error) {
	if err != nil {
		sh.stats.SendsFailed++
	}
	sh.release(int(tag))
}

func (sh *shardHost) release(i int) {
	sl := &sh.sends.slots[i]
	assert.True(sl.busy, "streamhost: data frame completed twice")
	for j, b := range sl.bufs {
		sh.pool.unref(b)
		sl.bufs[j] = nil
	}
	sl.bufs, sl.busy = sl.bufs[:0], false
	sh.sends.free = append(sh.sends.free, i)
}

var _ shard.DataSent = (*shardHost)(nil)
