package streamhost_test

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/engine/streamhost"
)

// TestCopies_EpochAboveAStreamEpochIsCorrupt: a log epoch on disk is 64 bits and a stream epoch 32. An
// epochs file whose entries pass their checksums but name an epoch above 2^32-1 (a damaged or foreign
// file) fails that copy as corrupt, waiting for the operator, instead of being cut to 32 bits into an
// order the copy and wire assert; the other copies serve.
func TestCopies_EpochAboveAStreamEpochIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	specs := []streamhost.Spec{soloSpec(11), soloSpec(12)}
	n := soloNode(t, dir)
	if _, errs := openAll(t, n, specs); len(errs) > 0 {
		t.Fatal(errs)
	}
	if r := produceOne(t, n, 12, 0); r.Kind != stream.ReplyProduce {
		t.Fatalf("produce answered %+v", r)
	}
	if err := n.node.Stop(); err != nil {
		t.Fatal(err)
	}
	appendEpochEntry(t, filepath.Join(n.host.Dir(12, 1), "epochs"), 1<<33, 1)

	n = soloNode(t, dir)
	if _, errs := openAll(t, n, nextEpoch(specs)); len(errs) != 1 {
		t.Fatalf("open errors %v, want stream 12's alone", errs)
	}
	st := n.host.Status()
	if len(st) != 1 || st[0].Stream != 12 || st[0].Cause != streamhost.CauseCorrupt || st[0].Retrying ||
		!errors.Is(st[0].Err, streamhost.ErrDamaged) {
		t.Fatalf("status %+v", st)
	}
	if r := produceOne(t, n, 11, 0); r.Kind != stream.ReplyProduce {
		t.Fatalf("stream 11: produce answered %+v", r)
	}
}

// appendEpochEntry appends one well-formed entry to a segment epochs file (version 1: an 8-byte
// header, then 32-byte entries of epoch, record start, cursor start and the xxhash64 of those 24
// bytes with the entry's index).
func appendEpochEntry(t *testing.T, path string, epoch, recordStart uint64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const header, entry = 8, 32
	if (len(b)-header)%entry != 0 {
		t.Fatalf("epochs file of %d bytes", len(b))
	}
	var e [entry]byte
	binary.LittleEndian.PutUint64(e[0:], epoch)
	binary.LittleEndian.PutUint64(e[8:], recordStart)
	binary.LittleEndian.PutUint64(e[24:], uint64((len(b)-header)/entry))
	binary.LittleEndian.PutUint64(e[24:], xxhash.Sum64(e[:]))
	if err := os.WriteFile(path, append(b, e[:]...), 0o644); err != nil {
		t.Fatal(err)
	}
}
