package meta

import (
	"encoding/binary"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// Snapshot layout, little endian:
//
//	magic "RSMETA" | version u8 | applied op u64 | next stream id u64
//	node count u32, then per node (ascending id): id u16 | status u8 | address string
//	stream count u32, then per stream (ascending id): name string | id u64 | incarnation u32 | copies u8 |
//	  policy | assignment: epoch u32 | owner u16 | followers | policy
//	  | recovery flag u8 (0 or 1), then if 1: id u64 | from epoch u32 | proposed owner u16 | members |
//	    seal threshold u8 | policy | reason u8 | status u8
//	  | starts version u64 | start count u32, then per start: epoch u32 | record u64 | cursor u64 | node u16
//	retired name count u32, then per name (ascending): name string | id u64 | incarnation u32
//	checksum u64: xxhash64 of every byte before it
//
// Strings, node lists and policies are encoded as in ops. Lists are in ascending order, so equal states
// encode to equal bytes and Digest can hash the encoding.
const (
	snapshotMagic   = "RSMETA"
	snapshotVersion = 1
	checksumBytes   = 8
)

// AppendSnapshot appends an encoding of the whole state to dst and returns the extended slice. It is
// the vsr.StateMachine method.
func (s *State) AppendSnapshot(dst []byte) []byte {
	start := len(dst)
	dst = append(dst, snapshotMagic...)
	dst = append(dst, snapshotVersion)
	dst = binary.LittleEndian.AppendUint64(dst, s.appliedOp)
	dst = binary.LittleEndian.AppendUint64(dst, s.nextStreamID)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s.nodes)))
	for _, id := range sortedKeys(s.nodes) {
		n := s.nodes[id]
		dst = binary.LittleEndian.AppendUint16(dst, n.ID)
		dst = append(dst, uint8(n.Status))
		dst = appendStr(dst, n.Address)
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s.streams)))
	for _, id := range sortedKeys(s.streams) {
		dst = s.streams[id].appendTo(dst)
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s.retired)))
	for _, name := range sortedKeys(s.retired) {
		r := s.retired[name]
		dst = appendStr(dst, name)
		dst = binary.LittleEndian.AppendUint64(dst, r.id)
		dst = binary.LittleEndian.AppendUint32(dst, r.incarnation)
	}
	return binary.LittleEndian.AppendUint64(dst, xxhash.Sum64(dst[start:]))
}

func (e *streamEntry) appendTo(dst []byte) []byte {
	st, a := e.stream, e.assignment
	dst = appendStr(dst, st.Name)
	dst = binary.LittleEndian.AppendUint64(dst, st.ID)
	dst = binary.LittleEndian.AppendUint32(dst, st.Incarnation)
	dst = append(dst, st.Copies)
	dst = appendPolicy(dst, st.Policy)
	dst = binary.LittleEndian.AppendUint32(dst, a.Epoch)
	dst = binary.LittleEndian.AppendUint16(dst, a.Owner)
	dst = appendNodes(dst, a.Followers)
	dst = appendPolicy(dst, a.Policy)
	if e.hasRecovery {
		r := e.recovery
		dst = append(dst, 1)
		dst = binary.LittleEndian.AppendUint64(dst, r.ID)
		dst = binary.LittleEndian.AppendUint32(dst, r.FromEpoch)
		dst = binary.LittleEndian.AppendUint16(dst, r.ProposedOwner)
		dst = appendNodes(dst, r.Members)
		dst = append(dst, r.SealThreshold)
		dst = appendPolicy(dst, r.Policy)
		dst = append(dst, uint8(r.Reason), uint8(r.Status))
	} else {
		dst = append(dst, 0)
	}
	dst = binary.LittleEndian.AppendUint64(dst, e.starts.Version)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(e.starts.List)))
	for _, h := range e.starts.List {
		dst = binary.LittleEndian.AppendUint32(dst, h.Epoch)
		dst = binary.LittleEndian.AppendUint64(dst, h.RecordStart)
		dst = binary.LittleEndian.AppendUint64(dst, h.CursorStart)
		dst = binary.LittleEndian.AppendUint16(dst, h.Node)
	}
	return dst
}

// Digest is xxhash64 of the snapshot encoding without its applied op number and checksum: replicas
// whose ops built equal states have equal digests, and a difference anywhere in the state changes it
// (up to hash collisions). Leaving the op number out means an op
// that is refused (which moves only the op number) leaves the digest unchanged. It is the
// vsr.StateMachine method.
func (s *State) Digest() uint64 {
	snap := s.AppendSnapshot(nil)
	appliedOpAt := len(snapshotMagic) + 1
	var h xxhash.Digest
	h.Reset()
	_, _ = h.Write(snap[:appliedOpAt])
	_, _ = h.Write(snap[appliedOpAt+8 : len(snap)-checksumBytes])
	return h.Sum64()
}

