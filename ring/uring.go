package ring

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/ringstream/ringstream/internal/assert"
	"golang.org/x/sys/unix"
)

// uringRing is the io_uring backend: the SQ ring, CQ ring and SQE array mapped from the kernel, and
// the in-flight slot table whose index and generation form each SQE's user_data.
type uringRing struct {
	log  *slog.Logger
	info Info
	fd   int

	ringMem []byte // SQ ring, and the CQ ring too under IORING_FEAT_SINGLE_MMAP
	cqMem   []byte // the CQ ring when mapped on its own
	sqeMem  []byte

	// SQ ring, shared with the kernel. The kernel owns sqHead; we own sqTail.
	sqHead    *uint32
	sqTail    *uint32
	sqFlags   *uint32
	sqMask    uint32
	sqEntries uint32
	sqes      []sqe
	tail      uint32 // our next tail, published by the atomic store in Submit

	// CQ ring. The kernel owns cqTail; we own cqHead.
	cqHead *uint32
	cqTail *uint32
	cqMask uint32
	cqes   []cqe

	slots   slotTable
	batch   []dispatchEntry // Dispatch's reap buffer, CQEBatchMax entries
	reaping bool

	// probed[k] says the kernel supports kernel opcode k.
	probed [probeOpsLen]bool

	msgHandler      Handler
	registeredBufs  [][]byte // kept alive while registered
	filesRegistered bool

	// emulated holds completions of Ftruncate on kernels without IORING_OP_FTRUNCATE: the ring ran
	// ftruncate(2) itself and dispatches the result with the next batch.
	emulated []cqe

	addrScratch unix.RawSockaddrAny // Connect encodes here first, to refuse an unknown family early

	// peersClosed is set by Close for other rings' MsgRing, which may run on other threads.
	peersClosed atomic.Bool

	cqOverflows uint64 // times the kernel flagged a CQ overflow and Dispatch flushed it
	closed      bool
	holdP       bool // Config.WaitHoldsP: io_uring_enter is a raw syscall
}

// dispatchEntry is one reaped completion with the handler it goes to.
type dispatchEntry struct {
	h Handler
	c Completion
}

// setupAttempt is one set of setup flags, tried best first.
type setupAttempt struct {
	flags uint32
	name  string
}

// setupFunc is io_uring_setup(2): it returns the new ring's fd or the errno.
type setupFunc func(entries uint32, p *uringParams) (int, unix.Errno)

func newURing(cfg Config, setup setupFunc) (*uringRing, error) {
	first := setupAttempt{setupSingleIssuer | setupCoopTaskrun, "SINGLE_ISSUER|COOP_TASKRUN"}
	if cfg.TaskRun == TaskRunDefer {
		first = setupAttempt{setupSingleIssuer | setupDeferTaskrun, "SINGLE_ISSUER|DEFER_TASKRUN"}
	}
	attempts := []setupAttempt{first, {setupCoopTaskrun, "COOP_TASKRUN"}, {0, "none"}}
	var refused []string
	for i, a := range attempts {
		p := uringParams{flags: a.flags | setupCQSize | setupSubmitAll, cqEntries: cfg.Entries * 2}
		fd, errno := setup(cfg.Entries, &p)
		if errno == unix.EINVAL && i == len(attempts)-1 {
			// Kernels before 5.18 lack SUBMIT_ALL; the last attempt asks for nothing optional.
			p = uringParams{flags: setupCQSize, cqEntries: cfg.Entries * 2}
			fd, errno = setup(cfg.Entries, &p)
		}
		if errno != 0 {
			refused = append(refused, a.name+": "+errno.Error())
			cfg.Logger.Info("ring: io_uring setup flags refused", "flags", a.name, "errno", errno)
			if errno == unix.ENOSYS || errno == unix.EPERM || errno == unix.EACCES {
				break // no flag set will help
			}
			continue
		}
		r, err := mapURing(cfg, fd, &p)
		if err != nil {
			unix.Close(fd)
			return nil, err
		}
		r.info.SetupRefused = refused
		r.holdP = cfg.WaitHoldsP
		r.log.Info("ring: io_uring backend ready", "setup", r.info.SetupFlags, "refused", refused,
			"sq", p.sqEntries, "cq", p.cqEntries, "wait_holds_p", r.holdP)
		return r, nil
	}
	return nil, fmt.Errorf("%w: io_uring_setup refused every flag set (%s)%s", ErrUnavailable,
		strings.Join(refused, "; "), disabledNote())
}

