package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"
)

// The seal state file "fence", version 1: two 32-byte slots, little endian:
//
//	magic "RSF1" u32 | version u32 | generation u64 | fence epoch u64 | xxhash64 of the 24 bytes before it u64
//
// A write goes to the slot of the next generation (generation mod 2) and is fdatasynced, so the
// other slot keeps the previous value whole: a torn write loses at most the write in progress, and
// the file is replaced atomically without a rename. Open takes the
// valid slot with the higher generation.
const (
	fenceName     = "fence"
	fenceMagic    = 0x31465352 // "RSF1"
	fenceVersion  = 1
	fenceSlotSize = 32
)

// fenceFile is the copy's persisted fence epoch. Its file is open only while a seal writes it.
type fenceFile struct {
	path  string
	gen   uint64
	epoch uint64
	slot  [fenceSlotSize]byte // the slot being written; stays alive until its completion
}

func encodeFenceSlot(b []byte, gen, epoch uint64) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], fenceMagic)
	le.PutUint32(b[4:], fenceVersion)
	le.PutUint64(b[8:], gen)
	le.PutUint64(b[16:], epoch)
	le.PutUint64(b[24:], xxhash.Sum64(b[:24]))
}

// decodeFence returns the newest valid slot's generation and epoch (0, 0 when none is valid).
// Never panics.
func decodeFence(b []byte) (gen, epoch uint64) {
	le := binary.LittleEndian
	for off := 0; off+fenceSlotSize <= len(b) && off < 2*fenceSlotSize; off += fenceSlotSize {
		s := b[off : off+fenceSlotSize]
		if le.Uint32(s[0:]) != fenceMagic || le.Uint32(s[4:]) != fenceVersion || le.Uint64(s[24:]) != xxhash.Sum64(s[:24]) {
			continue
		}
		if g := le.Uint64(s[8:]); g > gen {
			gen, epoch = g, le.Uint64(s[16:])
		}
	}
	return gen, epoch
}

// openFence opens or creates the fence file in dir, reads the fence epoch and closes it. A file it
// creates sets *created: the caller fsyncs dir before the copy is used, so a fence written later
// cannot vanish with its directory entry.
func openFence(sr *syncRing, dir string, created *bool) (*fenceFile, error) {
	f := &fenceFile{path: filepath.Join(dir, fenceName)}
	fd, err := sr.openat(unix.AT_FDCWD, f.path, unix.O_RDONLY, 0)
	if errors.Is(err, unix.ENOENT) {
		if fd, err = sr.openat(unix.AT_FDCWD, f.path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o644); err == nil {
			*created = true
		}
	}
	if err != nil {
		return nil, fmt.Errorf("segment: open %s: %w", fenceName, err)
	}
	var b [2 * fenceSlotSize]byte
	n, err := sr.readAt(fd, b[:], 0)
	cerr := sr.close(fd)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("segment: read %s: %w", fenceName, err)
	}
	if cerr != nil {
		return nil, fmt.Errorf("segment: close %s: %w", fenceName, cerr)
	}
	f.gen, f.epoch = decodeFence(b[:n])
	return f, nil
}

// prepare sets the in-memory fence to epoch and fills the slot to write; the caller writes
// f.slot at slotPos and fdatasyncs.
func (f *fenceFile) prepare(epoch uint64) {
	f.gen++
	f.epoch = epoch
	encodeFenceSlot(f.slot[:], f.gen, epoch)
}

// slotPos is the position of the slot prepare filled.
func (f *fenceFile) slotPos() int64 { return int64(f.gen%2) * fenceSlotSize }
