package powerloss

import (
	"os"

	"github.com/ringstream/ringstream/ring"
	"golang.org/x/sys/unix"
)

// wrapped is a ring whose file operations under the Disk's root are recorded. Every operation still
// runs on the inner ring; the ones the model follows get a recording handler that updates the model
// and then hands the completion to the caller's handler.
type wrapped struct {
	ring.Ring
	d     *Disk
	files []int // registered files, for FixedFile operations
}

// op is one recorded operation: what the model needs at its completion.
type op struct {
	d        *Disk
	h        ring.Handler
	code     ring.Opcode
	seq      uint64
	ino      *inode
	fd       int    // the real fd of a write, to place one at the current position (offset -1)
	dir      string // a directory fsync: its path
	path     string // namespace operations
	path2    string
	flags    int
	existed  bool
	off      int64
	size     int64
	mode     uint32
	buf      []byte
	bufs     [][]byte
	injected unix.Errno
	short    bool // a write queued with half its bytes (Fault.Short)
}

// Complete updates the model from c, then passes c on (with an injected errno in place of the fd -1
// failure that stood for it).
func (o *op) Complete(c ring.Completion) {
	switch {
	case o.d.cut.Load():
		if o.code == ring.OpFsync && c.Res >= 0 {
			c.Res = -int32(unix.EIO) // the power is off: nothing was made durable
		}
	case o.injected != 0 && c.Res == -int32(unix.EBADF):
		c.Res = -int32(o.injected)
	case c.Res >= 0:
		o.d.mu.Lock()
		o.d.completed(o, c.Res)
		o.d.mu.Unlock()
	}
	o.h.Complete(c)
}

// completed applies a successful operation to the model.
func (d *Disk) completed(o *op, res int32) {
	switch o.code {
	case ring.OpWrite, ring.OpWriteFixed:
		d.addFileOp(o.ino, fileOp{kind: opWrite, off: d.writeOff(o, res), data: append([]byte(nil), o.buf[:res]...), queued: o.seq})
	case ring.OpWritev:
		d.addFileOp(o.ino, fileOp{kind: opWrite, off: d.writeOff(o, res), data: gather(o.bufs, int(res)), queued: o.seq})
	case ring.OpFtruncate:
		d.addFileOp(o.ino, fileOp{kind: opTruncate, size: o.size, queued: o.seq})
	case ring.OpFallocate:
		d.fallocated(o)
	case ring.OpFsync:
		if o.ino != nil {
			o.ino.sync(o.seq)
		} else {
			d.syncDir(o.dir, o.seq)
		}
	case ring.OpOpenat:
		d.opened(o, int(res))
	case ring.OpRenameAt:
		kind := nsRename
		switch {
		case o.path2 == "":
			kind = nsUnlink // renamed out of the root: gone, as far as the model can tell
		case o.flags&unix.RENAME_EXCHANGE != 0:
			kind = nsExchange
		}
		d.record(&nsChange{kind: kind, path: o.path, path2: o.path2, queued: o.seq})
	case ring.OpUnlinkAt:
		d.record(&nsChange{kind: nsUnlink, path: o.path, queued: o.seq})
	case ring.OpMkdirAt:
		d.record(&nsChange{kind: nsMkdir, path: o.path, queued: o.seq})
	}
}

func (d *Disk) addFileOp(n *inode, fo fileOp) { n.pending = append(n.pending, fo) }

// writeOff is where a completed write of res bytes landed: its offset, or for offset -1 on an
// O_APPEND file the model's end of file (completions arrive in the order they ran), or for offset -1
// elsewhere the res bytes before the fd's position when the completion is dispatched (exact while one
// such write per fd is in flight).
func (d *Disk) writeOff(o *op, res int32) int64 {
	if o.off >= 0 {
		return o.off
	}
	if fl, err := unix.FcntlInt(uintptr(o.fd), unix.F_GETFL, 0); err == nil && fl&unix.O_APPEND != 0 {
		return o.ino.size()
	}
	pos, err := unix.Seek(o.fd, 0, 1) // SEEK_CUR
	if err != nil || pos < int64(res) {
		return 0
	}
	return pos - int64(res)
}

func (d *Disk) fallocated(o *op) {
	switch {
	case o.mode&unix.FALLOC_FL_PUNCH_HOLE != 0:
		d.addFileOp(o.ino, fileOp{kind: opZero, off: o.off, size: o.size, queued: o.seq})
	case o.mode&unix.FALLOC_FL_KEEP_SIZE != 0:
	default:
		// Mode 0 grows a shorter file to off+len and changes no byte it holds.
		d.addFileOp(o.ino, fileOp{kind: opGrow, size: o.off + o.size, queued: o.seq})
	}
}