// Restore replaces the whole state with one encoded by AppendSnapshot. The bytes come from a disk or a
// peer: on bytes that fail the checksum, do not decode, or decode into a state that breaks an
// invariant, it returns an error wrapping ErrSnapshotChecksum, ErrSnapshotVersion or ErrSnapshot and
// leaves the state unchanged. It never panics and keeps no reference to snapshot.
func (s *State) Restore(snapshot []byte) error {
	if len(snapshot) < len(snapshotMagic)+1+checksumBytes {
		return fmt.Errorf("%w: %d bytes", ErrSnapshot, len(snapshot))
	}
	body := snapshot[:len(snapshot)-checksumBytes]
	sum := binary.LittleEndian.Uint64(snapshot[len(body):])
	if xxhash.Sum64(body) != sum {
		return ErrSnapshotChecksum
	}
	next, err := decodeSnapshotBody(body)
	if err != nil {
		return err
	}
	*s = *next
	return nil
}

// decodeSnapshotBody decodes a snapshot without its checksum into a new State and checks it.
func decodeSnapshotBody(body []byte) (*State, error) {
	d := decoder{buf: body}
	if string(d.take(len(snapshotMagic))) != snapshotMagic {
		return nil, fmt.Errorf("%w: no magic", ErrSnapshot)
	}
	if v := d.u8(); v != snapshotVersion {
		return nil, fmt.Errorf("%w: %d", ErrSnapshotVersion, v)
	}
	s := NewState()
	s.appliedOp = d.u64()
	s.nextStreamID = d.u64()
	if err := s.decodeNodes(&d); err != nil {
		return nil, err
	}
	if err := s.decodeStreams(&d); err != nil {
		return nil, err
	}
	if err := s.decodeRetired(&d); err != nil {
		return nil, err
	}
	if d.short {
		return nil, fmt.Errorf("%w: truncated", ErrSnapshot)
	}
	if !d.done() {
		return nil, fmt.Errorf("%w: %d bytes past the end", ErrSnapshot, len(body)-d.off)
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *State) decodeNodes(d *decoder) error {
	count := d.u32()
	var prev uint16
	for i := uint32(0); i < count && !d.short; i++ {
		n := Node{ID: d.u16(), Status: NodeStatus(d.u8()), Address: d.str()}
		if d.short {
			break
		}
		if i > 0 && n.ID <= prev {
			return fmt.Errorf("%w: node ids not ascending at %d", ErrSnapshot, n.ID)
		}
		prev = n.ID
		s.nodes[n.ID] = n
	}
	return nil
}

func (s *State) decodeStreams(d *decoder) error {
	count := d.u32()
	var prev uint64
	for i := uint32(0); i < count && !d.short; i++ {
		e := decodeStreamEntry(d)
		if d.short {
			break
		}
		id := e.stream.ID
		if i > 0 && id <= prev {
			return fmt.Errorf("%w: stream ids not ascending at %d", ErrSnapshot, id)
		}
		prev = id
		if other, dup := s.names[e.stream.Name]; dup {
			return fmt.Errorf("%w: streams %d and %d share a name", ErrSnapshot, other, id)
		}
		s.streams[id] = e
		s.names[e.stream.Name] = id
	}
	return nil
}

func decodeStreamEntry(d *decoder) *streamEntry {
	e := &streamEntry{}
	e.stream = Stream{Name: d.str(), ID: d.u64(), Incarnation: d.u32(), Copies: d.u8(), Policy: d.policy()}
	e.assignment = Assignment{Epoch: d.u32(), Owner: d.u16(), Followers: d.nodes(CopiesMax - 1), Policy: d.policy()}
	switch d.u8() {
	case 0:
	case 1:
		e.hasRecovery = true
		e.recovery = Recovery{ID: d.u64(), Stream: e.stream.ID, FromEpoch: d.u32(), ProposedOwner: d.u16(),
			Members: d.nodes(CopiesMax), SealThreshold: d.u8(), Policy: d.policy(),
			Reason: RecoveryReason(d.u8()), Status: RecoveryStatus(d.u8())}
	default:
		d.short = true
	}
	e.starts.Version = d.u64()
	count := d.u32()
	for i := uint32(0); i < count && !d.short; i++ {
		h := HistoryStart{Epoch: d.u32(), RecordStart: d.u64(), CursorStart: d.u64(), Node: d.u16()}
		if !d.short {
			e.starts.List = append(e.starts.List, h)
		}
	}
	return e
}

func (s *State) decodeRetired(d *decoder) error {
	count := d.u32()
	prev := ""
	for i := uint32(0); i < count && !d.short; i++ {
		name := d.str()
		r := retiredName{id: d.u64(), incarnation: d.u32()}
		if d.short {
			break
		}
		if i > 0 && name <= prev {
			return fmt.Errorf("%w: retired names not ascending", ErrSnapshot)
		}
		prev = name
		s.retired[name] = r
	}
	return nil
}
