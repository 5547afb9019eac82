package ring

import (
	"log/slog"
	"strconv"
)

// Backend names the implementation behind a Ring.
type Backend string

const (
	// BackendAuto picks io_uring where the kernel allows it and the fallback elsewhere.
	BackendAuto Backend = "auto"
	// BackendIOUring demands io_uring; New fails with ErrUnavailable where it is refused.
	BackendIOUring Backend = "io_uring"
	// BackendFallback uses plain syscalls (and epoll for sockets) behind the same interface.
	BackendFallback Backend = "fallback"
)

// TaskRun names how the io_uring backend has the kernel run the task work that posts completions of
// operations finished outside the shard's thread (io-wq workers: fdatasync, buffered writes that
// would block; network wakeups). The fallback backend ignores it.
type TaskRun string

const (
	// TaskRunCoop (the default) sets the ring up with SINGLE_ISSUER|COOP_TASKRUN: task work runs the
	// next time the shard's thread enters the kernel, without interrupting it.
	TaskRunCoop TaskRun = "coop"
	// TaskRunDefer sets it up with SINGLE_ISSUER|DEFER_TASKRUN: task work runs only while the shard's
	// thread waits in io_uring_enter with GETEVENTS. Measured slower for ringstream's commit paths on
	// Linux 6.18 (BENCHMARKS.md, "COOP_TASKRUN or DEFER_TASKRUN"); kept for kernels where it is not.
	TaskRunDefer TaskRun = "defer"
)

// Config sets up one ring.
type Config struct {
	Backend Backend // default BackendAuto
	// Entries is the submission queue size, a power of two (default 256). The completion queue is
	// twice that, and the in-flight table holds Entries*2 operations.
	Entries uint32
	// Logger receives the setup decisions (flags refused and why, fallback chosen and why).
	// Nil means slog.Default().
	Logger *slog.Logger
	// TaskRun picks the task-work setup flags tried first (default TaskRunCoop). Where the kernel
	// refuses them, setup falls back to plain COOP_TASKRUN, then to no flag, as Info reports.
	TaskRun TaskRun
	// WaitHoldsP has the io_uring backend enter the kernel with a raw syscall, so the Go runtime
	// does not see the thread leave and its P (the right to run Go code) stays with it while it
	// waits. Only for a process that keeps a spare P for its other goroutines (ringstream serve
	// runs GOMAXPROCS at shards + 1); see ring_doc.go, "The wait holds its P". The fallback
	// backend ignores it.
	WaitHoldsP bool
}

// Info is what a ring found on this machine.
type Info struct {
	Backend        Backend  // the backend in use: BackendIOUring or BackendFallback
	FallbackReason string   // why the fallback was chosen, when it was; empty otherwise
	Kernel         string   // uname release
	SetupFlags     []string // io_uring setup flags accepted, best first (empty for the fallback)
	SetupRefused   []string // setup flags tried and refused, with the errno
	Features       []string // IORING_FEAT_* reported by the kernel
	Ops            []Opcode // operations this ring can run
	SQEntries      uint32
	CQEntries      uint32
}

// Has says whether op is among Ops.
func (i Info) Has(op Opcode) bool {
	for _, o := range i.Ops {
		if o == op {
			return true
		}
	}
	return false
}

// Opcode names a ring operation. The values are ringstream's own, not the kernel's opcode numbers.
type Opcode uint8

const (
	OpNop Opcode = iota + 1
	OpRead
	OpWrite
	OpReadv
	OpWritev
	OpFsync
	OpFtruncate
	OpOpenat
	OpClose
	OpSend
	OpRecv
	OpSendmsg
	OpSendZC
	OpAccept
	OpConnect
	OpTimeout
	OpLinkTimeout
	OpMsgRing
	OpReadFixed
	OpWriteFixed
	OpFallocate
	OpRenameAt
	OpUnlinkAt
	OpMkdirAt
	OpStatx

	opLast = OpStatx // the highest Opcode; loops over every operation stop here
)

// Opcodes lists every operation this package knows, in Opcode order (Info.Ops says which a ring can run).
func Opcodes() []Opcode {
	ops := make([]Opcode, 0, opLast)
	for op := OpNop; op <= opLast; op++ {
		ops = append(ops, op)
	}
	return ops
}

var opcodeNames = [...]string{
	OpNop: "nop", OpRead: "read", OpWrite: "write", OpReadv: "readv", OpWritev: "writev",
	OpFsync: "fsync", OpFtruncate: "ftruncate", OpOpenat: "openat", OpClose: "close", OpSend: "send",
	OpRecv: "recv", OpSendmsg: "sendmsg", OpSendZC: "send_zc", OpAccept: "accept", OpConnect: "connect",
	OpTimeout: "timeout", OpLinkTimeout: "link_timeout", OpMsgRing: "msg_ring",
	OpReadFixed: "read_fixed", OpWriteFixed: "write_fixed", OpFallocate: "fallocate",
	OpRenameAt: "renameat", OpUnlinkAt: "unlinkat", OpMkdirAt: "mkdirat", OpStatx: "statx",
}

func (o Opcode) String() string {
	if int(o) < len(opcodeNames) && opcodeNames[o] != "" {
		return opcodeNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}
