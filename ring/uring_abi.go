package ring

import (
	"strconv"
	"unsafe"
)

// The io_uring ABI as this package uses it, written from the kernel's uapi header (include/uapi/linux/
// io_uring.h). Only what ring needs is declared.

// sqe is struct io_uring_sqe (64 bytes).
type sqe struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64 // also addr2
	addr        uint64
	len         uint32
	opFlags     uint32 // rw_flags, fsync_flags, msg_flags, timeout_flags, accept_flags, open_flags, ...
	userData    uint64
	bufIndex    uint16
	personality uint16
	fileIndex   uint32 // also splice_fd_in, addr_len
	addr3       uint64
	pad2        uint64
}

// cqe is struct io_uring_cqe (16 bytes; this package never asks for CQE32).
type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// sqringOffsets is struct io_sqring_offsets.
type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

// cqringOffsets is struct io_cqring_offsets.
type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// uringParams is struct io_uring_params (120 bytes).
type uringParams struct {
	sqEntries    uint32
	cqEntries    uint32
	flags        uint32
	sqThreadCPU  uint32
	sqThreadIdle uint32
	features     uint32
	wqFd         uint32
	resv         [3]uint32
	sqOff        sqringOffsets
	cqOff        cqringOffsets
}

// Compile-time checks that the Go layouts match the kernel's sizes.
var (
	_ [64 - unsafe.Sizeof(sqe{})]struct{}
	_ [unsafe.Sizeof(sqe{}) - 64]struct{}
	_ [16 - unsafe.Sizeof(cqe{})]struct{}
	_ [unsafe.Sizeof(cqe{}) - 16]struct{}
	_ [120 - unsafe.Sizeof(uringParams{})]struct{}
	_ [unsafe.Sizeof(uringParams{}) - 120]struct{}
)

// Kernel opcode numbers (enum io_uring_op).
const (
	kopNop        = 0
	kopReadv      = 1
	kopWritev     = 2
	kopFsync      = 3
	kopReadFixed  = 4
	kopWriteFixed = 5
	kopSendmsg    = 9
	kopTimeout    = 11
	kopAccept     = 13
	kopLinkTO     = 15
	kopConnect    = 16
	kopFallocate  = 17
	kopOpenat     = 18
	kopClose      = 19
	kopStatx      = 21
	kopRead       = 22
	kopWrite      = 23
	kopSend       = 26
	kopRecv       = 27
	kopRenameAt   = 35
	kopUnlinkAt   = 36
	kopMkdirAt    = 37
	kopMsgRing    = 40
	kopSendZC     = 47
	kopFtruncate  = 55
)

// kernelOpcode maps ringstream's opcodes to the kernel's.
func kernelOpcode(op Opcode) uint8 {
	switch op {
	case OpNop:
		return kopNop
	case OpRead:
		return kopRead
	case OpWrite:
		return kopWrite
	case OpReadv:
		return kopReadv
	case OpWritev:
		return kopWritev
	case OpFsync:
		return kopFsync
	case OpFtruncate:
		return kopFtruncate
	case OpOpenat:
		return kopOpenat
	case OpClose:
		return kopClose
	case OpSend:
		return kopSend
	case OpRecv:
		return kopRecv
	case OpSendmsg:
		return kopSendmsg
	case OpSendZC:
		return kopSendZC
	case OpAccept:
		return kopAccept
	case OpConnect:
		return kopConnect
	case OpTimeout:
		return kopTimeout
	case OpLinkTimeout:
		return kopLinkTO
	case OpMsgRing:
		return kopMsgRing
	case OpReadFixed:
		return kopReadFixed
	case OpWriteFixed:
		return kopWriteFixed
	case OpFallocate:
		return kopFallocate
	case OpRenameAt:
		return kopRenameAt
	case OpUnlinkAt:
		return kopUnlinkAt
	case OpMkdirAt:
		return kopMkdirAt
	case OpStatx:
		return kopStatx
	}
	panic("ring: unknown opcode")
}

// Setup flags (IORING_SETUP_*).
const (
	setupCQSize        = 1 << 3
	setupSubmitAll     = 1 << 7
	setupCoopTaskrun   = 1 << 8
	setupSingleIssuer  = 1 << 12
	setupDeferTaskrun  = 1 << 13
	sqeFixedFile       = 1 << 0
	sqeIOLink          = 1 << 2
	sqeAsync           = 1 << 4
	fsyncDatasync      = 1 << 0
	enterGetEvents     = 1 << 0
	sqFlagCQOverflow   = 1 << 1
	cqeFlagMore        = 1 << 1
	cqeFlagNotif       = 1 << 3
	msgRingFlagsPass   = 1 << 1
	featSingleMmap     = 1 << 0
	offSQRing          = 0
	offCQRing          = 0x8000000
	offSQEs            = 0x10000000
	registerBuffers    = 0
	unregisterBuffers  = 1
	registerFiles      = 2
	unregisterFiles    = 3
	registerProbe      = 8
	probeOpSupported   = 1 << 0
	probeOpsLen        = 256
	probeHeaderSize    = 16
	probeOpSize        = 8
	msgCQEMarker       = 1 << 31 // CQE flag bit this package sets on MsgRing posts (never a kernel flag)
	msgCQEFlagsVisible = ^uint32(msgCQEMarker)
)

// featureNames names the IORING_FEAT_* bits set in features; unknown bits are named by number.
func featureNames(features uint32) []string {
	names := [...]string{
		"SINGLE_MMAP", "NODROP", "SUBMIT_STABLE", "RW_CUR_POS", "CUR_PERSONALITY", "FAST_POLL",
		"POLL_32BITS", "SQPOLL_NONFIXED", "EXT_ARG", "NATIVE_WORKERS", "RSRC_TAGS", "CQE_SKIP",
		"LINKED_FILE", "REG_REG_RING", "RECVSEND_BUNDLE", "MIN_TIMEOUT", "RW_ATTR", "NO_IOWAIT",
	}
	var out []string
	for bit := 0; bit < 32; bit++ {
		if features&(1<<bit) == 0 {
			continue
		}
		if bit < len(names) {
			out = append(out, names[bit])
		} else {
			out = append(out, "bit"+strconv.Itoa(bit))
		}
	}
	return out
}

// setupFlagNames names the setup flags this package may ask for.
func setupFlagNames(flags uint32) []string {
	var names []string
	for _, f := range []struct {
		bit  uint32
		name string
	}{
		{setupCQSize, "CQSIZE"}, {setupSubmitAll, "SUBMIT_ALL"}, {setupCoopTaskrun, "COOP_TASKRUN"},
		{setupSingleIssuer, "SINGLE_ISSUER"}, {setupDeferTaskrun, "DEFER_TASKRUN"},
	} {
		if flags&f.bit != 0 {
			names = append(names, f.name)
		}
	}
	return names
}