// setupSyscall is io_uring_setup(2), retried on EINTR.
func setupSyscall(entries uint32, p *uringParams) (int, unix.Errno) {
	for {
		fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(p)), 0)
		if errno == unix.EINTR {
			continue
		}
		return int(fd), errno
	}
}

// disabledNote reads kernel.io_uring_disabled, to say why setup failed when it is set.
func disabledNote() string {
	b, err := os.ReadFile("/proc/sys/kernel/io_uring_disabled")
	if err != nil {
		return ""
	}
	switch strings.TrimSpace(string(b)) {
	case "1":
		return "; kernel.io_uring_disabled=1 (only the io_uring_group may create rings)"
	case "2":
		return "; kernel.io_uring_disabled=2 (io_uring is off)"
	}
	return ""
}

// mapURing maps the rings of a freshly set-up fd and reads the probe.
func mapURing(cfg Config, fd int, p *uringParams) (*uringRing, error) {
	r := &uringRing{
		log:       cfg.Logger,
		fd:        fd,
		sqMask:    p.sqEntries - 1,
		sqEntries: p.sqEntries,
		slots:     newSlotTable(int(cfg.Entries) * 2),
		batch:     make([]dispatchEntry, CQEBatchMax),
		emulated:  make([]cqe, 0, int(cfg.Entries)*2),
	}
	sqSize := int(p.sqOff.array) + int(p.sqEntries)*4
	cqSize := int(p.cqOff.cqes) + int(p.cqEntries)*int(unsafe.Sizeof(cqe{}))
	single := p.features&featSingleMmap != 0
	if single && cqSize > sqSize {
		sqSize = cqSize
	}
	var err error
	r.ringMem, err = unix.Mmap(fd, offSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("ring: mmap sq ring: %w", err)
	}
	cqMem := r.ringMem
	if !single {
		r.cqMem, err = unix.Mmap(fd, offCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			r.unmap()
			return nil, fmt.Errorf("ring: mmap cq ring: %w", err)
		}
		cqMem = r.cqMem
	}
	r.sqeMem, err = unix.Mmap(fd, offSQEs, int(p.sqEntries)*int(unsafe.Sizeof(sqe{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		r.unmap()
		return nil, fmt.Errorf("ring: mmap sqes: %w", err)
	}
	r.sqHead = u32At(r.ringMem, p.sqOff.head)
	r.sqTail = u32At(r.ringMem, p.sqOff.tail)
	r.sqFlags = u32At(r.ringMem, p.sqOff.flags)
	r.tail = atomic.LoadUint32(r.sqTail)
	array := unsafe.Slice(u32At(r.ringMem, p.sqOff.array), p.sqEntries)
	for i := range array {
		array[i] = uint32(i) // SQE i always sits at array slot i
	}
	r.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&r.sqeMem[0])), p.sqEntries)
	r.cqHead = u32At(cqMem, p.cqOff.head)
	r.cqTail = u32At(cqMem, p.cqOff.tail)
	r.cqMask = *u32At(cqMem, p.cqOff.ringMask)
	r.cqes = unsafe.Slice((*cqe)(unsafe.Pointer(&cqMem[p.cqOff.cqes])), p.cqEntries)
	r.info = Info{
		Backend:    BackendIOUring,
		Kernel:     kernelRelease(),
		SetupFlags: setupFlagNames(p.flags),
		Features:   featureNames(p.features),
		SQEntries:  p.sqEntries,
		CQEntries:  p.cqEntries,
	}
	if err := r.probe(); err != nil {
		r.unmap()
		return nil, err
	}
	return r, nil
}

// u32At is the address of the uint32 at off in mapped memory.
func u32At(mem []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }

