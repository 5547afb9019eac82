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
//   - SuperblockSlots superblock copies in SuperblockAreas areas of SuperblockCopies copies. A persist
//     writes the copies of one area, the area of its sequence (AreaOf), and leaves the other area, which
//     holds the persist before it, alone. Each copy may carry the persist's log records inline, after
//     the superblock, under the superblock's checksum (AppendSuperblockCopy). The driver keeps every
//     copy in its own sector (engine: its own 8 KiB), so one bad sector or one torn write damages one
//     copy. Recover takes the newest copy that decodes.
//
// One fsync per persist (decisions where the design is silent). The log records and the copies of a
// persist are written together and made durable by one fsync (engine keeps the copies in a header area
// of the log file). A power loss before that fsync may keep any subset of those writes, torn or whole.
// Each case leaves a state the replica may resume from:
//   - Some copy of the new superblock survived whole: it carries the persist's records inline, so the
//     state it names is complete whatever became of the log's append (Durable.Unlogged: the driver
//     appends what the log lost before the replica acts).
//   - No copy survived whole: the other area still holds every copy of the previous superblock, whose
//     records were durable before this persist began. The persist was never acknowledged.
//
// A superblock that was durable (its fsync returned, so the replica may have acknowledged it) is lost
// only if every one of its SuperblockCopies copies is damaged before a later persist supersedes it; one
// bad copy, or three, never roll the replica back, and the driver rewrites every copy of the area in
// force at open. Damage to records the superblock names that no copy carries (older log records, a
// snapshot) makes Recover return Recovering: the replica relearns its state from the group instead of
// acting on an older one. A copy that decodes is exactly what this replica wrote (the checksum covers
// the superblock and its inline records), and sequences only grow, so the newest copy is never newer
// than the truth: copies need no quorum. A persist whose records the driver does not inline (larger
// than its copy slot) or that carries a checkpoint is written in two steps: the snapshot and the log,
// fsync; then the copies, fsync. The superblock never names records or a snapshot that may be lost
// without it.
//
// Why this layout. A superblock written only when the view, log view or checkpoint changes (one fsync
// per append, the log alone saying where it ends) was tried and lost committed ops in the simulator
// (seeds 60074 and 60111): a record lost after the last superblock looks like the end of the log. A log
// whose lost tail can be told from its end (TigerBeetle's redundant headers and a replica that nacks
// what it cannot prove) would also do, at the price of protocol changes; carrying the persist's records
// in the copies proves the tail with the superblock itself and leaves the protocol as it is.
//
// The format step (FormatSuperblock, written to every copy of both areas before the replica first
// starts) records the identity (cluster, node, replica) and tells a member of a new cluster from one that
// replaces a lost replica: the first starts fresh, the second in recovery. Storage with no superblock at
// all is ErrUnformatted: a wiped or never formatted replica never starts as if new.

// Sentinel errors of the storage format. Each has one meaning.
var (
	// ErrStorageCorrupt: the superblock names a snapshot or a log entry that the storage does not hold.
	ErrStorageCorrupt = errors.New("vsr: storage corrupt")
	// ErrRecord: a record does not decode (torn, wrong magic, bad checksum); for a log, where the tail is cut.
	ErrRecord = errors.New("vsr: bad record")
	// ErrUnformatted: no superblock copy decodes: the storage was never formatted, or it was lost.
	ErrUnformatted = errors.New("vsr: storage not formatted")
	// ErrIdentity: the storage was formatted for another replica than the one opening it.
	ErrIdentity = errors.New("vsr: storage formatted for another replica")
)

const (
	superblockMagic = 0x42535256 // "VRSB"
	logRecordMagic  = 0x4c525356 // "VSRL"
	snapshotMagic   = 0x53535256 // "VRSS"
	checkpointMagic = 0x50435356 // "VSCP"

	// SuperblockSize is the size of a superblock, the start of every copy (inline records follow it).
	SuperblockSize = 96
	// SuperblockCopies is how many copies of each superblock the driver keeps, each in its own sector.
	SuperblockCopies = 4
	// SuperblockAreas is how many areas of SuperblockCopies copies the driver keeps: a persist writes
	// one, and the other keeps the superblock before it.
	SuperblockAreas = 2
	// SuperblockSlots is the number of copy slots: SuperblockAreas areas of SuperblockCopies, area a's
	// copy c at slot a*SuperblockCopies+c.
	SuperblockSlots = SuperblockAreas * SuperblockCopies
	// CopySlotSize is the room each copy has in the drivers' layout (engine's header area, the
	// simulator's disk), so that one copy never shares a page with another.
	CopySlotSize = 8192
	// InlineMax is the most record bytes a copy carries inline; a persist with more writes its records
	// and syncs them before its copies, which then carry none.
	InlineMax = CopySlotSize - SuperblockSize
	// FormatSequence is the sequence of the superblock the format step writes.
	FormatSequence = 1

	superblockVersion  = 3
	superblockRecovers = 1 << 0 // flags: the replica is recovering
	// LogRecordHeaderSize is the bytes a log record adds before its entry.
	LogRecordHeaderSize = 8
)

