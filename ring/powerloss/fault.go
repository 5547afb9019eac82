package powerloss

import (
	"path/filepath"
	"strings"

	"github.com/ringstream/ringstream/ring"
	"golang.org/x/sys/unix"
)

// Fault makes one persist operation fail: the Nth operation of kind Op on a path under Path
// completes with Errno and changes nothing on disk (or in the model). Operations linked after it are
// cancelled, as after a real failure.
type Fault struct {
	// Op is ring.OpWrite (which also matches Writev and WriteFixed), ring.OpFsync (fsync and
	// fdatasync, of files and of directories), ring.OpFtruncate or ring.OpFallocate.
	Op ring.Opcode
	// Path is a prefix of the file's path relative to the Disk's root; "" matches every file.
	Path string
	// Nth picks which matching operation fails, counted as operations are queued from Inject on
	// (one cancelled later by its chain still counts): 1 (or 0) is the next one.
	Nth int
	// Errno is what the operation completes with, e.g. unix.EIO or unix.ENOSPC.
	Errno unix.Errno
}

// Inject arms f. Several faults may be armed; each fires once.
func (d *Disk) Inject(f Fault) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if f.Nth < 1 {
		f.Nth = 1
	}
	d.faults = append(d.faults, f)
}

// takeFault counts an operation of kind code on path against the armed faults and returns the errno
// of the one it fires, or 0.
func (d *Disk) takeFault(code ring.Opcode, path string) unix.Errno {
	if code == ring.OpWritev || code == ring.OpWriteFixed {
		code = ring.OpWrite
	}
	rel, err := filepath.Rel(d.root, path)
	if err != nil {
		return 0
	}
	for i := range d.faults {
		f := &d.faults[i]
		if f.Op != code || !strings.HasPrefix(rel, f.Path) {
			continue
		}
		f.Nth--
		if f.Nth == 0 {
			errno := f.Errno
			d.faults = append(d.faults[:i], d.faults[i+1:]...)
			return errno
		}
	}
	return 0
}