// probe asks the kernel which opcodes it supports (IORING_REGISTER_PROBE) and fills Info.Ops.
func (r *uringRing) probe() error {
	buf := make([]byte, probeHeaderSize+probeOpsLen*probeOpSize)
	if errno := r.register(registerProbe, unsafe.Pointer(&buf[0]), probeOpsLen); errno != 0 {
		return fmt.Errorf("%w: IORING_REGISTER_PROBE: %v", ErrUnavailable, errno)
	}
	opsLen := int(buf[1])
	for i := 0; i < opsLen && i < probeOpsLen; i++ {
		op := buf[probeHeaderSize+i*probeOpSize:]
		flags := uint16(op[2]) | uint16(op[3])<<8
		if flags&probeOpSupported != 0 {
			r.probed[op[0]] = true
		}
	}
	for op := OpNop; op <= opLast; op++ {
		// Ftruncate is always offered: without the opcode, the ring runs ftruncate(2) itself.
		if r.probed[kernelOpcode(op)] || op == OpFtruncate {
			r.info.Ops = append(r.info.Ops, op)
		}
	}
	if !r.probed[kopMsgRing] {
		r.log.Info("ring: kernel lacks IORING_OP_MSG_RING; MsgRing returns ErrUnsupported")
	}
	return nil
}

// register is io_uring_register(2), retried on EINTR.
func (r *uringRing) register(op uintptr, arg unsafe.Pointer, n int) unix.Errno {
	for {
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), op, uintptr(arg), uintptr(n), 0, 0)
		if errno != unix.EINTR {
			return errno
		}
	}
}

func (r *uringRing) Info() Info { return cloneInfo(r.info) }

// queue takes a slot and an SQE for a new operation. The SQE is zeroed and carries the opcode, the
// submission flags and the user_data; the caller fills the rest before the next Submit publishes it.
func (r *uringRing) queue(h Handler, tag uint64, op Opcode, fl Flags) (*slot, *sqe, error) {
	if r.closed {
		return nil, nil, ErrClosed
	}
	assert.True(h != nil, "ring: nil handler")
	if !r.probed[kernelOpcode(op)] {
		return nil, nil, ErrUnsupported
	}
	if r.tail-atomic.LoadUint32(r.sqHead) >= r.sqEntries {
		return nil, nil, ErrQueueFull
	}
	idx, s, ok := r.slots.acquire(h, tag, op, fl)
	if !ok {
		return nil, nil, ErrQueueFull
	}
	e := &r.sqes[r.tail&r.sqMask]
	*e = sqe{opcode: kernelOpcode(op), userData: userData(idx, s.gen)}
	if fl&Link != 0 {
		e.flags |= sqeIOLink
	}
	if fl&FixedFile != 0 {
		e.flags |= sqeFixedFile
	}
	if fl&Async != 0 {
		e.flags |= sqeAsync
	}
	r.tail++
	return s, e, nil
}

// Submit publishes the queued SQEs with one atomic tail store (each SQE was filled before it) and
// enters the kernel to submit them.
func (r *uringRing) Submit() (int, error) {
	return r.enter(0, 0)
}

// enter publishes the tail and calls io_uring_enter with the given wait count and flags, retrying on
// EINTR. EAGAIN and EBUSY (the kernel is short of memory or holds overflowed CQEs) submit nothing and
// are not errors: the caller dispatches and tries again.
func (r *uringRing) enter(minComplete uint32, flags uintptr) (int, error) {
	if r.closed {
		return 0, ErrClosed
	}
	atomic.StoreUint32(r.sqTail, r.tail)
	toSubmit := r.tail - atomic.LoadUint32(r.sqHead)
	if toSubmit == 0 && flags == 0 {
		return 0, nil
	}
	for {
		n, errno := r.enterSyscall(toSubmit, minComplete, flags)
		switch errno {
		case 0:
			return int(n), nil
		case unix.EINTR:
			if r.holdP {
				// A signal: most often the runtime asking this goroutine to stop (a preemption,
				// a stop-the-world, a stack scan), which it can only do in Go code. Yield here,
				// the safe point the raw syscall lacked, then enter again.
				runtime.Gosched()
			}
			continue
		case unix.EAGAIN, unix.EBUSY:
			return 0, nil
		case unix.EEXIST:
			return 0, fmt.Errorf("ring: io_uring_enter from a thread other than the one that created the ring (SINGLE_ISSUER): %w", errno)
		}
		return 0, fmt.Errorf("ring: io_uring_enter: %w", errno)
	}
}

