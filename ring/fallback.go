package ring

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ringstream/ringstream/internal/assert"
	"golang.org/x/sys/unix"
)

// fallbackRing serves the Ring interface with plain system calls. File operations run synchronously
// at Submit; socket operations run non-blocking and park on epoll when they would block; timeouts
// park until their deadline. Completions wait in a queue until Dispatch, exactly as CQEs would.
type fallbackRing struct {
	log  *slog.Logger
	info Info

	slots slotTable
	sq    []int32 // queued, not yet submitted, in queue order; capacity Entries

	cq      []cqEntry // completions ready to dispatch, a ring of len(slots) entries
	cqHead  uint32
	cqTail  uint32
	batch   []cqEntry // Dispatch's reap buffer, CQEBatchMax entries
	reaping bool

	msgHandler Handler
	inbox      *fallbackInbox

	epfd   int
	events []unix.EpollEvent

	// parked holds socket operations waiting for readiness and timers waiting for their deadline,
	// in the order they parked; scratch is resumeParked's copy of it.
	parked  []int32
	scratch []int32

	registeredFiles []int
	registeredBufs  [][]byte

	closed bool
}

// cqEntry is one completion waiting for Dispatch: a slot's, or a message posted by MsgRing.
type cqEntry struct {
	slot  int32 // -1 for a message
	res   int32
	flags uint32
	tag   uint64 // the message tag when slot is -1
}

// fallbackInbox receives MsgRing posts from other rings' threads. It is the one piece of a fallback
// ring shared between threads, so a mutex guards it; an eventfd wakes the owner's epoll_wait.
type fallbackInbox struct {
	mu     sync.Mutex
	msgs   []cqEntry // a ring of fixed capacity
	head   uint32
	tail   uint32
	count  atomic.Int32 // len, readable without the lock
	evfd   int
	closed bool
}

func newFallback(cfg Config, reason string) (*fallbackRing, error) {
	nslots := int(cfg.Entries) * 2
	r := &fallbackRing{
		log:     cfg.Logger,
		slots:   newSlotTable(nslots),
		sq:      make([]int32, 0, cfg.Entries),
		cq:      make([]cqEntry, nslots),
		batch:   make([]cqEntry, CQEBatchMax),
		events:  make([]unix.EpollEvent, 64),
		parked:  make([]int32, 0, nslots),
		scratch: make([]int32, 0, nslots),
		epfd:    -1,
	}
	r.info = Info{
		Backend:        BackendFallback,
		FallbackReason: reason,
		Kernel:         kernelRelease(),
		SQEntries:      cfg.Entries,
		CQEntries:      uint32(nslots),
	}
	for op := OpNop; op <= opLast; op++ {
		if op != OpSendZC {
			r.info.Ops = append(r.info.Ops, op)
		}
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("ring: fallback: epoll_create1: %w", err)
	}
	r.epfd = epfd
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("ring: fallback: eventfd: %w", err)
	}
	r.inbox = &fallbackInbox{msgs: make([]cqEntry, nslots), evfd: evfd}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(evfd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		unix.Close(evfd)
		unix.Close(epfd)
		return nil, fmt.Errorf("ring: fallback: epoll_ctl eventfd: %w", err)
	}
	r.log.Info("ring: fallback backend ready", "entries", cfg.Entries, "reason", reason)
	return r, nil
}

func (r *fallbackRing) Info() Info { return cloneInfo(r.info) }

// queue takes a slot for a new operation, or reports back-pressure or a closed ring.
func (r *fallbackRing) queue(h Handler, tag uint64, op Opcode, fl Flags) (int32, *slot, error) {
	if r.closed {
		return -1, nil, ErrClosed
	}
	assert.True(h != nil, "ring: nil handler")
	if len(r.sq) == cap(r.sq) {
		return -1, nil, ErrQueueFull
	}
	idx, s, ok := r.slots.acquire(h, tag, op, fl)
	if !ok {
		return -1, nil, ErrQueueFull
	}
	r.sq = append(r.sq, idx)
	return idx, s, nil
}

func (r *fallbackRing) SetMsgHandler(h Handler) { r.msgHandler = h }

func (r *fallbackRing) InFlight() int { return r.slots.inFlight() }

// Submit runs every queued operation. Operations joined by Link form a chain that runs in order and
// stops at the first failure; a chain never spans two Submit calls, as with io_uring.
func (r *fallbackRing) Submit() (int, error) {
	if r.closed {
		return 0, ErrClosed
	}
	n := len(r.sq)
	if n == 0 {
		return 0, nil
	}
	r.linkChains()
	// A chain's members after its head are started by the chain runner, so only heads start here.
	for i := 0; i < n; i++ {
		idx := r.sq[i]
		if i > 0 && r.slots.slots[r.sq[i-1]].flags&Link != 0 {
			continue
		}
		r.runChain(idx, false)
	}
	r.sq = r.sq[:0]
	return n, nil
}