// opened follows an Openat: a new file is a namespace change of its directory; O_TRUNC of a known
// file is an unsynced truncate.
func (d *Disk) opened(o *op, fd int) {
	key, ok := statKey(fd)
	if !ok {
		return
	}
	if !o.existed && o.flags&unix.O_CREAT != 0 {
		n := d.newInode(o.path, nil)
		d.live[key] = n
		d.record(&nsChange{kind: nsCreate, path: o.path, ent: entry{ino: n}, queued: o.seq})
		return
	}
	_, n, _, ok := d.fdTarget(fd)
	if ok && n != nil && o.flags&unix.O_TRUNC != 0 && o.flags&(unix.O_WRONLY|unix.O_RDWR) != 0 {
		d.addFileOp(n, fileOp{kind: opTruncate, size: 0, queued: o.seq})
	}
}

// gather copies the first n bytes of bufs.
func gather(bufs [][]byte, n int) []byte {
	out := make([]byte, 0, n)
	for _, b := range bufs {
		if len(out)+len(b) > n {
			b = b[:n-len(out)]
		}
		out = append(out, b...)
		if len(out) == n {
			break
		}
	}
	return out
}

// realFd is the descriptor behind fd: itself, or the registered file it indexes.
func (w *wrapped) realFd(fd int, fl ring.Flags) int {
	if fl&ring.FixedFile == 0 {
		return fd
	}
	if fd < 0 || fd >= len(w.files) {
		return -1
	}
	return w.files[fd]
}

// fileOp prepares the record of an operation on fd: nil when the model does not follow fd (not a
// file or directory under root). The caller queues it, on fd -1 when rec.injected is set.
func (w *wrapped) fileOp(h ring.Handler, code ring.Opcode, fd int, fl ring.Flags) *op {
	d := w.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut.Load() {
		// The power is off: the operation still runs, but the model learns nothing from it.
		if p, _, err := fdPath(w.realFd(fd, fl)); err != nil || !d.under(p) {
			return nil
		}
		return &op{d: d, h: h, code: code}
	}
	path, n, dir, ok := d.fdTarget(w.realFd(fd, fl))
	if !ok || (dir && code != ring.OpFsync) {
		return nil
	}
	o := &op{d: d, h: h, code: code, seq: d.nextSeq(), ino: n, fd: w.realFd(fd, fl)}
	if dir {
		o.dir = path
	}
	f := d.takeFault(code, path)
	o.injected, o.short = f.errno, f.short
	return o
}

// target is the fd and flags to queue o with: fd -1 without FixedFile when a fault is injected.
func target(o *op, fd int, fl ring.Flags) (int, ring.Flags) {
	if o != nil && o.injected != 0 {
		return -1, fl &^ ring.FixedFile
	}
	return fd, fl
}

// handler is o when the model follows the operation, h otherwise.
func handler(o *op, h ring.Handler) ring.Handler {
	if o == nil {
		return h
	}
	return o
}

func (w *wrapped) Write(h ring.Handler, tag uint64, fd int, buf []byte, off int64, fl ring.Flags) error {
	o := w.fileOp(h, ring.OpWrite, fd, fl)
	if o != nil {
		o.buf, o.off = buf, off
		if o.short && len(buf) > 0 {
			buf = shortBufs([][]byte{buf})[0]
		}
	}
	tfd, tfl := target(o, fd, fl)
	return w.Ring.Write(handler(o, h), tag, tfd, buf, off, tfl)
}

func (w *wrapped) WriteFixed(h ring.Handler, tag uint64, fd int, buf []byte, bufIndex uint16, off int64, fl ring.Flags) error {
	o := w.fileOp(h, ring.OpWriteFixed, fd, fl)
	if o != nil {
		o.buf, o.off = buf, off
		if o.short && len(buf) > 0 {
			buf = shortBufs([][]byte{buf})[0]
		}
	}
	tfd, tfl := target(o, fd, fl)
	return w.Ring.WriteFixed(handler(o, h), tag, tfd, buf, bufIndex, off, tfl)
}

func (w *wrapped) Writev(h ring.Handler, tag uint64, fd int, bufs [][]byte, off int64, fl ring.Flags) error {
	o := w.fileOp(h, ring.OpWritev, fd, fl)
	if o != nil {
		o.bufs, o.off = bufs, off
		if o.short {
			bufs = shortBufs(bufs)
		}
	}
	tfd, tfl := target(o, fd, fl)
	return w.Ring.Writev(handler(o, h), tag, tfd, bufs, off, tfl)
}