// enterSyscall is io_uring_enter(2): a raw syscall with WaitHoldsP (the P stays with this thread),
// else one the runtime is told of (it may hand the P to another thread while this one waits).
func (r *uringRing) enterSyscall(toSubmit, minComplete uint32, flags uintptr) (uintptr, unix.Errno) {
	if r.holdP {
		n, _, errno := unix.RawSyscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit),
			uintptr(minComplete), flags, 0, 0)
		return n, errno
	}
	n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit),
		uintptr(minComplete), flags, 0, 0)
	return n, errno
}

// Wait submits and waits in the kernel for minComplete CQEs. GETEVENTS is always set so that, under
// DEFER_TASKRUN, the kernel runs pending task work and posts its completions even for Wait(0); under
// COOP_TASKRUN, entering the kernel runs it anyway.
func (r *uringRing) Wait(minComplete int) error {
	assert.True(!r.reaping, "ring: Wait called from a handler")
	assert.True(minComplete >= 0, "ring: negative wait count")
	if len(r.emulated) > 0 {
		minComplete = 0 // completions are already waiting
	}
	minComplete = min(minComplete, len(r.cqes)) // the kernel could never post more at once
	if _, err := r.enter(uint32(minComplete), enterGetEvents); err != nil {
		return err
	}
	// io_uring_enter returns early when it submitted SQEs and a signal then cut the wait short;
	// wait again (with nothing left to submit) until the CQ really holds minComplete entries.
	for r.cqReady() < uint32(minComplete) {
		if _, err := r.enter(uint32(minComplete), enterGetEvents); err != nil {
			return err
		}
	}
	return nil
}

// cqReady is the number of CQEs posted and not yet reaped.
func (r *uringRing) cqReady() uint32 {
	return atomic.LoadUint32(r.cqTail) - atomic.LoadUint32(r.cqHead)
}

// Dispatch reaps up to CQEBatchMax CQEs, releasing each slot, then runs the handlers in order after
// the reap loop. A SendZC's first CQE is held until its notification CQE arrives.
func (r *uringRing) Dispatch() int {
	assert.True(!r.reaping, "ring: Dispatch called from a handler")
	if r.closed {
		return 0 // the rings are unmapped
	}
	n := r.reapEmulated(0)
	for n < CQEBatchMax {
		m := r.reap(n)
		if m == n && atomic.LoadUint32(r.sqFlags)&sqFlagCQOverflow != 0 && !r.closed {
			// The kernel holds CQEs it could not post; flush them into the CQ and reap again.
			r.cqOverflows++
			r.enter(0, enterGetEvents)
			m = r.reap(n)
		}
		if m == n {
			break
		}
		n = m
	}
	// reaping stays set across every handler call, so a handler that drives the ring (Wait or
	// Dispatch) crashes at once instead of losing the completions of this batch.
	r.reaping = true
	for i := 0; i < n; i++ {
		e := r.batch[i]
		r.batch[i] = dispatchEntry{}
		e.h.Complete(e.c)
	}
	r.reaping = false
	return n
}

// reap moves CQEs from the CQ ring into the batch from position n and returns the new length.
func (r *uringRing) reap(n int) int {
	head := atomic.LoadUint32(r.cqHead)
	tail := atomic.LoadUint32(r.cqTail)
	for head != tail && n < CQEBatchMax {
		c := r.cqes[head&r.cqMask]
		head++
		if c.flags&msgCQEMarker != 0 {
			if r.msgHandler != nil {
				r.batch[n] = dispatchEntry{r.msgHandler, Completion{Tag: c.userData, Res: c.res, Flags: c.flags & msgCQEFlagsVisible, Op: OpMsgRing}}
				n++
			}
			continue
		}
		if r.takeCQE(c, n) {
			n++
		}
	}
	atomic.StoreUint32(r.cqHead, head)
	return n
}

