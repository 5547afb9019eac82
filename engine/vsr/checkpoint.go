package vsr

import (
	"encoding/binary"
	"fmt"
)

// A checkpoint is the replicated state at one committed op: the op, the checksum of its entry (the
// root of the log chain above it), the client table and the state machine's snapshot. Its payload is
// what a snapshot slot and a snapshot message carry:
//
//	magic u32 | version u32 | op u64 | head u64 | session count u32 | reserved u32 |
//	sessions: client u64 | request u64 | op u64 | result size u32 | result |
//	state size u32 | state

type checkpoint struct {
	op       uint64
	head     uint64
	sessions []session
	state    []byte // aliases the payload
}

// appendCheckpoint appends the payload of a checkpoint at op with head, the table and sm's state.
func appendCheckpoint(dst []byte, op, head uint64, t *clientTable, sm StateMachine) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, checkpointMagic)
	dst = binary.LittleEndian.AppendUint32(dst, 1)
	dst = binary.LittleEndian.AppendUint64(dst, op)
	dst = binary.LittleEndian.AppendUint64(dst, head)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(t.sessions)))
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	for i := range t.sessions {
		s := &t.sessions[i]
		dst = binary.LittleEndian.AppendUint64(dst, s.client)
		dst = binary.LittleEndian.AppendUint64(dst, s.request)
		dst = binary.LittleEndian.AppendUint64(dst, s.op)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s.result)))
		dst = append(dst, s.result...)
	}
	sizeAt := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	dst = sm.AppendSnapshot(dst)
	binary.LittleEndian.PutUint32(dst[sizeAt:], uint32(len(dst)-sizeAt-4))
	return dst
}

const checkpointHeadSize = 32

// decodeCheckpointHead decodes only op and head.
func decodeCheckpointHead(b []byte) (checkpoint, error) {
	if len(b) < checkpointHeadSize || binary.LittleEndian.Uint32(b) != checkpointMagic ||
		binary.LittleEndian.Uint32(b[4:]) != 1 {
		return checkpoint{}, fmt.Errorf("%w: checkpoint header", ErrRecord)
	}
	return checkpoint{op: binary.LittleEndian.Uint64(b[8:]), head: binary.LittleEndian.Uint64(b[16:])}, nil
}

// decodeCheckpoint decodes a whole payload. Session results are copied; state aliases b.
func decodeCheckpoint(b []byte) (checkpoint, error) {
	cp, err := decodeCheckpointHead(b)
	if err != nil {
		return checkpoint{}, err
	}
	count := uint64(binary.LittleEndian.Uint32(b[24:]))
	rest := b[checkpointHeadSize:]
	if count > uint64(len(rest))/28 {
		return checkpoint{}, fmt.Errorf("%w: checkpoint session count", ErrRecord)
	}
	cp.sessions = make([]session, 0, count)
	for i := uint64(0); i < count; i++ {
		if len(rest) < 28 {
			return checkpoint{}, fmt.Errorf("%w: checkpoint session", ErrRecord)
		}
		s := session{client: binary.LittleEndian.Uint64(rest), request: binary.LittleEndian.Uint64(rest[8:]),
			op: binary.LittleEndian.Uint64(rest[16:])}
		size := uint64(binary.LittleEndian.Uint32(rest[24:]))
		rest = rest[28:]
		if size > uint64(len(rest)) {
			return checkpoint{}, fmt.Errorf("%w: checkpoint session result", ErrRecord)
		}
		s.result = append([]byte(nil), rest[:size]...)
		rest = rest[size:]
		if i > 0 && s.client <= cp.sessions[i-1].client {
			return checkpoint{}, fmt.Errorf("%w: checkpoint sessions out of order", ErrRecord)
		}
		cp.sessions = append(cp.sessions, s)
	}
	if len(rest) < 4 {
		return checkpoint{}, fmt.Errorf("%w: checkpoint state size", ErrRecord)
	}
	size := uint64(binary.LittleEndian.Uint32(rest))
	if size != uint64(len(rest))-4 {
		return checkpoint{}, fmt.Errorf("%w: checkpoint state size", ErrRecord)
	}
	cp.state = rest[4:]
	return cp, nil
}
