package ring

import (
	"unsafe"

	"github.com/ringstream/ringstream/internal/assert"
	"golang.org/x/sys/unix"
)

// slot is one in-flight operation. Slots live in one slice allocated at New and are reused, so the
// memory the kernel reads (iovecs, sockaddr, msghdr, timespec, path bytes) has a fixed heap address
// for as long as the operation is in flight, and the caller's buffers stay referenced until the
// completion is dispatched.
type slot struct {
	handler Handler
	tag     uint64
	gen     uint32 // bumped on every release, so a stale user_data is detected
	op      Opcode
	flags   Flags
	busy    bool

	// Arguments kept for the fallback backend, which runs the operation itself.
	fd        int
	fd2       int // RenameAt's new directory fd
	off       int64
	length    int64 // Fallocate's length
	msgFlags  int
	datasync  bool
	openFlags int
	mode      uint32
	bufIndex  uint16
	target    Ring
	msgRes    int32
	msgTag    uint64

	// Memory referenced by the kernel or kept alive for it until the completion.
	buf    []byte
	bufs   [][]byte
	iovecs []unix.Iovec // iovInline, or grown on demand and never shrunk: steady state allocates nothing
	// iovInline holds vectors of up to two buffers (a log's group write, a data frame's header
	// and body), so those never allocate, whichever slot the free stack hands out.
	iovInline [2]unix.Iovec
	path      []byte // NUL-terminated copy of a path (openat, renameat's old path, ...); grown on demand
	path2     []byte // NUL-terminated copy of renameat's new path; grown on demand
	statx     *unix.Statx_t
	sockaddr  unix.RawSockaddrAny
	addrLen   uint32
	msghdr    unix.Msghdr
	timespec  unix.Timespec

	// Fallback bookkeeping: the next operation of a link chain (-1 at the end), and for parked
	// operations the deadline (monotonic nanoseconds) or the readiness they wait for.
	next           int32
	deadlineNs     int64
	waitKind       uint8 // waitNone, waitSocket or waitTimer
	connectStarted bool
	// linkTimeout is the slot of the LinkTimeout that bounds this operation (-1 when none).
	linkTimeout int32
	// zcNotifyPending: a SendZC whose result CQE was seen and whose notification CQE is still due.
	zcNotifyPending bool
	zcRes           int32
}

// slotTable is the fixed in-flight table: slots plus a stack of free indexes.
type slotTable struct {
	slots []slot
	free  []int32
}

func newSlotTable(n int) slotTable {
	t := slotTable{slots: make([]slot, n), free: make([]int32, n)}
	for i := range t.free {
		t.free[i] = int32(n - 1 - i)
		t.slots[i].next = -1
		t.slots[i].linkTimeout = -1
	}
	return t
}

// acquire takes a free slot and fills the fields every operation has. It returns false when the
// table is full (back-pressure, not an error).
func (t *slotTable) acquire(h Handler, tag uint64, op Opcode, fl Flags) (int32, *slot, bool) {
	if len(t.free) == 0 {
		return -1, nil, false
	}
	idx := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	s := &t.slots[idx]
	assert.True(!s.busy, "ring: acquired a busy slot")
	s.busy = true
	s.handler = h
	s.tag = tag
	s.op = op
	s.flags = fl
	s.next = -1
	s.linkTimeout = -1
	s.zcNotifyPending = false
	return idx, s, true
}

// release returns a slot to the table and drops every reference it held, so the caller's buffers
// can be collected once the caller lets go of them too.
func (t *slotTable) release(idx int32) {
	s := &t.slots[idx]
	assert.True(s.busy, "ring: released a free slot")
	s.busy = false
	s.gen++
	s.handler = nil
	s.buf = nil
	s.target = nil
	s.statx = nil
	s.bufs = nil // the caller's slice: never written
	for i := range s.iovecs {
		s.iovecs[i] = unix.Iovec{}
	}
	s.msghdr = unix.Msghdr{}
	t.free = append(t.free, idx)
}

func (t *slotTable) inFlight() int { return len(t.slots) - len(t.free) }

// userData packs a slot index and its generation into a CQE's user_data.
func userData(idx int32, gen uint32) uint64 { return uint64(gen)<<32 | uint64(uint32(idx)) }

// setIovecs points s.iovecs at bufs. The iovec array is the slot's inline one for up to two
// buffers, and grows only when a longer vector than ever before is queued on this slot.
func (s *slot) setIovecs(bufs [][]byte) {
	if cap(s.iovecs) < len(bufs) {
		if len(bufs) <= len(s.iovInline) {
			s.iovecs = s.iovInline[:]
		} else {
			s.iovecs = make([]unix.Iovec, len(bufs))
		}
	}
	s.iovecs = s.iovecs[:len(bufs)]
	for i, b := range bufs {
		s.iovecs[i] = unix.Iovec{Base: bytePtr(b)}
		s.iovecs[i].SetLen(len(b))
	}
	s.bufs = bufs
}

// setPath copies path into the slot as a NUL-terminated byte string. It reports false when path
// holds a NUL byte, which no kernel path may contain.
func (s *slot) setPath(path string) bool { return copyPath(&s.path, path) }

// setPath2 is setPath for the second path of a rename.
func (s *slot) setPath2(path string) bool { return copyPath(&s.path2, path) }

// copyPath copies path into *dst with a NUL after it, reusing *dst's array: it allocates only when
// a longer path than this slot has ever held arrives (rare paths only; no per-record cost).
func copyPath(dst *[]byte, path string) bool {
	for i := 0; i < len(path); i++ {
		if path[i] == 0 {
			return false
		}
	}
	if cap(*dst) < len(path)+1 {
		*dst = make([]byte, len(path)+1, len(path)+64)
	}
	*dst = (*dst)[:len(path)+1]
	copy(*dst, path)
	(*dst)[len(path)] = 0
	return true
}

// iovecsPtr is the address of the first iovec, or nil for an empty vector.
func (s *slot) iovecsPtr() unsafe.Pointer {
	if len(s.iovecs) == 0 {
		return nil
	}
	return unsafe.Pointer(&s.iovecs[0])
}

// bytePtr is the address of b's first byte, or nil for an empty slice.
func bytePtr(b []byte) *byte {
	if len(b) == 0 {
		return nil
	}
	return &b[0]
}