// takeCQE turns one CQE of an operation of ours into batch entry n and releases its slot. It reports
// false for a CQE that completes nothing yet: a SendZC result still waiting for its notification.
func (r *uringRing) takeCQE(c cqe, n int) bool {
	idx := int32(uint32(c.userData))
	assert.True(idx >= 0 && int(idx) < len(r.slots.slots), "ring: CQE user_data names no slot")
	s := &r.slots.slots[idx]
	assert.True(s.busy && s.gen == uint32(c.userData>>32), "ring: CQE for a slot not in flight")
	res, flags := c.res, c.flags
	if s.op == OpSendZC {
		if c.flags&cqeFlagNotif == 0 && c.flags&cqeFlagMore != 0 {
			s.zcRes, s.zcNotifyPending = c.res, true
			return false
		}
		if c.flags&cqeFlagNotif != 0 {
			assert.True(s.zcNotifyPending, "ring: send_zc notification without its result")
			res, flags = s.zcRes, c.flags&^(cqeFlagNotif|cqeFlagMore)
		}
	}
	r.batch[n] = dispatchEntry{s.handler, Completion{Tag: s.tag, Res: res, Flags: flags, Op: s.op}}
	r.slots.release(idx)
	return true
}

// reapEmulated moves emulated completions into the batch.
func (r *uringRing) reapEmulated(n int) int {
	i := 0
	for ; i < len(r.emulated) && n < CQEBatchMax; i++ {
		if r.takeCQE(r.emulated[i], n) {
			n++
		}
	}
	r.emulated = r.emulated[:copy(r.emulated, r.emulated[i:])]
	return n
}

func (r *uringRing) InFlight() int { return r.slots.inFlight() }

func (r *uringRing) SetMsgHandler(h Handler) { r.msgHandler = h }

// CQOverflows is how many times Dispatch found the CQ overflow flag set and flushed it.
func (r *uringRing) CQOverflows() uint64 { return r.cqOverflows }

func (r *uringRing) RegisterFiles(fds []int) error {
	if r.closed {
		return ErrClosed
	}
	if len(fds) == 0 {
		return fmt.Errorf("ring: register files: %w", unix.EINVAL)
	}
	table := make([]int32, len(fds))
	for i, fd := range fds {
		table[i] = int32(fd)
	}
	if errno := r.register(registerFiles, unsafe.Pointer(&table[0]), len(table)); errno != 0 {
		return fmt.Errorf("ring: register files: %w", errno)
	}
	r.filesRegistered = true
	return nil
}

func (r *uringRing) UnregisterFiles() error {
	if errno := r.register(unregisterFiles, nil, 0); errno != 0 {
		return fmt.Errorf("ring: unregister files: %w", errno)
	}
	r.filesRegistered = false
	return nil
}

func (r *uringRing) RegisterBuffers(bufs [][]byte) error {
	if r.closed {
		return ErrClosed
	}
	if len(bufs) == 0 {
		return fmt.Errorf("ring: register buffers: %w", unix.EINVAL)
	}
	iovecs := make([]unix.Iovec, len(bufs))
	for i, b := range bufs {
		iovecs[i] = unix.Iovec{Base: bytePtr(b)}
		iovecs[i].SetLen(len(b))
	}
	if errno := r.register(registerBuffers, unsafe.Pointer(&iovecs[0]), len(iovecs)); errno != 0 {
		return fmt.Errorf("ring: register buffers: %w", errno)
	}
	r.registeredBufs = append(make([][]byte, 0, len(bufs)), bufs...)
	return nil
}

func (r *uringRing) UnregisterBuffers() error {
	if errno := r.register(unregisterBuffers, nil, 0); errno != 0 {
		return fmt.Errorf("ring: unregister buffers: %w", errno)
	}
	r.registeredBufs = nil
	return nil
}

// Close unmaps the rings and closes the ring fd. The kernel cancels what is still in flight.
func (r *uringRing) Close() error {
	if r.closed {
		return ErrClosed
	}
	r.closed = true
	r.peersClosed.Store(true)
	r.unmap()
	if err := unix.Close(r.fd); err != nil {
		return fmt.Errorf("ring: close io_uring fd: %w", err)
	}
	return nil
}

func (r *uringRing) unmap() {
	for _, m := range []*[]byte{&r.sqeMem, &r.cqMem, &r.ringMem} {
		if *m != nil {
			if err := unix.Munmap(*m); err != nil {
				r.log.Error("ring: munmap", "err", err)
			}
			*m = nil
		}
	}
	r.sqes, r.cqes = nil, nil
}
