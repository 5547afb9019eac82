package vsr

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"
	"github.com/ringstream/ringstream/wire"
)

// The replica's durable state is three things, in a format of this package's own that the shard (through
// its ring) and the simulator (in memory) both write:
//
//   - the log: an append-only sequence of log records, each one entry. A view change never rewrites it;
//     the entries of a new log are appended, and the superblock's head picks the chain that counts. Open
//     cuts a torn tail (the first record that does not decode) and ignores entries off the chain.
//   - two snapshot slots: a checkpoint is written to the slot the current superblock does not name.
//   - two superblock slots: the superblock is written to slot Sequence%2. Open takes the valid copy with
//     the highest sequence, so a torn superblock write leaves the previous one in force.
//
// Write order for one persist (Effects): snapshot, log records, fsync; then the superblock, fsync. The
// superblock never names a log entry or a snapshot that is not durable before it.

// Sentinel errors of the storage format. Each has one meaning.
var (
	// ErrStorageCorrupt: the superblock names a snapshot or a log entry that the storage does not hold.
	ErrStorageCorrupt = errors.New("vsr: storage corrupt")
	// ErrRecord: a record does not decode (torn, wrong magic, bad checksum); for a log, where the tail is cut.
	ErrRecord = errors.New("vsr: bad record")
)

const (
	superblockMagic = 0x42535256 // "VRSB"
	logRecordMagic  = 0x4c525356 // "VSRL"
	snapshotMagic   = 0x53535256 // "VRSS"
	checkpointMagic = 0x50435356 // "VSCP"

	// SuperblockSize is the size of one superblock slot.
	SuperblockSize = 96
	// LogRecordHeaderSize is the bytes a log record adds before its entry.
	LogRecordHeaderSize = 8
)

// Superblock is the replica's durable protocol state.
type Superblock struct {
	Sequence         uint64 // grows by one per write; picks the newest slot
	View             uint32
	LogView          uint32 // the view whose log the replica holds
	Op               uint64 // head of the log
	Head             uint64 // checksum of the entry at Op (the snapshot's head when Op is SnapshotOp)
	Commit           uint64
	SnapshotOp       uint64 // op of the checkpoint in force; 0 for none
	SnapshotChecksum uint64 // checksum of that snapshot record's payload
}

// AppendSuperblock appends sb as one SuperblockSize slot.
func AppendSuperblock(dst []byte, sb Superblock) []byte {
	start := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, superblockMagic)
	dst = binary.LittleEndian.AppendUint32(dst, 1)
	dst = binary.LittleEndian.AppendUint64(dst, sb.Sequence)
	dst = binary.LittleEndian.AppendUint32(dst, sb.View)
	dst = binary.LittleEndian.AppendUint32(dst, sb.LogView)
	dst = binary.LittleEndian.AppendUint64(dst, sb.Op)
	dst = binary.LittleEndian.AppendUint64(dst, sb.Head)
	dst = binary.LittleEndian.AppendUint64(dst, sb.Commit)
	dst = binary.LittleEndian.AppendUint64(dst, sb.SnapshotOp)
	dst = binary.LittleEndian.AppendUint64(dst, sb.SnapshotChecksum)
	for len(dst)-start < SuperblockSize-8 {
		dst = append(dst, 0)
	}
	return binary.LittleEndian.AppendUint64(dst, xxhash.Sum64(dst[start:]))
}

