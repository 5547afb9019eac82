package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"
)

// The log epochs file "epochs", version 1: an 8-byte file header (magic "RSE1" u32, version u32)
// then 32-byte entries, little endian:
//
//	epoch u64 | record start u64 | cursor start u64 | xxhash64 of the 24 bytes before it and the
//	entry's index (so an entry copied to another slot fails) u64
//
// One entry per role change. Appends are written and fdatasynced synchronously (a rare path), the
// file opened for each and closed after. A
// torn last entry is cut on open; a bad entry before the last is corruption.
const (
	epochsName       = "epochs"
	epochsMagic      = 0x31455352 // "RSE1"
	epochsVersion    = 1
	epochsHeaderSize = 8
	epochEntrySize   = 32
)

// EpochEntry says the copy followed epoch from the given record and cursor offsets on.
type EpochEntry struct {
	Epoch       uint64
	RecordStart uint64
	CursorStart uint64
}

// epochLog is the copy's append-only log epochs. No descriptor stays open: each append, cut or
// rewrite opens the file by path and closes it.
type epochLog struct {
	sr      *syncRing
	dir     string // the copy directory
	path    string
	entries []EpochEntry
}

func encodeEpochEntry(b []byte, i int, e EpochEntry) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], e.Epoch)
	le.PutUint64(b[8:], e.RecordStart)
	le.PutUint64(b[16:], e.CursorStart)
	le.PutUint64(b[24:], 0)
	le.PutUint64(b[24:], epochEntrySum(b[:24], i))
}

func epochEntrySum(b []byte, i int) uint64 {
	var buf [32]byte
	copy(buf[:], b[:24])
	binary.LittleEndian.PutUint64(buf[24:], uint64(i))
	return xxhash.Sum64(buf[:])
}

// decodeEpochs decodes an epochs file. It returns the valid entries and the byte length they take;
// valid < len(b) means a torn tail. A bad entry that is not the last is ErrCorrupt. Never panics.
func decodeEpochs(b []byte) ([]EpochEntry, int, error) {
	if len(b) < epochsHeaderSize {
		return nil, 0, nil
	}
	le := binary.LittleEndian
	if le.Uint32(b[0:]) != epochsMagic || le.Uint32(b[4:]) != epochsVersion {
		return nil, 0, fmt.Errorf("%w: epochs header", ErrCorrupt)
	}
	var out []EpochEntry
	pos := epochsHeaderSize
	for i := 0; pos+epochEntrySize <= len(b); i++ {
		e := b[pos : pos+epochEntrySize]
		if le.Uint64(e[24:]) != epochEntrySum(e, i) {
			if pos+epochEntrySize < len(b) {
				return nil, 0, fmt.Errorf("%w: epochs entry %d checksum", ErrCorrupt, i)
			}
			break
		}
		ent := EpochEntry{Epoch: le.Uint64(e[0:]), RecordStart: le.Uint64(e[8:]), CursorStart: le.Uint64(e[16:])}
		if n := len(out); n > 0 && !epochFollows(out[n-1], ent) {
			return nil, 0, fmt.Errorf("%w: epochs entry %d out of order", ErrCorrupt, i)
		}
		out = append(out, ent)
		pos += epochEntrySize
	}
	return out, pos, nil
}

// epochFollows says whether next may follow prev: a higher epoch, starts that do not go back.
func epochFollows(prev, next EpochEntry) bool {
	return next.Epoch > prev.Epoch && next.RecordStart >= prev.RecordStart && next.CursorStart >= prev.CursorStart
}

// openEpochs opens (or creates) the epochs file in dir, cuts a torn last entry and closes it. A
// file it creates sets *created: the caller fsyncs dir before the copy is used.
func openEpochs(sr *syncRing, dir string, logger *slog.Logger, created *bool) (*epochLog, error) {
	el := &epochLog{sr: sr, dir: dir, path: filepath.Join(dir, epochsName)}
	fd, err := sr.openat(unix.AT_FDCWD, el.path, unix.O_RDWR, 0)
	if errors.Is(err, unix.ENOENT) {
		if fd, err = sr.openat(unix.AT_FDCWD, el.path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o644); err == nil {
			*created = true
		}
	}
	if err != nil {
		return nil, fmt.Errorf("segment: open %s: %w", epochsName, err)
	}
	err = el.load(fd, logger)
	if cerr := sr.close(fd); err == nil && cerr != nil {
		err = fmt.Errorf("segment: close %s: %w", epochsName, cerr)
	}
	if err != nil {
		return nil, err
	}
	return el, nil
}

// load reads the open epochs file fd, cutting a torn last entry and writing a missing header.
func (el *epochLog) load(fd int, logger *slog.Logger) error {
	sr := el.sr
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("segment: fstat %s: %w", epochsName, err)
	}
	b := make([]byte, st.Size)
	if _, err := sr.readAt(fd, b, 0); err != nil {
		return fmt.Errorf("segment: read %s: %w", epochsName, err)
	}
	var entries []EpochEntry
	valid := 0
	if st.Size > epochsHeaderSize {
		// A file no longer than its header holds no entry: its header is rewritten below,
		// whatever a crash during its creation left in it. Entries are appended only after the
		// header is durable, so past it a bad header is corruption.
		var err error
		if entries, valid, err = decodeEpochs(b); err != nil {
			return err
		}
	}
	if st.Size > int64(max(valid, epochsHeaderSize)) {
		logger.Warn("segment: cut torn log epochs entry on open", "bytes_cut", st.Size-int64(valid), "entries", len(entries))
	}
	if valid < epochsHeaderSize {
		var hdr [epochsHeaderSize]byte
		binary.LittleEndian.PutUint32(hdr[0:], epochsMagic)
		binary.LittleEndian.PutUint32(hdr[4:], epochsVersion)
		if err := sr.writeAt(fd, hdr[:], 0); err != nil {
			return fmt.Errorf("segment: write %s: %w", epochsName, err)
		}
		valid = epochsHeaderSize
	}
	if int64(valid) != st.Size || st.Size < epochsHeaderSize {
		if err := sr.ftruncate(fd, int64(valid)); err != nil {
			return fmt.Errorf("segment: truncate %s: %w", epochsName, err)
		}
		if err := sr.fsync(fd, false); err != nil {
			return fmt.Errorf("segment: fsync %s: %w", epochsName, err)
		}
	}
	el.entries = entries
	return nil
}