// Superblock is the replica's durable protocol state and its identity.
type Superblock struct {
	Sequence         uint64 // grows by one per write; FormatSequence for the format step's
	View             uint32
	LogView          uint32 // the view whose log the replica holds
	Op               uint64 // head of the log
	Head             uint64 // checksum of the entry at Op (the snapshot's head when Op is SnapshotOp)
	Commit           uint64
	SnapshotOp       uint64 // op of the checkpoint in force; 0 for none
	SnapshotChecksum uint64 // checksum of that snapshot record's payload

	Identity
	// Recovering: the replica has not yet learnt the group's state since it lost its own (formatted to
	// replace a lost replica, or restarted unable to prove its latest superblock). It stays set until
	// recovery completes, across restarts.
	Recovering bool
}

// Identity is what the format step records: the cluster, the node and the replica index this storage
// belongs to. engine checks Cluster and Node; New checks Replica against Config.Self.
type Identity struct {
	Cluster uint64
	Node    uint16
	Replica uint8
}

// FormatSuperblock is the superblock the format step writes to every copy. A member of a cluster being
// created starts from it fresh; with recovering set (a replica that replaces a lost one in a running
// group), it starts in recovery and acts on nothing before a quorum told it the group's state.
//
// For a simulator: a replica whose disk is wiped at a restart comes back from storage holding only
// FormatSuperblock(id, true) in every copy (Recover then says Recovering; give New a random
// RecoveryNonce). Formatting it with recovering false instead is the operator's mistake that the
// broken variant "a wiped replica that votes without recovering" stands for.
func FormatSuperblock(id Identity, recovering bool) Superblock {
	return Superblock{Sequence: FormatSequence, Identity: id, Recovering: recovering}
}

// AreaOf is the area a superblock of this sequence is written to: persists alternate between the two.
func AreaOf(sequence uint64) int { return int(sequence % SuperblockAreas) }

// AppendSuperblock appends sb as a copy without inline records (SuperblockSize bytes).
func AppendSuperblock(dst []byte, sb Superblock) []byte { return AppendSuperblockCopy(dst, sb, nil) }

// AppendSuperblockCopy appends one copy: sb, then inline (log records as AppendLogRecord makes them,
// the persist's own), with inline's size and checksum inside the superblock's checksummed bytes.
func AppendSuperblockCopy(dst []byte, sb Superblock, inline []byte) []byte {
	start := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, superblockMagic)
	dst = binary.LittleEndian.AppendUint32(dst, superblockVersion)
	dst = binary.LittleEndian.AppendUint64(dst, sb.Sequence)
	dst = binary.LittleEndian.AppendUint32(dst, sb.View)
	dst = binary.LittleEndian.AppendUint32(dst, sb.LogView)
	dst = binary.LittleEndian.AppendUint64(dst, sb.Op)
	dst = binary.LittleEndian.AppendUint64(dst, sb.Head)
	dst = binary.LittleEndian.AppendUint64(dst, sb.Commit)
	dst = binary.LittleEndian.AppendUint64(dst, sb.SnapshotOp)
	dst = binary.LittleEndian.AppendUint64(dst, sb.SnapshotChecksum)
	dst = binary.LittleEndian.AppendUint64(dst, sb.Cluster)
	dst = binary.LittleEndian.AppendUint16(dst, sb.Node)
	flags := byte(0)
	if sb.Recovering {
		flags |= superblockRecovers
	}
	dst = append(dst, sb.Replica, flags)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(inline)))
	sum := uint64(0)
	if len(inline) > 0 {
		sum = xxhash.Sum64(inline)
	}
	dst = binary.LittleEndian.AppendUint64(dst, sum)
	dst = binary.LittleEndian.AppendUint64(dst, xxhash.Sum64(dst[start:]))
	return append(dst, inline...)
}

// DecodeSuperblock decodes the superblock at the start of a copy (not its inline records).
func DecodeSuperblock(b []byte) (Superblock, error) {
	sb, _, err := decodeSuperblock(b)
	return sb, err
}