// DecodeSuperblock decodes one slot.
func DecodeSuperblock(b []byte) (Superblock, error) {
	if len(b) < SuperblockSize {
		return Superblock{}, fmt.Errorf("%w: superblock of %d bytes", ErrRecord, len(b))
	}
	b = b[:SuperblockSize]
	if binary.LittleEndian.Uint32(b) != superblockMagic || binary.LittleEndian.Uint32(b[4:]) != 1 {
		return Superblock{}, fmt.Errorf("%w: superblock magic", ErrRecord)
	}
	if xxhash.Sum64(b[:SuperblockSize-8]) != binary.LittleEndian.Uint64(b[SuperblockSize-8:]) {
		return Superblock{}, fmt.Errorf("%w: superblock checksum", ErrRecord)
	}
	sb := Superblock{
		Sequence: binary.LittleEndian.Uint64(b[8:]), View: binary.LittleEndian.Uint32(b[16:]),
		LogView: binary.LittleEndian.Uint32(b[20:]), Op: binary.LittleEndian.Uint64(b[24:]),
		Head: binary.LittleEndian.Uint64(b[32:]), Commit: binary.LittleEndian.Uint64(b[40:]),
		SnapshotOp: binary.LittleEndian.Uint64(b[48:]), SnapshotChecksum: binary.LittleEndian.Uint64(b[56:]),
	}
	if sb.LogView > sb.View || sb.Commit > sb.Op || sb.SnapshotOp > sb.Commit {
		return Superblock{}, fmt.Errorf("%w: superblock fields out of order", ErrRecord)
	}
	return sb, nil
}

// AppendLogRecord appends e as one log record: magic u32 | record size u32 | the entry's wire layout.
func AppendLogRecord(dst []byte, e *wire.VSREntry) []byte {
	size := LogRecordHeaderSize + wire.VSREntryHeaderSize + len(e.Body)
	dst = binary.LittleEndian.AppendUint32(dst, logRecordMagic)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(size))
	return wire.AppendVSREntry(dst, e)
}

// DecodeLogRecord decodes the record at the front of b and returns its entry (body aliasing b) and its
// size. A record that is short, has a wrong magic or a wrong entry checksum is ErrRecord.
func DecodeLogRecord(b []byte) (wire.VSREntry, int, error) {
	if len(b) < LogRecordHeaderSize+wire.VSREntryHeaderSize {
		return wire.VSREntry{}, 0, fmt.Errorf("%w: short log record", ErrRecord)
	}
	if binary.LittleEndian.Uint32(b) != logRecordMagic {
		return wire.VSREntry{}, 0, fmt.Errorf("%w: log record magic", ErrRecord)
	}
	size := binary.LittleEndian.Uint32(b[4:])
	if uint64(size) > uint64(len(b)) || size < LogRecordHeaderSize+wire.VSREntryHeaderSize {
		return wire.VSREntry{}, 0, fmt.Errorf("%w: log record size", ErrRecord)
	}
	e, n, err := wire.DecodeVSREntry(b[LogRecordHeaderSize:size])
	if err != nil || n != int(size)-LogRecordHeaderSize {
		return wire.VSREntry{}, 0, fmt.Errorf("%w: log record entry", ErrRecord)
	}
	if entryChecksum(&e) != e.Checksum {
		return wire.VSREntry{}, 0, fmt.Errorf("%w: log record checksum", ErrRecord)
	}
	return e, int(size), nil
}

// AppendSnapshotRecord appends a snapshot slot: magic u32 | payload size u32 | payload | checksum u64.
func AppendSnapshotRecord(dst []byte, payload []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, snapshotMagic)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = append(dst, payload...)
	return binary.LittleEndian.AppendUint64(dst, xxhash.Sum64(payload))
}

// DecodeSnapshotRecord returns the payload of a snapshot slot (aliasing b) and its checksum.
func DecodeSnapshotRecord(b []byte) ([]byte, uint64, error) {
	if len(b) < 16 || binary.LittleEndian.Uint32(b) != snapshotMagic {
		return nil, 0, fmt.Errorf("%w: snapshot header", ErrRecord)
	}
	size := uint64(binary.LittleEndian.Uint32(b[4:]))
	if size > uint64(len(b))-16 {
		return nil, 0, fmt.Errorf("%w: snapshot size", ErrRecord)
	}
	payload := b[8 : 8+size]
	sum := xxhash.Sum64(payload)
	if binary.LittleEndian.Uint64(b[8+size:]) != sum {
		return nil, 0, fmt.Errorf("%w: snapshot checksum", ErrRecord)
	}
	return payload, sum, nil
}

