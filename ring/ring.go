// Package ring is ringstream's io_uring binding, written on golang.org/x/sys/unix without cgo, and a
// plain-syscall fallback backend that serves the same interface.
//
// One Ring belongs to one shard. It is created on the shard's locked OS thread, and every method is
// called from that thread only (the io_uring backend sets SINGLE_ISSUER where the kernel has it, which
// requires it). Other shards reach a ring only through MsgRing.
//
// The model, in the spirit of TigerBeetle's io layer:
//
//   - A caller queues an operation with one of the typed methods (Write, Fsync, Recv, ...). Each names the
//     Handler that will receive its completion and a caller-chosen tag that comes back in the Completion.
//   - Queued operations reach the kernel on Submit or Wait. Wait blocks until at least the given number
//     of completions is ready.
//   - Dispatch reaps ready completions (at most CQEBatchMax per call) and then, outside the reap loop,
//     calls each one's Handler.Complete in completion order.
//   - A handler may queue operations and call Submit (a log queues its next commit from a
//     completion), but never Wait or Dispatch on the ring running it: that would lose the rest of the
//     batch, so both backends assert it ("ring: Wait called from a handler").
//
// Memory handed to the kernel (buffers, iovec arrays, sockaddrs, timespecs, paths) is referenced from
// the ring's in-flight slot until the completion is dispatched, so the caller's slices stay alive; the
// caller must not reuse or change them until then. The ring allocates its slots once, at New; queueing,
// submitting and dispatching allocate nothing in steady state.
//
// Back-pressure: when the submission queue or the in-flight table is full, a typed method returns
// ErrQueueFull and queues nothing. The caller submits, dispatches some completions and tries again,
// or defers the work; it is never an I/O error.
//
// Ordering: operations queued with the Link flag form a chain with the next operation, as
// IOSQE_IO_LINK does: the next one starts only after this one succeeds, and if one fails, the rest of
// the chain completes with ECANCELED. The fallback backend keeps the same guarantee.
//
// Errors: a failed operation completes with a negative Res; Completion.Err turns it into an *OpError
// that names the operation and the errno.
package ring

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Ring is one shard's I/O queue. See the package comment for the contract every method follows.
// Implementations: the io_uring backend and the fallback backend, chosen by New.
type Ring interface {
	// Info says which backend serves this ring and what it found on this machine.
	Info() Info

	// Nop completes with Res 0; it exists for tests and benchmarks of the queue itself.
	Nop(h Handler, tag uint64, fl Flags) error
	// Read reads into buf at offset off of fd (pread). Res is the byte count.
	Read(h Handler, tag uint64, fd int, buf []byte, off int64, fl Flags) error
	// Write writes buf at offset off of fd (pwrite). Res is the byte count.
	Write(h Handler, tag uint64, fd int, buf []byte, off int64, fl Flags) error
	// Readv reads into bufs at offset off (preadv). The ring keeps its own iovec array.
	Readv(h Handler, tag uint64, fd int, bufs [][]byte, off int64, fl Flags) error
	// Writev writes bufs at offset off (pwritev). The ring keeps its own iovec array.
	Writev(h Handler, tag uint64, fd int, bufs [][]byte, off int64, fl Flags) error
	// Fsync flushes fd; datasync true is fdatasync.
	Fsync(h Handler, tag uint64, fd int, datasync bool, fl Flags) error
	// Ftruncate sets the size of fd. On kernels without IORING_OP_FTRUNCATE the io_uring backend runs
	// ftruncate(2) itself and posts the completion, so callers never see the difference.
	Ftruncate(h Handler, tag uint64, fd int, size int64, fl Flags) error
	// Openat opens path relative to dirfd. Res is the new fd.
	Openat(h Handler, tag uint64, dirfd int, path string, flags int, mode uint32, fl Flags) error
	// CloseFile closes fd (IORING_OP_CLOSE).
	CloseFile(h Handler, tag uint64, fd int, fl Flags) error
	// RenameAt renames oldPath (relative to oldDirfd) to newPath (relative to newDirfd); flags as
	// renameat2(2) (RENAME_NOREPLACE, RENAME_EXCHANGE). Res is 0.
	RenameAt(h Handler, tag uint64, oldDirfd int, oldPath string, newDirfd int, newPath string, flags uint32, fl Flags) error
	// UnlinkAt removes path relative to dirfd; flags 0 or unix.AT_REMOVEDIR. Res is 0.
	UnlinkAt(h Handler, tag uint64, dirfd int, path string, flags int, fl Flags) error
	// MkdirAt creates directory path relative to dirfd. Res is 0.
	MkdirAt(h Handler, tag uint64, dirfd int, path string, mode uint32, fl Flags) error
	// Fallocate is fallocate(2) on fd: mode 0 allocates and extends, FALLOC_FL_KEEP_SIZE allocates
	// only, FALLOC_FL_PUNCH_HOLE (with KEEP_SIZE) frees. Res is 0.
	Fallocate(h Handler, tag uint64, fd int, mode uint32, off, length int64, fl Flags) error
	// Statx is statx(2) of path relative to dirfd into st, which the caller must not touch until the
	// completion (flags as statx: AT_EMPTY_PATH with path "" stats dirfd itself). Res is 0.
	Statx(h Handler, tag uint64, dirfd int, path string, flags int, mask uint32, st *unix.Statx_t, fl Flags) error

	// Send sends buf on a connected socket. Res is the byte count (it may be short).
	Send(h Handler, tag uint64, fd int, buf []byte, msgFlags int, fl Flags) error
	// Recv receives into buf. Res is the byte count; 0 means the peer closed.
	Recv(h Handler, tag uint64, fd int, buf []byte, msgFlags int, fl Flags) error
	// Sendmsg sends bufs as one message (gather). Res is the byte count (it may be short).
	Sendmsg(h Handler, tag uint64, fd int, bufs [][]byte, msgFlags int, fl Flags) error
	// SendZC is a zero-copy send where Info().Has(OpSendZC); elsewhere it returns ErrUnsupported.
	// It completes once, after the kernel no longer needs buf (the ring folds the notification CQE).
	SendZC(h Handler, tag uint64, fd int, buf []byte, msgFlags int, fl Flags) error
	// Accept accepts a connection on a listening socket. Res is the new fd, created with SOCK_CLOEXEC.
	Accept(h Handler, tag uint64, fd int, fl Flags) error
	// Connect connects fd to sa. Res is 0 on success.
	Connect(h Handler, tag uint64, fd int, sa unix.Sockaddr, fl Flags) error

	// Timeout completes after d with Res -ETIME (which Completion.Err reports as nil: it is the
	// expected outcome). It is the shard's tick.
	Timeout(h Handler, tag uint64, d time.Duration, fl Flags) error
	// LinkTimeout bounds the operation queued just before it (which must carry Link): if d passes first,
	// that operation is cancelled and completes with ECANCELED, and this one with -ETIME.
	LinkTimeout(h Handler, tag uint64, d time.Duration, fl Flags) error
	// MsgRing posts a completion on target, which must be a ring of the same backend: target's
	// MsgHandler receives Completion{Tag: msgTag, Res: res}. This one completes on this ring when the
	// post is done. Safe to call only from this ring's thread; target may live on any thread.
	MsgRing(h Handler, tag uint64, target Ring, res int32, msgTag uint64, fl Flags) error

	// RegisterFiles registers fds for the fixed-file variants; index i of fds becomes file index i.
	RegisterFiles(fds []int) error
	// UnregisterFiles drops the registered files.
	UnregisterFiles() error
	// RegisterBuffers registers bufs for ReadFixed and WriteFixed; index i of bufs becomes buffer i.
	// The buffers must stay allocated until UnregisterBuffers or Close.
	RegisterBuffers(bufs [][]byte) error
	// UnregisterBuffers drops the registered buffers.
	UnregisterBuffers() error
	// ReadFixed reads into registered buffer bufIndex; buf must lie inside that buffer.
	ReadFixed(h Handler, tag uint64, fd int, buf []byte, bufIndex uint16, off int64, fl Flags) error
	// WriteFixed writes from registered buffer bufIndex; buf must lie inside that buffer.
	WriteFixed(h Handler, tag uint64, fd int, buf []byte, bufIndex uint16, off int64, fl Flags) error

	// SetMsgHandler names the handler for completions posted to this ring by MsgRing.
	SetMsgHandler(h Handler)
	// Submit hands every queued operation to the kernel (the fallback runs them). It returns the count.
	Submit() (int, error)
	// Wait submits what is queued and blocks until at least minComplete completions are ready to
	// dispatch (0: do not block). A signal interrupting the wait is retried inside. Calling it from a
	// handler this ring's Dispatch is running is a programmer error and panics.
	Wait(minComplete int) error
	// Dispatch reaps up to CQEBatchMax ready completions, then calls their handlers in order.
	// It returns how many it dispatched. Calling it from one of those handlers panics.
	Dispatch() int
	// InFlight is the number of operations queued or submitted whose completion has not been dispatched.
	InFlight() int
	// Close releases the ring. Operations still in flight are abandoned: close only a drained ring,
	// or accept that their handlers never run.
	Close() error
}

