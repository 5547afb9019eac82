package powerloss

import (
	"path/filepath"
	"strings"

	"github.com/ringstream/ringstream/ring"
	"golang.org/x/sys/unix"
)

// Fault makes persist operations (or reads) fail: the Nth operation of kind Op on a path under Path
// completes with Errno and changes nothing on disk (or in the model). Operations linked after it are
// cancelled, as after a real failure. With Until, that one and every later match fail, until
// Disk.Clear: a disk that stays full, or broken, until someone acts.
type Fault struct {
	// Op is ring.OpWrite (which also matches Writev and WriteFixed), ring.OpFsync (fsync and
	// fdatasync, of files and of directories), ring.OpFtruncate, ring.OpFallocate or ring.OpRead
	// (which also matches ReadFixed).
	Op ring.Opcode
	// Path is a prefix of the file's path relative to the Disk's root; "" matches every file.
	Path string
	// Nth picks which matching operation fails, counted as operations are queued from Inject on
	// (one cancelled later by its chain still counts): 1 (or 0) is the next one.
	Nth int
	// Errno is what the operation completes with, e.g. unix.EIO or unix.ENOSPC.
	Errno unix.Errno
	// Until keeps the fault armed after it fired: every later matching operation fails too, until
	// Disk.Clear (a file system that has no room, or that went read-only, until an operator acts).
	Until bool
	// Short makes a write run with half of its bytes, as a real short write does (no errno: the
	// operation succeeds with fewer bytes than asked for, and the model keeps those). Errno is ignored.
	Short bool
}

// Inject arms f. Several faults may be armed; each fires once unless f.Until.
func (d *Disk) Inject(f Fault) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if f.Nth < 1 {
		f.Nth = 1
	}
	d.faults = append(d.faults, f)
}

// Clear disarms every fault, as when a full file system was given room again or a failing disk was
// replaced: operations queued from now on run normally.
func (d *Disk) Clear() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults = nil
}

// hit is what an armed fault does to one operation: fail it with errno, or run it short.
type hit struct {
	errno unix.Errno
	short bool
}

// takeFault counts an operation of kind code on path against the armed faults and returns what the
// one it fires does to it (the zero hit: nothing).
func (d *Disk) takeFault(code ring.Opcode, path string) hit {
	switch code {
	case ring.OpWritev, ring.OpWriteFixed:
		code = ring.OpWrite
	case ring.OpReadFixed:
		code = ring.OpRead
	}
	rel, err := filepath.Rel(d.root, path)
	if err != nil {
		return hit{}
	}
	for i := range d.faults {
		f := &d.faults[i]
		if f.Op != code || !strings.HasPrefix(rel, f.Path) {
			continue
		}
		if f.Nth > 1 {
			f.Nth--
			continue
		}
		h := hit{errno: f.Errno, short: f.Short}
		if h.short {
			h.errno = 0
		}
		if !f.Until {
			d.faults = append(d.faults[:i], d.faults[i+1:]...)
		}
		return h
	}
	return hit{}
}

// readFault is the fault an armed read fault gives a read of fd (0: none). The model does not follow
// reads; only a read fault makes a read look at its file.
func (w *wrapped) readFault(fd int, fl ring.Flags) unix.Errno {
	d := w.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.faults) == 0 || d.cut.Load() {
		return 0
	}
	path, _, dir, ok := d.fdTarget(w.realFd(fd, fl))
	if !ok || dir {
		return 0
	}
	return d.takeFault(ring.OpRead, path).errno
}

// faulted hands a read queued on fd -1 for an injected fault to its caller with the injected errno.
type faulted struct {
	h     ring.Handler
	errno unix.Errno
}

func (f *faulted) Complete(c ring.Completion) {
	if c.Res == -int32(unix.EBADF) {
		c.Res = -int32(f.errno)
	}
	f.h.Complete(c)
}

func (w *wrapped) Read(h ring.Handler, tag uint64, fd int, buf []byte, off int64, fl ring.Flags) error {
	if errno := w.readFault(fd, fl); errno != 0 {
		return w.Ring.Read(&faulted{h: h, errno: errno}, tag, -1, buf, off, fl&^ring.FixedFile)
	}
	return w.Ring.Read(h, tag, fd, buf, off, fl)
}

func (w *wrapped) ReadFixed(h ring.Handler, tag uint64, fd int, buf []byte, bufIndex uint16, off int64, fl ring.Flags) error {
	if errno := w.readFault(fd, fl); errno != 0 {
		return w.Ring.ReadFixed(&faulted{h: h, errno: errno}, tag, -1, buf, bufIndex, off, fl&^ring.FixedFile)
	}
	return w.Ring.ReadFixed(h, tag, fd, buf, bufIndex, off, fl)
}

// shortBufs is the first half of bufs' bytes (at least one byte when there are any).
func shortBufs(bufs [][]byte) [][]byte {
	total := 0
	for _, b := range bufs {
		total += len(b)
	}
	keep := max(total/2, min(total, 1))
	out := make([][]byte, 0, len(bufs))
	for _, b := range bufs {
		if keep == 0 {
			break
		}
		n := min(len(b), keep)
		out = append(out, b[:n])
		keep -= n
	}
	return out
}
