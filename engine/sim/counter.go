package sim

import (
	"encoding/binary"
	"errors"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// errCounterSnapshot: a counter snapshot does not decode.
var errCounterSnapshot = errors.New("sim: counter snapshot malformed")

// counterMachine is the simulator's own state machine: op "key += delta" returns the new value. Each
// client adds 1 to its own key per request, so request n must answer n: a request applied twice (or
// lost after its reply) shows at once.
type counterMachine struct {
	counters map[uint64]uint64
	keys     []uint64 // scratch for sorted snapshots
}

func newCounterMachine() *counterMachine { return &counterMachine{counters: make(map[uint64]uint64)} }

func counterOp(dst []byte, key, delta uint64) []byte {
	return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(dst, key), delta)
}

func (m *counterMachine) Apply(op []byte, _ uint64, result []byte) []byte {
	if len(op) != 16 {
		return append(result, 0xff)
	}
	key := binary.LittleEndian.Uint64(op)
	m.counters[key] += binary.LittleEndian.Uint64(op[8:])
	return binary.LittleEndian.AppendUint64(result, m.counters[key])
}

func (m *counterMachine) AppendSnapshot(dst []byte) []byte {
	m.keys = m.keys[:0]
	for k := range m.counters {
		m.keys = append(m.keys, k)
	}
	slices.Sort(m.keys)
	for _, k := range m.keys {
		dst = binary.LittleEndian.AppendUint64(dst, k)
		dst = binary.LittleEndian.AppendUint64(dst, m.counters[k])
	}
	return dst
}

func (m *counterMachine) Restore(b []byte) error {
	if len(b)%16 != 0 {
		return errCounterSnapshot
	}
	c := make(map[uint64]uint64, len(b)/16)
	for ; len(b) > 0; b = b[16:] {
		c[binary.LittleEndian.Uint64(b)] = binary.LittleEndian.Uint64(b[8:])
	}
	m.counters = c
	return nil
}

func (m *counterMachine) Digest() uint64 { return xxhash.Sum64(m.AppendSnapshot(nil)) }