// linkChains sets each queued operation's next from the Link flags. A LinkTimeout is attached to the
// operation before it, not run as a chain member.
func (r *fallbackRing) linkChains() {
	for i := 0; i+1 < len(r.sq); i++ {
		s := &r.slots.slots[r.sq[i]]
		if s.flags&Link == 0 {
			continue
		}
		nextIdx := r.sq[i+1]
		s.next = nextIdx
		if r.slots.slots[nextIdx].op == OpLinkTimeout {
			s.linkTimeout = nextIdx
			s.next = -1
			lt := &r.slots.slots[nextIdx]
			if lt.flags&Link != 0 && i+2 < len(r.sq) {
				s.next = r.sq[i+2]
			}
		}
	}
}

// runChain runs idx and, while each member succeeds, the members linked after it. When failed is
// true (an earlier member failed), every remaining member completes with ECANCELED. A member that
// must wait (socket, timer) parks, and the chain resumes when it completes.
func (r *fallbackRing) runChain(idx int32, failed bool) {
	for idx >= 0 {
		s := &r.slots.slots[idx]
		next := s.next
		if failed {
			r.complete(idx, -int32(unix.ECANCELED), 0)
			r.cancelLinkTimeout(s)
			idx = next
			continue
		}
		res, parked := r.execute(idx, s)
		if parked {
			r.startLinkTimeout(s)
			return
		}
		failed = chainBreaks(s, res)
		r.complete(idx, res, 0)
		r.cancelLinkTimeout(s)
		idx = next
	}
}

// chainBreaks says whether a result fails a link chain: any error, and a short read or write, as
// the kernel treats them.
func chainBreaks(s *slot, res int32) bool {
	if res < 0 {
		return true
	}
	switch s.op {
	case OpRead, OpWrite, OpReadFixed, OpWriteFixed:
		return int(res) != len(s.buf)
	case OpReadv, OpWritev:
		want := 0
		for _, b := range s.bufs {
			want += len(b)
		}
		return int(res) != want
	}
	return false
}

// complete queues a slot's completion for Dispatch. The cq has one entry per slot, so it cannot fill.
func (r *fallbackRing) complete(idx int32, res int32, flags uint32) {
	assert.True(r.cqTail-r.cqHead < uint32(len(r.cq)), "ring: fallback completion queue overflow")
	r.cq[r.cqTail%uint32(len(r.cq))] = cqEntry{slot: idx, res: res, flags: flags}
	r.cqTail++
}

// execute runs one operation. parked reports that it waits on epoll or a deadline instead.
func (r *fallbackRing) execute(idx int32, s *slot) (res int32, parked bool) {
	fd := s.fd
	if s.flags&FixedFile != 0 && s.op != OpNop {
		switch s.op {
		case OpClose, OpOpenat, OpRenameAt, OpUnlinkAt, OpMkdirAt, OpStatx:
			return -int32(unix.EBADF), false // as the kernel: these never take a registered file
		}
		if fd < 0 || fd >= len(r.registeredFiles) {
			return -int32(unix.EBADF), false
		}
		fd = r.registeredFiles[fd]
	}
	switch s.op {
	case OpNop:
		return 0, false
	case OpRead, OpWrite, OpReadv, OpWritev:
		return executeRW(fd, s), false
	case OpFsync:
		if s.datasync {
			return retryIntr(func() (int, error) { return 0, unix.Fdatasync(fd) }), false
		}
		return retryIntr(func() (int, error) { return 0, unix.Fsync(fd) }), false
	case OpFtruncate:
		return retryIntr(func() (int, error) { return 0, unix.Ftruncate(fd, s.off) }), false
	case OpOpenat:
		return r.executeOpenat(s), false
	case OpClose:
		return retryIntr(func() (int, error) { return 0, unix.Close(fd) }), false
	case OpReadFixed, OpWriteFixed:
		return r.executeFixed(fd, s), false
	case OpFallocate:
		return retryIntr(func() (int, error) { return 0, unix.Fallocate(fd, s.mode, s.off, s.length) }), false
	case OpRenameAt, OpUnlinkAt, OpMkdirAt, OpStatx:
		return r.executePath(s), false
	}
	return r.executeParkable(idx, s, fd)
}

func (r *fallbackRing) executeOpenat(s *slot) int32 {
	if len(s.path) == 0 {
		return -int32(unix.EINVAL)
	}
	flags := s.openFlags | unix.O_CLOEXEC
	return rawSyscallRes(unix.SYS_OPENAT, uintptr(s.fd), uintptr(unsafe.Pointer(&s.path[0])), uintptr(flags), uintptr(s.mode), 0)
}

// executeFixed runs ReadFixed or WriteFixed as pread or pwrite after checking, as the kernel does,
// that buf lies inside the registered buffer.
func (r *fallbackRing) executeFixed(fd int, s *slot) int32 {
	if int(s.bufIndex) >= len(r.registeredBufs) || !insideBuffer(s.buf, r.registeredBufs[s.bufIndex]) {
		return -int32(unix.EFAULT)
	}
	if s.op == OpReadFixed {
		return retryIntr(func() (int, error) { return unix.Pread(fd, s.buf, s.off) })
	}
	return retryIntr(func() (int, error) { return unix.Pwrite(fd, s.buf, s.off) })
}