// Handler receives completions. A handler is usually a long-lived object (a log, a peer link) that
// tells its operations apart by tag; a pointer type implementing Handler costs no allocation per op.
type Handler interface {
	Complete(c Completion)
}

// Completion is one finished operation as Dispatch hands it to its Handler.
type Completion struct {
	Tag   uint64 // the caller's tag, as given when the operation was queued
	Res   int32  // the kernel's result: a count or fd when >= 0, -errno when < 0
	Flags uint32 // CQE flags (IORING_CQE_F_MORE and friends)
	Op    Opcode // which operation this was, for errors and metrics
}

// Err is nil when the operation succeeded and an *OpError otherwise. A Timeout that fired (-ETIME) is a
// success.
func (c Completion) Err() error {
	if c.Res >= 0 {
		return nil
	}
	errno := unix.Errno(-c.Res)
	if errno == unix.ETIME && (c.Op == OpTimeout || c.Op == OpLinkTimeout) {
		return nil
	}
	return &OpError{Op: c.Op, Errno: errno}
}

// OpError is a failed ring operation: which one and the errno the kernel (or the fallback) returned.
type OpError struct {
	Op    Opcode
	Errno unix.Errno
}

func (e *OpError) Error() string { return fmt.Sprintf("ring: %s: %v", e.Op, e.Errno) }

