package ring

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Conformance of the path and space operations: RenameAt, UnlinkAt, MkdirAt, Fallocate, Statx. Each
// runs relative to a real directory fd, so the dirfd argument is exercised, not only AT_FDCWD.

// openDir opens dir for use as a dirfd, closed when the test ends.
func openDir(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// wantErrno checks that c failed with errno.
func wantErrno(t *testing.T, c Completion, errno unix.Errno) {
	t.Helper()
	if err := c.Err(); !errors.Is(err, errno) {
		t.Fatalf("tag %d (%v): %v, want %v", c.Tag, c.Op, err, errno)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func testMkdirAt(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	dir := t.TempDir()
	dfd := openDir(t, dir)
	rec := &recorder{}
	must(t, r.MkdirAt(rec, 1, dfd, "d", 0o750, 0))
	must(t, r.MkdirAt(rec, 2, dfd, "d", 0o750, 0))         // exists
	must(t, r.MkdirAt(rec, 3, dfd, "missing/d", 0o750, 0)) // no parent
	must(t, r.MkdirAt(rec, 4, unix.AT_FDCWD, filepath.Join(dir, "abs"), 0o700, 0))
	drive(t, r, rec, 4)
	mustOK(t, rec.byTag(t, 1))
	if c := rec.byTag(t, 1); c.Op != OpMkdirAt || c.Res != 0 {
		t.Fatalf("mkdirat completion %+v", c)
	}
	wantErrno(t, rec.byTag(t, 2), unix.EEXIST)
	wantErrno(t, rec.byTag(t, 3), unix.ENOENT)
	mustOK(t, rec.byTag(t, 4))
	for _, name := range []string{"d", "abs"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || !st.IsDir() {
			t.Fatalf("%s: %v, want a directory", name, err)
		}
	}
}

func testUnlinkAt(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	dir := t.TempDir()
	dfd := openDir(t, dir)
	writeFile(t, filepath.Join(dir, "f"), "x")
	must(t, os.MkdirAll(filepath.Join(dir, "full", "sub"), 0o700))
	must(t, os.Mkdir(filepath.Join(dir, "empty"), 0o700))
	rec := &recorder{}
	must(t, r.UnlinkAt(rec, 1, dfd, "f", 0, 0))
	must(t, r.UnlinkAt(rec, 2, dfd, "f-never", 0, 0))
	must(t, r.UnlinkAt(rec, 3, dfd, "full", unix.AT_REMOVEDIR, 0))
	must(t, r.UnlinkAt(rec, 4, dfd, "empty", unix.AT_REMOVEDIR, 0))
	must(t, r.UnlinkAt(rec, 5, dfd, "full", 0, 0)) // a directory without AT_REMOVEDIR
	drive(t, r, rec, 5)
	mustOK(t, rec.byTag(t, 1))
	wantErrno(t, rec.byTag(t, 2), unix.ENOENT)
	wantErrno(t, rec.byTag(t, 3), unix.ENOTEMPTY)
	mustOK(t, rec.byTag(t, 4))
	wantErrno(t, rec.byTag(t, 5), unix.EISDIR)
	for name, want := range map[string]bool{"f": false, "empty": false, "full": true} {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != want {
			t.Fatalf("%s: exists=%v, want %v", name, err == nil, want)
		}
	}
}

func testRenameAt(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	dir := t.TempDir()
	must(t, os.Mkdir(filepath.Join(dir, "other"), 0o700))
	dfd, ofd := openDir(t, dir), openDir(t, filepath.Join(dir, "other"))
	writeFile(t, filepath.Join(dir, "a"), "alpha")
	writeFile(t, filepath.Join(dir, "b"), "beta")
	rec := &recorder{}
	must(t, r.RenameAt(rec, 1, dfd, "a", ofd, "a2", 0, 0))                     // across dirfds
	must(t, r.RenameAt(rec, 2, dfd, "a", dfd, "x", 0, 0))                      // gone now
	must(t, r.RenameAt(rec, 3, ofd, "a2", dfd, "b", unix.RENAME_NOREPLACE, 0)) // target exists
	must(t, r.RenameAt(rec, 4, dfd, "b", dfd, "c", 0, Link))                   // b -> c, then
	must(t, r.RenameAt(rec, 5, ofd, "a2", dfd, "b", unix.RENAME_NOREPLACE, 0)) // b is free
	drive(t, r, rec, 5)
	mustOK(t, rec.byTag(t, 1))
	wantErrno(t, rec.byTag(t, 2), unix.ENOENT)
	wantErrno(t, rec.byTag(t, 3), unix.EEXIST)
	mustOK(t, rec.byTag(t, 4))
	mustOK(t, rec.byTag(t, 5))
	for name, want := range map[string]string{"b": "alpha", "c": "beta"} {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != want {
			t.Fatalf("%s holds %q (%v), want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "other", "a2")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("other/a2 still there: %v", err)
	}
}

func testFallocate(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	f := tempFile(t)
	fd := int(f.Fd())
	rec := &recorder{}
	must(t, r.Fallocate(rec, 1, fd, 0, 0, 1<<20, 0))
	must(t, r.Fallocate(rec, 2, fd, unix.FALLOC_FL_KEEP_SIZE, 1<<20, 1<<20, 0))
	must(t, r.Fallocate(rec, 3, closedFd(t), 0, 0, 4096, 0))
	must(t, r.Fallocate(rec, 4, fd, 0, 0, 0, 0)) // zero length: EINVAL, as fallocate(2)
	drive(t, r, rec, 4)
	mustOK(t, rec.byTag(t, 1))
	mustOK(t, rec.byTag(t, 2))
	wantErrno(t, rec.byTag(t, 3), unix.EBADF)
	wantErrno(t, rec.byTag(t, 4), unix.EINVAL)
	var st unix.Stat_t
	must(t, unix.Fstat(fd, &st))
	if st.Size != 1<<20 {
		t.Fatalf("size %d, want %d (KEEP_SIZE must not grow it)", st.Size, 1<<20)
	}
	if st.Blocks*512 < 2<<20 {
		t.Fatalf("%d bytes allocated, want at least %d", st.Blocks*512, 2<<20)
	}
}

func testStatx(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	dir := t.TempDir()
	dfd := openDir(t, dir)
	writeFile(t, filepath.Join(dir, "f"), "12345")
	rec := &recorder{}
	var st, missing, self unix.Statx_t
	must(t, r.Statx(rec, 1, dfd, "f", 0, unix.STATX_SIZE|unix.STATX_TYPE, &st, 0))
	must(t, r.Statx(rec, 2, dfd, "nope", 0, unix.STATX_SIZE, &missing, 0))
	must(t, r.Statx(rec, 3, dfd, "", unix.AT_EMPTY_PATH, unix.STATX_TYPE, &self, 0))
	drive(t, r, rec, 3)
	mustOK(t, rec.byTag(t, 1))
	if st.Size != 5 || st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Fatalf("statx: size %d mode %o, want 5 and a regular file", st.Size, st.Mode)
	}
	wantErrno(t, rec.byTag(t, 2), unix.ENOENT)
	mustOK(t, rec.byTag(t, 3))
	if self.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Fatalf("statx of the dirfd itself: mode %o, want a directory", self.Mode)
	}
}

// testPathOpsLinkedAfterWrite is the atomic-replace sequence a cursor snapshot uses, as one chain:
// write the new file, fdatasync it, rename it over the old one, fsync the directory.
func testPathOpsLinkedAfterWrite(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	dir := t.TempDir()
	dfd := openDir(t, dir)
	writeFile(t, filepath.Join(dir, "snap"), "old")
	tmp, err := os.OpenFile(filepath.Join(dir, "snap.tmp"), os.O_RDWR|os.O_CREATE, 0o600)
	must(t, err)
	defer tmp.Close()
	data := bytes.Repeat([]byte("new"), 1000)
	rec := &recorder{}
	must(t, r.Fallocate(rec, 1, int(tmp.Fd()), 0, 0, int64(len(data)), Link))
	must(t, r.Write(rec, 2, int(tmp.Fd()), data, 0, Link))
	must(t, r.Fsync(rec, 3, int(tmp.Fd()), true, Link))
	must(t, r.RenameAt(rec, 4, dfd, "snap.tmp", dfd, "snap", 0, Link))
	must(t, r.MkdirAt(rec, 5, dfd, "next", 0o700, Link))
	must(t, r.Fsync(rec, 6, dfd, false, 0))
	drive(t, r, rec, 6)
	for i, c := range rec.got {
		mustOK(t, c)
		if c.Tag != uint64(i+1) {
			t.Fatalf("completion %d has tag %d: a chain completes in order", i, c.Tag)
		}
	}
	if got, err := os.ReadFile(filepath.Join(dir, "snap")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("snap: %d bytes (%v), want the new contents", len(got), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "next")); err != nil {
		t.Fatal(err)
	}
}

// testPathFailureCancelsChain: a failure at the head of a chain (a write to a closed fd) cancels the
// path and space operations linked after it, and none of them runs. (Whether a failed path operation
// cancels what is linked after it differs between kernels; see the package's decisions.)
func testPathFailureCancelsChain(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	dir := t.TempDir()
	dfd := openDir(t, dir)
	writeFile(t, filepath.Join(dir, "keep"), "k")
	f := tempFile(t)
	var st unix.Statx_t
	rec := &recorder{}
	must(t, r.Write(rec, 1, closedFd(t), []byte("x"), 0, Link))
	must(t, r.RenameAt(rec, 2, dfd, "keep", dfd, "moved", 0, Link))
	must(t, r.UnlinkAt(rec, 3, dfd, "keep", 0, Link))
	must(t, r.MkdirAt(rec, 4, dfd, "made", 0o700, Link))
	must(t, r.Fallocate(rec, 5, int(f.Fd()), 0, 0, 4096, Link))
	must(t, r.Statx(rec, 6, dfd, "keep", 0, unix.STATX_SIZE, &st, 0))
	must(t, r.Nop(rec, 7, 0)) // not in the chain: runs
	drive(t, r, rec, 7)
	wantErrno(t, rec.byTag(t, 1), unix.EBADF)
	for _, tag := range []uint64{2, 3, 4, 5, 6} {
		wantErrno(t, rec.byTag(t, tag), unix.ECANCELED)
	}
	mustOK(t, rec.byTag(t, 7))
	if _, err := os.Stat(filepath.Join(dir, "keep")); err != nil {
		t.Fatalf("a cancelled rename or unlink ran: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "made")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the cancelled mkdir ran: %v", err)
	}
	if st, _ := f.Stat(); st.Size() != 0 {
		t.Fatalf("the cancelled fallocate ran: size %d", st.Size())
	}
}

// testPathBadArguments: a path holding a NUL completes with EINVAL, and a registered-file index is
// refused with EBADF, on both backends alike.
func testPathBadArguments(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	dfd := openDir(t, t.TempDir())
	rec := &recorder{}
	var st unix.Statx_t
	must(t, r.MkdirAt(rec, 1, dfd, "a\x00b", 0o700, 0))
	must(t, r.UnlinkAt(rec, 2, dfd, "a\x00b", 0, 0))
	must(t, r.RenameAt(rec, 3, dfd, "a", dfd, "b\x00", 0, 0))
	must(t, r.Statx(rec, 4, dfd, "\x00", 0, unix.STATX_SIZE, &st, 0))
	must(t, r.MkdirAt(rec, 5, 0, "fixed", 0o700, FixedFile))
	drive(t, r, rec, 5)
	for _, tag := range []uint64{1, 2, 3, 4} {
		wantErrno(t, rec.byTag(t, tag), unix.EINVAL)
	}
	wantErrno(t, rec.byTag(t, 5), unix.EBADF)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testWriteAtFilePosition: offset -1 reads and writes at the file position and moves it (and an
// O_APPEND file appends), as io_uring does since IORING_FEAT_RW_CUR_POS.
func testWriteAtFilePosition(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	path := filepath.Join(t.TempDir(), "log")
	writeFile(t, path, "0123")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	must(t, err)
	defer f.Close()
	fd := int(f.Fd())
	rec := &recorder{}
	must(t, r.Write(rec, 1, fd, []byte("ab"), -1, Link))
	must(t, r.Writev(rec, 2, fd, [][]byte{[]byte("c"), []byte("d")}, -1, 0))
	drive(t, r, rec, 2)
	mustOK(t, rec.byTag(t, 1))
	mustOK(t, rec.byTag(t, 2))
	if got, _ := os.ReadFile(path); string(got) != "0123abcd" {
		t.Fatalf("file holds %q, want %q", got, "0123abcd")
	}
	g, err := os.Open(path)
	must(t, err)
	defer g.Close()
	if _, err := g.Seek(2, 0); err != nil {
		t.Fatal(err)
	}
	one, two := make([]byte, 3), make([]byte, 2)
	must(t, r.Read(rec, 3, int(g.Fd()), one, -1, Link))
	must(t, r.Readv(rec, 4, int(g.Fd()), [][]byte{two}, -1, 0))
	drive(t, r, rec, 4)
	if string(one) != "23a" || string(two) != "bc" {
		t.Fatalf("reads at the file position got %q and %q, want %q and %q", one, two, "23a", "bc")
	}
}