// DecodeSuperblockCopy decodes a whole copy: the superblock and its inline records (aliasing b), each
// checked against its checksum. A copy whose inline records are torn does not decode.
func DecodeSuperblockCopy(b []byte) (Superblock, []byte, error) {
	sb, size, err := decodeSuperblock(b)
	if err != nil {
		return Superblock{}, nil, err
	}
	if uint64(size) > uint64(len(b)-SuperblockSize) {
		return Superblock{}, nil, fmt.Errorf("%w: superblock copy holds %d of %d inline bytes", ErrRecord,
			len(b)-SuperblockSize, size)
	}
	inline := b[SuperblockSize : SuperblockSize+int(size)]
	if size > 0 && xxhash.Sum64(inline) != binary.LittleEndian.Uint64(b[80:]) {
		return Superblock{}, nil, fmt.Errorf("%w: superblock copy inline checksum", ErrRecord)
	}
	return sb, inline, nil
}

// decodeSuperblock decodes and checks the superblock's bytes and returns its inline size.
func decodeSuperblock(b []byte) (Superblock, uint32, error) {
	if len(b) < SuperblockSize {
		return Superblock{}, 0, fmt.Errorf("%w: superblock of %d bytes", ErrRecord, len(b))
	}
	b = b[:SuperblockSize]
	if binary.LittleEndian.Uint32(b) != superblockMagic || binary.LittleEndian.Uint32(b[4:]) != superblockVersion {
		return Superblock{}, 0, fmt.Errorf("%w: superblock magic", ErrRecord)
	}
	if xxhash.Sum64(b[:SuperblockSize-8]) != binary.LittleEndian.Uint64(b[SuperblockSize-8:]) {
		return Superblock{}, 0, fmt.Errorf("%w: superblock checksum", ErrRecord)
	}
	sb := Superblock{
		Sequence: binary.LittleEndian.Uint64(b[8:]), View: binary.LittleEndian.Uint32(b[16:]),
		LogView: binary.LittleEndian.Uint32(b[20:]), Op: binary.LittleEndian.Uint64(b[24:]),
		Head: binary.LittleEndian.Uint64(b[32:]), Commit: binary.LittleEndian.Uint64(b[40:]),
		SnapshotOp: binary.LittleEndian.Uint64(b[48:]), SnapshotChecksum: binary.LittleEndian.Uint64(b[56:]),
		Identity: Identity{Cluster: binary.LittleEndian.Uint64(b[64:]), Node: binary.LittleEndian.Uint16(b[72:]),
			Replica: b[74]},
		Recovering: b[75]&superblockRecovers != 0,
	}
	if sb.LogView > sb.View || sb.Commit > sb.Op || sb.SnapshotOp > sb.Commit || sb.Sequence < FormatSequence {
		return Superblock{}, 0, fmt.Errorf("%w: superblock fields out of order", ErrRecord)
	}
	if b[75]&^superblockRecovers != 0 {
		return Superblock{}, 0, fmt.Errorf("%w: superblock flags", ErrRecord)
	}
	size := binary.LittleEndian.Uint32(b[76:])
	if size == 0 && binary.LittleEndian.Uint64(b[80:]) != 0 {
		return Superblock{}, 0, fmt.Errorf("%w: superblock inline checksum without records", ErrRecord)
	}
	return sb, size, nil
}