// Unwrap lets callers test with errors.Is(err, unix.ENOSPC).
func (e *OpError) Unwrap() error { return e.Errno }

// Flags are per-operation submission flags.
type Flags uint8

const (
	// Link chains this operation to the next one queued (IOSQE_IO_LINK).
	Link Flags = 1 << iota
	// FixedFile says fd is an index into the registered files (IOSQE_FIXED_FILE).
	FixedFile
	// Async forces the kernel to run the operation from a worker (IOSQE_ASYNC).
	Async
)

// CQEBatchMax bounds the completions one Dispatch call reaps, so one turn of the shard loop has a
// bounded length.
const CQEBatchMax = 256

// Sentinel errors. Each has one meaning.
var (
	// ErrQueueFull: no submission slot or in-flight slot is free. Submit, Dispatch, retry.
	ErrQueueFull = errors.New("ring: queue full")
	// ErrUnsupported: this backend or kernel lacks the operation (see Info).
	ErrUnsupported = errors.New("ring: operation not supported")
	// ErrClosed: the ring was closed.
	ErrClosed = errors.New("ring: closed")
	// ErrUnavailable: io_uring cannot be used here (ENOSYS, EPERM, kernel.io_uring_disabled); New
	// falls back unless the config demands io_uring.
	ErrUnavailable = errors.New("ring: io_uring unavailable")
)