// Durable is what Recover found: the superblock in force, the checkpoint it names and the log chain
// from the checkpoint up to its head. Fresh means no superblock was ever written completely.
type Durable struct {
	Fresh      bool
	Superblock Superblock
	Snapshot   []byte          // checkpoint payload; nil when Superblock.SnapshotOp is 0
	SnapSlot   int             // slot the snapshot came from; the next checkpoint goes to the other
	Entries    []wire.VSREntry // ops SnapshotOp+1 .. Op, bodies aliasing the log bytes
}

// Recover reads a replica's storage: the two superblock slots, the two snapshot slots and the whole log.
// It returns the durable state and the length of the log's valid prefix: the caller cuts the log file
// there before appending (a torn tail). Empty slots are nil or zero-length. Bytes from a disk are
// input: Recover returns errors and never panics.
func Recover(superblocks [2][]byte, snapshots [2][]byte, log []byte) (Durable, int, error) {
	var d Durable
	found := false
	for _, b := range superblocks {
		sb, err := DecodeSuperblock(b)
		if err == nil && (!found || sb.Sequence > d.Superblock.Sequence) {
			d.Superblock, found = sb, true
		}
	}
	valid, byChecksum := scanLog(log)
	if !found {
		d.Fresh = true
		return d, valid, nil
	}
	sb := d.Superblock
	root := uint64(0)
	if sb.SnapshotOp > 0 {
		ok := false
		for slot, b := range snapshots {
			payload, sum, err := DecodeSnapshotRecord(b)
			if err == nil && sum == sb.SnapshotChecksum {
				d.Snapshot, d.SnapSlot, ok = payload, slot, true
				break
			}
		}
		if !ok {
			return Durable{}, 0, fmt.Errorf("%w: no snapshot slot holds checkpoint op %d", ErrStorageCorrupt,
				sb.SnapshotOp)
		}
		cp, err := decodeCheckpointHead(d.Snapshot)
		if err != nil || cp.op != sb.SnapshotOp {
			return Durable{}, 0, fmt.Errorf("%w: checkpoint op %d does not decode", ErrStorageCorrupt, sb.SnapshotOp)
		}
		root = cp.head
	}
	entries, err := walkChain(byChecksum, sb, root)
	if err != nil {
		return Durable{}, 0, err
	}
	d.Entries = entries
	return d, valid, nil
}

// scanLog decodes records from the start of log up to the first that does not decode, and indexes
// them by checksum. It returns the length of that valid prefix.
func scanLog(log []byte) (int, map[uint64]wire.VSREntry) {
	byChecksum := make(map[uint64]wire.VSREntry)
	off := 0
	for off < len(log) {
		e, n, err := DecodeLogRecord(log[off:])
		if err != nil {
			break
		}
		byChecksum[e.Checksum] = e
		off += n
	}
	return off, byChecksum
}

// walkChain follows parents from the superblock's head down to the checkpoint and returns the entries
// in op order.
func walkChain(byChecksum map[uint64]wire.VSREntry, sb Superblock, root uint64) ([]wire.VSREntry, error) {
	if sb.Op == sb.SnapshotOp {
		if sb.Head != root {
			return nil, fmt.Errorf("%w: head %x is not the checkpoint's %x", ErrStorageCorrupt, sb.Head, root)
		}
		return nil, nil
	}
	if sb.Op-sb.SnapshotOp > uint64(len(byChecksum)) {
		return nil, fmt.Errorf("%w: log holds %d entries, superblock needs %d", ErrStorageCorrupt,
			len(byChecksum), sb.Op-sb.SnapshotOp)
	}
	entries := make([]wire.VSREntry, sb.Op-sb.SnapshotOp)
	want := sb.Head
	for op := sb.Op; op > sb.SnapshotOp; op-- {
		e, ok := byChecksum[want]
		if !ok || e.Op != op {
			return nil, fmt.Errorf("%w: log entry op %d (checksum %x) missing", ErrStorageCorrupt, op, want)
		}
		entries[op-sb.SnapshotOp-1] = e
		want = e.Parent
	}
	if want != root {
		return nil, fmt.Errorf("%w: log chain does not reach the checkpoint", ErrStorageCorrupt)
	}
	return entries, nil
}