func (w *wrapped) Fsync(h ring.Handler, tag uint64, fd int, datasync bool, fl ring.Flags) error {
	o := w.fileOp(h, ring.OpFsync, fd, fl)
	tfd, tfl := target(o, fd, fl)
	return w.Ring.Fsync(handler(o, h), tag, tfd, datasync, tfl)
}

func (w *wrapped) Ftruncate(h ring.Handler, tag uint64, fd int, size int64, fl ring.Flags) error {
	o := w.fileOp(h, ring.OpFtruncate, fd, fl)
	if o != nil {
		o.size = size
	}
	tfd, tfl := target(o, fd, fl)
	return w.Ring.Ftruncate(handler(o, h), tag, tfd, size, tfl)
}

func (w *wrapped) Fallocate(h ring.Handler, tag uint64, fd int, mode uint32, off, length int64, fl ring.Flags) error {
	o := w.fileOp(h, ring.OpFallocate, fd, fl)
	if o != nil {
		o.mode, o.off, o.size = mode, off, length
	}
	tfd, tfl := target(o, fd, fl)
	return w.Ring.Fallocate(handler(o, h), tag, tfd, mode, off, length, tfl)
}

// pathOp prepares the record of a namespace operation on path (relative to dirfd): nil when path is
// not under root. Paths it touches are registered first with their present state as durable.
func (w *wrapped) pathOp(h ring.Handler, code ring.Opcode, dirfd int, path string, touched bool) *op {
	p, err := resolve(dirfd, path)
	d := w.d
	if err != nil || !d.under(p) || p == d.root {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut.Load() {
		d.touched[p] = true // whatever it becomes, PowerLoss puts back what the model holds
	}
	_, lerr := os.Lstat(p)
	if touched {
		d.knowPath(p)
	}
	return &op{d: d, h: h, code: code, seq: d.nextSeq(), path: p, existed: lerr == nil}
}

func (w *wrapped) Openat(h ring.Handler, tag uint64, dirfd int, path string, flags int, mode uint32, fl ring.Flags) error {
	o := w.pathOp(h, ring.OpOpenat, dirfd, path, false)
	if o != nil {
		o.flags = flags
	}
	return w.Ring.Openat(handler(o, h), tag, dirfd, path, flags, mode, fl)
}

func (w *wrapped) MkdirAt(h ring.Handler, tag uint64, dirfd int, path string, mode uint32, fl ring.Flags) error {
	o := w.pathOp(h, ring.OpMkdirAt, dirfd, path, false)
	return w.Ring.MkdirAt(handler(o, h), tag, dirfd, path, mode, fl)
}

func (w *wrapped) UnlinkAt(h ring.Handler, tag uint64, dirfd int, path string, flags int, fl ring.Flags) error {
	o := w.pathOp(h, ring.OpUnlinkAt, dirfd, path, true)
	return w.Ring.UnlinkAt(handler(o, h), tag, dirfd, path, flags, fl)
}

func (w *wrapped) RenameAt(h ring.Handler, tag uint64, oldDirfd int, oldPath string, newDirfd int, newPath string, flags uint32, fl ring.Flags) error {
	o := w.pathOp(h, ring.OpRenameAt, oldDirfd, oldPath, true)
	if o != nil {
		o.flags = int(flags)
		if p2, err := resolve(newDirfd, newPath); err == nil && w.d.under(p2) && p2 != w.d.root {
			o.path2 = p2
			w.d.mu.Lock()
			w.d.knowPath(p2)
			if w.d.cut.Load() {
				w.d.touched[p2] = true
			}
			w.d.mu.Unlock()
		}
	}
	return w.Ring.RenameAt(handler(o, h), tag, oldDirfd, oldPath, newDirfd, newPath, flags, fl)
}

func (w *wrapped) RegisterFiles(fds []int) error {
	if err := w.Ring.RegisterFiles(fds); err != nil {
		return err
	}
	w.files = append([]int(nil), fds...)
	return nil
}

func (w *wrapped) UnregisterFiles() error {
	if err := w.Ring.UnregisterFiles(); err != nil {
		return err
	}
	w.files = nil
	return nil
}

// MsgRing posts to target's inner ring when target is wrapped too.
func (w *wrapped) MsgRing(h ring.Handler, tag uint64, target ring.Ring, res int32, msgTag uint64, fl ring.Flags) error {
	if t, ok := target.(*wrapped); ok {
		target = t.Ring
	}
	return w.Ring.MsgRing(h, tag, target, res, msgTag, fl)
}
