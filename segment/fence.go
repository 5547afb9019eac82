package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

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

// fenceFile is the copy's persisted fence epoch.
type fenceFile struct {
	fd    int
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

// openFence opens or creates the fence file and reads the fence epoch. A file it creates is made
// durable with a directory fsync, so a fence written later cannot vanish with its directory entry.
func openFence(sr *syncRing, dirfd int) (*fenceFile, error) {
	fd, err := sr.openat(dirfd, fenceName, unix.O_RDWR, 0)
	if errors.Is(err, unix.ENOENT) {
		fd, err = sr.openat(dirfd, fenceName, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o644)
		if err == nil {
			if err = sr.fsync(dirfd, false); err != nil {
				_ = sr.close(fd)
				return nil, fmt.Errorf("segment: fsync dir after creating %s: %w", fenceName, err)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("segment: open %s: %w", fenceName, err)
	}
	var b [2 * fenceSlotSize]byte
	n, err := sr.readAt(fd, b[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("segment: read %s: %w", fenceName, err)
	}
	f := &fenceFile{fd: fd}
	f.gen, f.epoch = decodeFence(b[:n])
	return f, nil
}

// prepare sets the in-memory fence to epoch and fills the slot to write; the caller writes
// f.slot at the returned position and fdatasyncs.
func (f *fenceFile) prepare(epoch uint64) int64 {
	f.gen++
	f.epoch = epoch
	encodeFenceSlot(f.slot[:], f.gen, epoch)
	return int64(f.gen%2) * fenceSlotSize
}