// newestCopy returns the copy with the highest sequence that decodes whole, its slot, and whether any
// copy decoded.
func newestCopy(copies [SuperblockSlots][]byte) (sb Superblock, inline []byte, slot int, any bool) {
	for i, b := range copies {
		s, in, err := DecodeSuperblockCopy(b)
		if err != nil || any && s.Sequence <= sb.Sequence {
			continue
		}
		sb, inline, slot, any = s, in, i, true
	}
	return sb, inline, slot, any
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
// from the checkpoint up to its head.
type Durable struct {
	// Fresh: the superblock in force is the format step's; the replica never persisted anything.
	Fresh bool
	// Recovering: the replica must learn the group's state before it acts (the format step said so, an
	// earlier recovery did not finish, or the storage cannot prove its latest state). Superblock is then
	// the best copy found, kept for its identity; Snapshot and Entries are empty.
	Recovering bool
	// Cause says why the storage could not prove its state, when that is why Recovering is set.
	Cause error
	// RecoveryNonce is the driver's, not Recover's: a number the driver draws at random for each start in
	// recovery, which tells this recovery's answers from those of an earlier one. New refuses 0 when
	// Recovering is set.
	RecoveryNonce uint64

	Superblock Superblock
	Snapshot   []byte          // checkpoint payload; nil when Superblock.SnapshotOp is 0
	SnapSlot   int             // slot the snapshot came from; the next checkpoint goes to the other
	Entries    []wire.VSREntry // ops SnapshotOp+1 .. Op, bodies aliasing the log bytes or the copy's

	// InForce is the copy Recover took (the superblock and its inline records, aliasing the copies):
	// the driver writes it to every copy of its area (AreaOf(Superblock.Sequence)) that differs before
	// the replica acts, so that one more torn or bad copy still leaves it whole. Nil with Cause set.
	InForce []byte
	// Unlogged is the log records of the chain in force that only the copy carries (a power loss kept
	// the copy and lost the log's append), in op order: the driver appends them to the log at its valid
	// prefix and syncs before the replica acts, since the next persist overwrites the other area and
	// this one after it.
	Unlogged []byte
}

// Recover reads a replica's storage: the superblock copies, the two snapshot slots and the whole log.
// It returns the durable state and the length of the log's valid prefix: the caller cuts the log file
// there before appending (a torn tail). Empty slots are nil or zero-length.
//
// The superblock in force is the newest copy that decodes whole (see the format's notes above).
// Storage where no copy decodes is ErrUnformatted. When the superblock in force names a snapshot or log
// entries that neither the storage nor its copy holds, the replica cannot prove its latest state:
// Recover returns Recovering with the Cause, and no error, so that the replica rejoins through the group
// instead of resuming from an older state. Bytes from a disk are input: Recover returns errors and never
// panics.
func Recover(copies [SuperblockSlots][]byte, snapshots [2][]byte, log []byte) (Durable, int, error) {
	valid, byChecksum := scanLog(log)
	sb, inline, slot, any := newestCopy(copies)
	var inForce []byte
	if any {
		inForce = copies[slot][:SuperblockSize+len(inline)]
	}
	switch {
	case !any:
		return Durable{}, 0, fmt.Errorf("%w: no superblock copy decodes", ErrUnformatted)
	case sb.Recovering:
		return Durable{Recovering: true, Superblock: sb, InForce: inForce}, valid, nil
	case sb.Sequence == FormatSequence:
		return Durable{Fresh: true, Superblock: sb, InForce: inForce}, valid, nil
	}
	inlined, err := indexInline(inline, byChecksum)
	if err == nil {
		var d Durable
		if d, err = recoverState(sb, snapshots, byChecksum); err == nil {
			d.InForce = inForce
			d.Unlogged = unlogged(inline, inlined, d.Entries)
			return d, valid, nil
		}
	}
	return Durable{Recovering: true, Superblock: sb, Cause: err}, valid, nil
}

// indexInline adds the copy's inline records that the log does not hold to byChecksum and returns
// their checksums.
func indexInline(inline []byte, byChecksum map[uint64]wire.VSREntry) ([]uint64, error) {
	var added []uint64
	for off := 0; off < len(inline); {
		e, n, err := DecodeLogRecord(inline[off:])
		if err != nil {
			return nil, fmt.Errorf("%w: inline record at %d: %w", ErrStorageCorrupt, off, err)
		}
		if _, ok := byChecksum[e.Checksum]; !ok {
			byChecksum[e.Checksum] = e
			added = append(added, e.Checksum)
		}
		off += n
	}
	return added, nil
}

// unlogged returns the inline records (in their order) that the log lacked and the chain uses.
func unlogged(inline []byte, inlined []uint64, chain []wire.VSREntry) []byte {
	if len(inlined) == 0 {
		return nil
	}
	var out []byte
	for off := 0; off < len(inline); {
		e, n, _ := DecodeLogRecord(inline[off:]) // decoded once already
		for _, c := range inlined {
			if c != e.Checksum {
				continue
			}
			for i := range chain {
				if chain[i].Checksum == c {
					out = append(out, inline[off:off+n]...)
					break
				}
			}
		}
		off += n
	}
	return out
}

// recoverState loads the checkpoint and the log chain sb names.
func recoverState(sb Superblock, snapshots [2][]byte, byChecksum map[uint64]wire.VSREntry) (Durable, error) {
	d := Durable{Superblock: sb}
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
			return Durable{}, fmt.Errorf("%w: no snapshot slot holds checkpoint op %d", ErrStorageCorrupt, sb.SnapshotOp)
		}
		cp, err := decodeCheckpointHead(d.Snapshot)
		if err != nil || cp.op != sb.SnapshotOp {
			return Durable{}, fmt.Errorf("%w: checkpoint op %d does not decode", ErrStorageCorrupt, sb.SnapshotOp)
		}
		root = cp.head
	}
	entries, err := walkChain(byChecksum, sb, root)
	if err != nil {
		return Durable{}, err
	}
	d.Entries = entries
	return d, nil
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
