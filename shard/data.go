package shard

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/internal/assert"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/wire"
)

// DataSent hears the outcome of a SendData: err is nil once the kernel took every byte of the frame,
// or why it did not (ErrLinkDown when the link failed or the node stopped first). It runs on the
// shard goroutine, inside the ring's Dispatch or inside a call that failed the link, so it must not
// drive the ring; from then on the frame's bytes are the owner's again.
type DataSent interface {
	DataSent(node uint16, tag uint64, err error)
}

// dataFrame is one queued SendData: the caller's header and body, never copied.
type dataFrame struct {
	header []byte
	body   []byte
	done   DataSent
	tag    uint64
}

func (f *dataFrame) size() int { return len(f.header) + len(f.body) }

// dataQueue is a link's bounded FIFO of data frames. The head is the one in flight, if any.
type dataQueue struct {
	frames []dataFrame // a ring of DataQueueFrames entries
	head   int
	n      int
}

func newDataQueue(capacity int) dataQueue { return dataQueue{frames: make([]dataFrame, capacity)} }

func (q *dataQueue) full() bool { return q.n == len(q.frames) }

func (q *dataQueue) push(f dataFrame) {
	q.frames[(q.head+q.n)%len(q.frames)] = f
	q.n++
}

func (q *dataQueue) front() *dataFrame { return &q.frames[q.head] }

func (q *dataQueue) pop() dataFrame {
	assert.True(q.n > 0, "shard: pop from an empty data queue")
	f := q.frames[q.head]
	q.frames[q.head] = dataFrame{}
	q.head = (q.head + 1) % len(q.frames)
	q.n--
	return f
}

// SendData implements Sender: one frame to node, sent from header and body as they are.
func (s *Shard) SendData(node uint16, header, body []byte, done DataSent, tag uint64) error {
	l := s.byNode[node]
	if l == nil {
		return fmt.Errorf("%w: %d", ErrUnknownPeer, node)
	}
	return l.sendData(header, body, done, tag)
}

func (l *link) sendData(header, body []byte, done DataSent, tag uint64) error {
	assert.True(len(header) == wire.HeaderSize, "shard: data frame header is not one header")
	assert.True(len(body) <= wire.BodySizeMax, "shard: data frame body past BodySizeMax")
	assert.True(done != nil, "shard: data frame without a DataSent")
	if l.state != linkUp {
		l.s.stats.FramesDroppedLinkDown.Add(1)
		return ErrLinkDown
	}
	if l.data.full() {
		l.refused = true
		return ErrOutboxFull
	}
	l.data.push(dataFrame{header: header, body: body, done: done, tag: tag})
	return nil
}

// postData sends the rest of the head data frame with one SENDMSG over its header and body.
func (l *link) postData() {
	f := l.data.front()
	off := l.sendOff
	l.iov = [2][]byte{}
	n := 0
	if off < len(f.header) {
		l.iov[n] = f.header[off:]
		n++
		off = 0
	} else {
		off -= len(f.header)
	}
	l.iov[n] = f.body[off:]
	n++
	err := l.s.ring.Sendmsg(l, linkTagData, l.fd, l.iov[:n], unix.MSG_NOSIGNAL, 0)
	if errors.Is(err, ring.ErrQueueFull) {
		l.s.ring.Submit()
		err = l.s.ring.Sendmsg(l, linkTagData, l.fd, l.iov[:n], unix.MSG_NOSIGNAL, 0)
	}
	if err != nil {
		l.fail(err)
		return
	}
	l.sendInFlight = true
	l.dataInFlight = true
}

// onDataSend accounts a data send's completion: a short send goes on from where it stopped, a whole
// frame is reported to its owner, a failure fails the link (which reports the rest).
func (l *link) onDataSend(c ring.Completion) {
	l.dataInFlight = false
	if l.state != linkUp {
		l.sendOff = 0
		l.dropData() // the link failed while this frame was in flight: it and all behind it
		return
	}
	if c.Res <= 0 {
		l.sendOff = 0
		l.fail(c.Err()) // reports this frame and all behind it, in order
		return
	}
	l.s.stats.BytesSent.Add(uint64(c.Res))
	l.sendOff += int(c.Res)
	if l.sendOff < l.data.front().size() {
		l.postData() // a short send: the rest of the same frame
		return
	}
	l.sendOff = 0
	f := l.data.pop()
	l.s.stats.DataFramesSent.Add(1)
	l.s.stats.DataBytesSent.Add(uint64(f.size()))
	f.done.DataSent(l.peer.Node, f.tag, nil)
	l.kick()
}

// dropData reports every queued data frame as not sent (the link failed), in queue order. While one
// is in flight the kernel still holds its bytes: then nothing is reported yet, and the in-flight
// frame's completion reports it and every frame behind it (onDataSend).
func (l *link) dropData() {
	if l.dataInFlight {
		return
	}
	for l.data.n > 0 {
		f := l.data.pop()
		l.s.stats.DataFramesDropped.Add(1)
		f.done.DataSent(l.peer.Node, f.tag, ErrLinkDown)
	}
}