// follows says whether e may be appended (ErrEpochOrder otherwise).
func (el *epochLog) follows(e EpochEntry) error {
	if n := len(el.entries); n > 0 && !epochFollows(el.entries[n-1], e) {
		return fmt.Errorf("%w: epoch %d from %d/%d after epoch %d from %d/%d", ErrEpochOrder, e.Epoch,
			e.RecordStart, e.CursorStart, el.entries[n-1].Epoch, el.entries[n-1].RecordStart, el.entries[n-1].CursorStart)
	}
	return nil
}

// append writes and fdatasyncs one entry. It must follow the last one (ErrEpochOrder).
func (el *epochLog) append(e EpochEntry) error {
	if err := el.follows(e); err != nil {
		return err
	}
	var b [epochEntrySize]byte
	i := len(el.entries)
	encodeEpochEntry(b[:], i, e)
	if err := el.update(func(fd int) error {
		if err := el.sr.writeAt(fd, b[:], int64(epochsHeaderSize+i*epochEntrySize)); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		return el.sr.fsync(fd, true)
	}); err != nil {
		return err
	}
	el.entries = append(el.entries, e)
	return nil
}

// update opens the epochs file, runs f on it and closes it.
func (el *epochLog) update(f func(fd int) error) error {
	fd, err := el.sr.openat(unix.AT_FDCWD, el.path, unix.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("segment: open %s: %w", epochsName, err)
	}
	err = f(fd)
	if cerr := el.sr.close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("segment: %s: %w", epochsName, err)
	}
	return nil
}

// cut brings the log epochs onto logs cut at recordOff and cursorOff. An entry whose record start
// lies past recordOff goes: the cut record log holds nothing of its epoch. An entry whose record
// start is at or below it stays, even when its cursor start lies past cursorOff (a cut on the
// cursor side only), with its cursor start clamped to cursorOff: the copy still follows that
// epoch's history, and dropping the entry would make an older epoch its own, whose lower history
// starts the next cut would then take. Entries starting exactly at the cut stay unchanged.
//
// Dropping entries truncates the file; clamping rewrites it whole (write a temporary file, fsync,
// rename over it, fsync the directory), since a torn rewrite in place could leave a bad entry
// before the last one, which open takes for corruption.
func (el *epochLog) cut(recordOff, cursorOff uint64) error {
	k := len(el.entries)
	for k > 0 && el.entries[k-1].RecordStart > recordOff {
		k--
	}
	clamp := k // entries[clamp:k] have their cursor start past cursorOff (cursor starts never go down)
	for clamp > 0 && el.entries[clamp-1].CursorStart > cursorOff {
		clamp--
	}
	switch {
	case clamp < k:
		kept := append([]EpochEntry(nil), el.entries[:k]...)
		for i := clamp; i < k; i++ {
			kept[i].CursorStart = cursorOff
		}
		return el.replace(kept)
	case k == len(el.entries):
		return nil
	}
	if err := el.update(func(fd int) error {
		if err := el.sr.ftruncate(fd, int64(epochsHeaderSize+k*epochEntrySize)); err != nil {
			return fmt.Errorf("truncate: %w", err)
		}
		return el.sr.fsync(fd, false)
	}); err != nil {
		return err
	}
	el.entries = el.entries[:k]
	return nil
}

// replace writes entries as the whole epochs file atomically.
func (el *epochLog) replace(entries []EpochEntry) error {
	b := make([]byte, epochsHeaderSize+len(entries)*epochEntrySize)
	binary.LittleEndian.PutUint32(b[0:], epochsMagic)
	binary.LittleEndian.PutUint32(b[4:], epochsVersion)
	for i, e := range entries {
		encodeEpochEntry(b[epochsHeaderSize+i*epochEntrySize:], i, e)
	}
	if err := el.sr.renameInto(el.dir, epochsName, b); err != nil {
		return fmt.Errorf("segment: rewrite %s: %w", epochsName, err)
	}
	// The name now holds the new file: later appends go there, whatever the directory fsync says.
	el.entries = entries
	return el.sr.fsyncDir(el.dir)
}

// last is the newest entry: the last epoch this copy followed.
func (el *epochLog) last() (EpochEntry, bool) {
	if len(el.entries) == 0 {
		return EpochEntry{}, false
	}
	return el.entries[len(el.entries)-1], true
}

// at is the entry of the epoch that record offset off was written in: the last entry whose record
// start is at or below off.
func (el *epochLog) at(off uint64) (EpochEntry, bool) {
	for i := len(el.entries) - 1; i >= 0; i-- {
		if el.entries[i].RecordStart <= off {
			return el.entries[i], true
		}
	}
	return EpochEntry{}, false
}
