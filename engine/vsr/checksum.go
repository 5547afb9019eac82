package vsr

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
	"github.com/ringstream/ringstream/wire"
)

// entryChecksum is the checksum an entry carries: xxhash64 over its parent, op, view, client, request
// and body. Covering the parent makes the log a hash chain: equal checksums at one op mean equal logs
// up to that op.
func entryChecksum(e *wire.VSREntry) uint64 {
	var head [40]byte
	binary.LittleEndian.PutUint64(head[0:], e.Parent)
	binary.LittleEndian.PutUint64(head[8:], e.Op)
	binary.LittleEndian.PutUint64(head[16:], uint64(e.View))
	binary.LittleEndian.PutUint64(head[24:], e.Client)
	binary.LittleEndian.PutUint64(head[32:], e.Request)
	var d xxhash.Digest
	d.Reset()
	_, _ = d.Write(head[:])
	_, _ = d.Write(e.Body)
	return d.Sum64()
}

// validChain reports whether entries are a well-formed chain: consecutive ops from base+1, each
// checksum right, each parent the checksum before it, the first one's parent baseHead (skipped when
// baseHead is unknown, that is when checkBase is false).
func validChain(base, baseHead uint64, checkBase bool, entries []wire.VSREntry) bool {
	parent := baseHead
	for i := range entries {
		e := &entries[i]
		if e.Op != base+1+uint64(i) || entryChecksum(e) != e.Checksum {
			return false
		}
		if (i > 0 || checkBase) && e.Parent != parent {
			return false
		}
		parent = e.Checksum
	}
	return true
}

// EntryChecksum is the checksum an entry must carry (for drivers' and tools' tests that build a log
// by hand).
func EntryChecksum(e *wire.VSREntry) uint64 { return entryChecksum(e) }
