// Package ring, continued: what it owns, what it never does, and the decisions the design left open.
//
// What it owns: the io_uring file descriptor and its three mappings (SQ ring, CQ ring, SQE array),
// the fixed in-flight slot table, and for the fallback backend its epoll instance, its eventfd and
// its MsgRing inbox. Nothing else: buffers belong to the caller, and the ring only references them
// from a slot while the kernel may touch them.
//
// What it never does: start goroutines, read the clock outside the fallback's timer bookkeeping,
// allocate per operation in steady state (pinned by TestSteadyStateAllocatesNothing), panic on a
// kernel error (those are completions or returned errors), or retry an operation that failed.
//
// Decisions where the design is silent:
//
//   - user_data is the slot index in the low 32 bits and the slot's generation in the high 32. A CQE
//     naming a free slot or a stale generation is a broken invariant and crashes.
//   - Setup asks for CQSIZE (CQ twice the SQ) and SUBMIT_ALL with each flag set; the last attempt
//     drops SUBMIT_ALL for kernels older than 5.18. Refusals by ENOSYS, EPERM or EACCES stop the
//     attempts at once, since no flag set can help; New(BackendAuto) then falls back.
//   - MsgRing posts carry bit 31 in the target's CQE flags (IORING_MSG_RING_FLAGS_PASS, Linux 6.3+)
//     so the target tells messages from its own completions; the bit is cleared before the
//     MsgHandler sees the flags. A ring without a MsgHandler drops messages.
//   - Openat adds O_CLOEXEC and Accept asks for SOCK_CLOEXEC, as Go's os and net packages do.
//   - A short read or write (fewer bytes than asked) fails a link chain on the fallback, as it does in
//     the kernel; a Timeout that fires (-ETIME) also fails its chain, as IORING_OP_TIMEOUT does.
//   - Where the kernel lacks IORING_OP_FTRUNCATE, the io_uring backend runs ftruncate(2) when the
//     operation is queued and posts the result with the next Dispatch. On such kernels it does not
//     wait for operations queued before it, and a Link on it is ignored.
//   - The fallback puts a socket it accepts on or connects with into non-blocking mode; send, recv and
//     sendmsg use MSG_DONTWAIT and never change the descriptor. Sends add MSG_NOSIGNAL.
//   - The fallback's inbox holds as many messages as the target has slots (2 x Entries); a post to a
//     full inbox completes the sender's MsgRing with EOVERFLOW. Senders keep their own bound (as the
//     shard-pair queues do), so it is a guard, not flow control. The io_uring backend has no such
//     limit: the kernel keeps overflowed CQEs (IORING_FEAT_NODROP) and Dispatch flushes them.
//   - The task-work mode is Config.TaskRun: COOP_TASKRUN by default, DEFER_TASKRUN on request. On
//     Linux 6.18 the metadata op and the stream confirm ran 0.7-0.9x the time under COOP_TASKRUN
//     (BENCHMARKS.md, "COOP_TASKRUN or DEFER_TASKRUN"); both paths wait on linked chains of writes
//     and an fdatasync, which finish on io-wq workers. Why DEFER_TASKRUN is slower there is not traced.
//     Under DEFER_TASKRUN the kernel posts completions only while the owning thread is inside
//     io_uring_enter with GETEVENTS, which Wait always asks for; Submit alone never makes completions
//     appear. Either way a loop that must not block collects them with Wait(0) before Dispatch.
//   - The fallback ignores Async (there is no worker pool to force), and refuses FixedFile on
//     CloseFile and Openat with EBADF, as the kernel does.
//   - Offset -1 on Read, Write, Readv and Writev means the file position, as in io_uring
//     (IORING_FEAT_RW_CUR_POS): the fallback runs read(2), write(2), readv(2) or writev(2) for it.
//   - RenameAt, UnlinkAt, MkdirAt and Statx copy their paths, NUL-terminated, into the slot's own
//     buffers, which grow only when a longer path than that slot ever held arrives: a rare path may
//     allocate once, steady state does not (pinned by TestSteadyStateAllocatesNothing).
//   - A path holding a NUL byte completes with EINVAL on both backends. The io_uring backend never
//     hands it to the kernel, so there it takes no part in a link chain; the fallback runs it in its
//     chain, which the EINVAL then breaks. Callers have no reason to queue such a path.
//   - Whether a failed RenameAt, UnlinkAt, MkdirAt, Fallocate or Statx cancels what is linked after it
//     depends on the kernel: 6.18 cancels only when the fd or dirfd itself is bad and lets the chain
//     go on after ENOENT, EEXIST or ENOTEMPTY; older kernels cancelled on any failure. The fallback
//     keeps the general rule (any failure cancels the rest). Callers check every completion of such
//     a chain and rely on neither; a failure before one of these operations cancels it everywhere.
//   - These five operations are probe-gated like the rest: on a kernel without the opcode (RENAMEAT,
//     UNLINKAT 5.11, MKDIRAT 5.15, FALLOCATE 5.6, STATX 5.6) the io_uring backend returns
//     ErrUnsupported and Info.Ops leaves it out; no syscall is run in its place.
//   - The fallback's timers have millisecond resolution in epoll_wait (deadlines are rounded up), so a
//     timeout never fires early.
//   - The wait holds its P (Config.WaitHoldsP, on in ringstream serve). A shard's thread spends most
//     of its life in io_uring_enter. Told of that syscall, the Go runtime counts the thread as gone,
//     and a goroutine that never passes through the scheduler (a shard's loop) has its P taken back
//     by sysmon once it has run for 10 ms; every such retake resets sysmon's sleep to 20 us, so it
//     woke 1,350-1,550 times a second in each node under load and cost 12-15% of each node's CPU
//     (perf, issue 26), more than the hashing. With the raw syscall the P stays with the thread,
//     sysmon backs off to its 10 ms sleep (about 100 wakes a second, measured), and the nodes' CPU
//     per record fell by a fifth. Its 10 ms preemption arrives as a signal: the wait
//     returns EINTR and the loop yields (runtime.Gosched), the safe point a stop-the-world, a stack
//     scan or a preemption waits for, then enters again. The price is that a waiting shard keeps
//     its P from other goroutines, so serve runs GOMAXPROCS at shards + 1 (the spare P for the
//     admin API, timers and the GC's workers); in-process clusters of several nodes (tests, the
//     stream benchmarks) leave it off, since their shards would take every P.
package ring