// Wait runs what is queued, then blocks in epoll_wait until at least minComplete completions are
// ready, with the nearest timer deadline as the epoll timeout.
func (r *fallbackRing) Wait(minComplete int) error {
	assert.True(!r.reaping, "ring: Wait called from a handler")
	if _, err := r.Submit(); err != nil {
		return err
	}
	if len(r.parked) > 0 {
		if err := r.poll(0); err != nil {
			return err
		}
	}
	for {
		if r.ready() >= minComplete {
			return nil
		}
		if err := r.poll(r.pollTimeoutMs()); err != nil {
			return err
		}
	}
}

func (r *fallbackRing) ready() int {
	return int(r.cqTail-r.cqHead) + int(r.inbox.count.Load())
}

// poll waits on epoll for at most timeoutMs (-1: no limit), then resumes parked operations whose
// socket is ready or whose deadline passed.
func (r *fallbackRing) poll(timeoutMs int) error {
	n, err := unix.EpollWait(r.epfd, r.events, timeoutMs)
	if err == unix.EINTR {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ring: fallback: epoll_wait: %w", err)
	}
	sockets := false
	for i := 0; i < n; i++ {
		if int(r.events[i].Fd) == r.inbox.evfd {
			var b [8]byte
			unix.Read(r.inbox.evfd, b[:]) // clears the counter; EAGAIN is harmless
			continue
		}
		sockets = true
	}
	r.resumeParked(sockets)
	return nil
}

// Dispatch reaps up to CQEBatchMax completions and messages into the batch, releases their slots,
// then calls the handlers in order.
func (r *fallbackRing) Dispatch() int {
	assert.True(!r.reaping, "ring: Dispatch called from a handler")
	n := 0
	for n < CQEBatchMax && r.cqHead != r.cqTail {
		r.batch[n] = r.cq[r.cqHead%uint32(len(r.cq))]
		r.cqHead++
		n++
	}
	n = r.inbox.drain(r.batch, n)
	// reaping stays set across every handler call, so a handler that drives the ring (Wait or
	// Dispatch) crashes at once instead of losing the completions of this batch.
	r.reaping = true
	for i := 0; i < n; i++ {
		e := r.batch[i]
		if e.slot < 0 {
			if r.msgHandler != nil {
				r.msgHandler.Complete(Completion{Tag: e.tag, Res: e.res, Op: OpMsgRing})
			}
			continue
		}
		s := &r.slots.slots[e.slot]
		h, c := s.handler, Completion{Tag: s.tag, Res: e.res, Flags: e.flags, Op: s.op}
		r.slots.release(e.slot)
		r.batch[i] = cqEntry{}
		h.Complete(c)
	}
	r.reaping = false
	return n
}

func (r *fallbackRing) Close() error {
	if r.closed {
		return ErrClosed
	}
	r.closed = true
	r.inbox.mu.Lock()
	r.inbox.closed = true
	err1 := unix.Close(r.inbox.evfd)
	r.inbox.mu.Unlock()
	err2 := unix.Close(r.epfd)
	if err1 != nil {
		return fmt.Errorf("ring: fallback: close eventfd: %w", err1)
	}
	if err2 != nil {
		return fmt.Errorf("ring: fallback: close epoll: %w", err2)
	}
	return nil
}

// post adds a message from another ring's thread. It returns the sender's completion result: 0, or
// -EOVERFLOW when the inbox is full, or -EBADFD when the target ring is closed.
func (in *fallbackInbox) post(tag uint64, res int32) int32 {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return -int32(unix.EBADFD)
	}
	if in.tail-in.head == uint32(len(in.msgs)) {
		in.mu.Unlock()
		return -int32(unix.EOVERFLOW)
	}
	in.msgs[in.tail%uint32(len(in.msgs))] = cqEntry{slot: -1, res: res, tag: tag}
	in.tail++
	in.count.Add(1)
	// Written under the lock, so Close (which takes it first) never lets the eventfd's number be
	// reused by another file while a post is about to write to it.
	one := [8]byte{1}
	unix.Write(in.evfd, one[:]) // EAGAIN only when the counter is saturated: already signalled
	in.mu.Unlock()
	return 0
}

// drain moves messages into batch from position n until batch is full, and returns the new length.
func (in *fallbackInbox) drain(batch []cqEntry, n int) int {
	if in.count.Load() == 0 || n == len(batch) {
		return n
	}
	in.mu.Lock()
	for n < len(batch) && in.head != in.tail {
		batch[n] = in.msgs[in.head%uint32(len(in.msgs))]
		in.head++
		in.count.Add(-1)
		n++
	}
	in.mu.Unlock()
	return n
}
