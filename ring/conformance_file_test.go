package ring

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func testNop(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	rec := &recorder{}
	for tag := uint64(1); tag <= 3; tag++ {
		if err := r.Nop(rec, tag, 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.InFlight(); got != 3 {
		t.Fatalf("in flight %d, want 3", got)
	}
	drive(t, r, rec, 3)
	for i, c := range rec.got {
		if c.Res != 0 || c.Op != OpNop {
			t.Fatalf("completion %d: %+v", i, c)
		}
	}
	if got := r.InFlight(); got != 0 {
		t.Fatalf("in flight %d after dispatch, want 0", got)
	}
}

func testWriteThenReadBack(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	f := tempFile(t)
	rec := &recorder{}
	data := bytes.Repeat([]byte("ringstream"), 410)
	if err := r.Write(rec, 1, int(f.Fd()), data, 4096, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 1)
	c := rec.got[0]
	mustOK(t, c)
	if int(c.Res) != len(data) || c.Op != OpWrite {
		t.Fatalf("write completion %+v, want res %d", c, len(data))
	}
	back := make([]byte, len(data))
	if err := r.Read(rec, 2, int(f.Fd()), back, 4096, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 2)
	mustOK(t, rec.got[1])
	if int(rec.got[1].Res) != len(data) || !bytes.Equal(back, data) {
		t.Fatalf("read back %d bytes, equal %v", rec.got[1].Res, bytes.Equal(back, data))
	}
	// Reading past the end is a short read, not an error.
	tail := make([]byte, 100)
	if err := r.Read(rec, 3, int(f.Fd()), tail, 4096+int64(len(data))-10, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 3)
	if rec.got[2].Res != 10 {
		t.Fatalf("read at the end: res %d, want 10", rec.got[2].Res)
	}
}

func testLinkedWriteFdatasync(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	f := tempFile(t)
	rec := &recorder{}
	data := bytes.Repeat([]byte{0xab}, 4096)
	if err := r.Write(rec, 10, int(f.Fd()), data, 0, Link); err != nil {
		t.Fatal(err)
	}
	if err := r.Fsync(rec, 11, int(f.Fd()), true, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 2)
	if rec.got[0].Tag != 10 || rec.got[1].Tag != 11 {
		t.Fatalf("completion order %d, %d; want write 10 then fsync 11", rec.got[0].Tag, rec.got[1].Tag)
	}
	mustOK(t, rec.got[0])
	mustOK(t, rec.got[1])
	if rec.got[1].Op != OpFsync || rec.got[0].Res != 4096 {
		t.Fatalf("completions %+v", rec.got)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("file holds %d bytes (err %v), want the 4096 written", len(got), err)
	}
}

func testFailedLinkCancelsRest(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	f := tempFile(t)
	rec := &recorder{}
	bad := closedFd(t)
	if err := r.Write(rec, 1, bad, []byte("x"), 0, Link); err != nil {
		t.Fatal(err)
	}
	if err := r.Fsync(rec, 2, int(f.Fd()), true, Link); err != nil {
		t.Fatal(err)
	}
	if err := r.Nop(rec, 3, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Nop(rec, 4, 0); err != nil { // not in the chain
		t.Fatal(err)
	}
	drive(t, r, rec, 4)
	if err := rec.byTag(t, 1).Err(); !errors.Is(err, unix.EBADF) {
		t.Fatalf("write on a closed fd: %v, want EBADF", err)
	}
	for _, tag := range []uint64{2, 3} {
		if err := rec.byTag(t, tag).Err(); !errors.Is(err, unix.ECANCELED) {
			t.Fatalf("chain member %d: %v, want ECANCELED", tag, err)
		}
	}
	mustOK(t, rec.byTag(t, 4))
}

func testFtruncate(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	f := tempFile(t)
	rec := &recorder{}
	if _, err := f.Write(make([]byte, 10000)); err != nil {
		t.Fatal(err)
	}
	if err := r.Ftruncate(rec, 1, int(f.Fd()), 1234, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 1)
	mustOK(t, rec.got[0])
	if rec.got[0].Op != OpFtruncate {
		t.Fatalf("op %v", rec.got[0].Op)
	}
	st, err := f.Stat()
	if err != nil || st.Size() != 1234 {
		t.Fatalf("size after ftruncate: %d (err %v), want 1234", st.Size(), err)
	}
}

func testWritevReadv(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	f := tempFile(t)
	rec := &recorder{}
	parts := [][]byte{[]byte("alpha-"), bytes.Repeat([]byte("b"), 5000), []byte("-omega")}
	if err := r.Writev(rec, 1, int(f.Fd()), parts, 100, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 1)
	mustOK(t, rec.got[0])
	want := bytes.Join(parts, nil)
	if int(rec.got[0].Res) != len(want) {
		t.Fatalf("writev res %d, want %d", rec.got[0].Res, len(want))
	}
	into := [][]byte{make([]byte, 3), make([]byte, 4000), make([]byte, len(want)-4003)}
	if err := r.Readv(rec, 2, int(f.Fd()), into, 100, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 2)
	mustOK(t, rec.got[1])
	if got := bytes.Join(into, nil); !bytes.Equal(got, want) {
		t.Fatalf("readv returned different bytes")
	}
}

func testBadFdReturnsError(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	rec := &recorder{}
	bad := closedFd(t)
	if err := r.Read(rec, 7, bad, make([]byte, 16), 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Fsync(rec, 8, bad, false, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 2)
	for _, c := range rec.got {
		err := c.Err()
		var opErr *OpError
		if !errors.As(err, &opErr) || !errors.Is(err, unix.EBADF) {
			t.Fatalf("tag %d: %v, want an *OpError with EBADF", c.Tag, err)
		}
		if opErr.Op != c.Op {
			t.Fatalf("OpError names %v, completion is %v", opErr.Op, c.Op)
		}
	}
	if msg := rec.byTag(t, 7).Err().Error(); msg != "ring: read: bad file descriptor" {
		t.Fatalf("error text %q", msg)
	}
}

func testOpenatClose(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	rec := &recorder{}
	dir := t.TempDir()
	path := filepath.Join(dir, "opened")
	if err := r.Openat(rec, 1, unix.AT_FDCWD, path, unix.O_RDWR|unix.O_CREAT, 0o640, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 1)
	mustOK(t, rec.got[0])
	fd := int(rec.got[0].Res)
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm()&^0o022 != 0o640&^0o022 {
		t.Fatalf("opened file: %v, %v", st, err)
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("opened fd flags %#x (err %v), want FD_CLOEXEC", flags, err)
	}
	if err := r.CloseFile(rec, 2, fd, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Openat(rec, 3, unix.AT_FDCWD, filepath.Join(dir, "missing"), unix.O_RDONLY, 0, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 3)
	mustOK(t, rec.byTag(t, 2))
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Fatalf("fd %d still open after CloseFile (%v)", fd, err)
	}
	if err := rec.byTag(t, 3).Err(); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("open of a missing file: %v, want ENOENT", err)
	}
}

func testQueueFullIsBackPressure(t *testing.T, newRing newRingFunc) {
	const entries = 8
	r := testRing(t, newRing, entries)
	rec := &recorder{}
	queued := 0
	for {
		err := r.Nop(rec, uint64(queued), 0)
		if errors.Is(err, ErrQueueFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		queued++
		if queued > 4*entries {
			t.Fatalf("queued %d nops on a ring of %d entries without ErrQueueFull", queued, entries)
		}
	}
	if queued < entries {
		t.Fatalf("ErrQueueFull after %d nops, ring has %d entries", queued, entries)
	}
	drive(t, r, rec, queued)
	if err := r.Nop(rec, 1000, 0); err != nil {
		t.Fatalf("after draining: %v", err)
	}
	drive(t, r, rec, queued+1)
}

// testMixedOps100k runs 100,000 nops, writes and reads with the queue kept near full, and checks that
// every tag completes exactly once with its own operation's result.
func testMixedOps100k(t *testing.T, newRing newRingFunc) {
	const total = 100000
	r := testRing(t, newRing, 64)
	f := tempFile(t)
	fd := int(f.Fd())
	block := make([]byte, 512)
	for i := range block {
		block[i] = byte(i)
	}
	if _, err := f.WriteAt(bytes.Repeat(block, 16), 0); err != nil {
		t.Fatal(err)
	}
	readBufs := make([][]byte, 128)
	for i := range readBufs {
		readBufs[i] = make([]byte, 512)
	}
	seen := make([]uint8, total)
	h := &countingHandler{seen: seen}
	next := 0
	for h.done < total {
		for next < total {
			var err error
			switch next % 3 {
			case 0:
				err = r.Nop(h, uint64(next), 0)
			case 1:
				err = r.Write(h, uint64(next), fd, block, int64(next%16)*512, 0)
			case 2:
				err = r.Read(h, uint64(next), fd, readBufs[next%len(readBufs)], int64(next%16)*512, 0)
			}
			if errors.Is(err, ErrQueueFull) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			next++
		}
		if err := r.Wait(1); err != nil {
			t.Fatal(err)
		}
		r.Dispatch()
		if h.bad != "" {
			t.Fatal(h.bad)
		}
	}
	for tag, n := range seen {
		if n != 1 {
			t.Fatalf("tag %d completed %d times", tag, n)
		}
	}
	if r.InFlight() != 0 {
		t.Fatalf("in flight %d after all completions", r.InFlight())
	}
}

type countingHandler struct {
	seen []uint8
	done int
	bad  string
}

func (h *countingHandler) Complete(c Completion) {
	h.seen[c.Tag]++
	h.done++
	want := []Opcode{OpNop, OpWrite, OpRead}[c.Tag%3]
	wantRes := int32(512)
	if want == OpNop {
		wantRes = 0
	}
	if c.Op != want || c.Res != wantRes {
		h.bad = "mixed ops: wrong completion for its tag"
	}
}

func testRegisteredBuffers(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	f := tempFile(t)
	rec := &recorder{}
	bufs := [][]byte{make([]byte, 4096), make([]byte, 8192)}
	if err := r.RegisterBuffers(bufs); err != nil {
		t.Fatal(err)
	}
	copy(bufs[1][100:], "registered")
	if err := r.WriteFixed(rec, 1, int(f.Fd()), bufs[1][100:110], 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 1)
	mustOK(t, rec.got[0])
	if rec.got[0].Res != 10 || rec.got[0].Op != OpWriteFixed {
		t.Fatalf("write fixed %+v", rec.got[0])
	}
	if err := r.ReadFixed(rec, 2, int(f.Fd()), bufs[0][:10], 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	outside := make([]byte, 10)
	if err := r.ReadFixed(rec, 3, int(f.Fd()), outside, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 3)
	mustOK(t, rec.byTag(t, 2))
	if string(bufs[0][:10]) != "registered" {
		t.Fatalf("read fixed got %q", bufs[0][:10])
	}
	if err := rec.byTag(t, 3).Err(); !errors.Is(err, unix.EFAULT) {
		t.Fatalf("read fixed outside the registered buffer: %v, want EFAULT", err)
	}
	if err := r.UnregisterBuffers(); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterBuffers(bufs[:1]); err != nil {
		t.Fatalf("register again after unregister: %v", err)
	}
}

func testRegisteredFiles(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	f := tempFile(t)
	rec := &recorder{}
	if err := r.RegisterFiles([]int{int(f.Fd())}); err != nil {
		t.Fatal(err)
	}
	if err := r.Write(rec, 1, 0, []byte("fixed-file"), 0, FixedFile|Link); err != nil {
		t.Fatal(err)
	}
	if err := r.Fsync(rec, 2, 0, true, FixedFile); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 2)
	mustOK(t, rec.got[0])
	mustOK(t, rec.got[1])
	got, _ := os.ReadFile(f.Name())
	if string(got) != "fixed-file" {
		t.Fatalf("file holds %q", got)
	}
	// Neither backend closes a registered file through CloseFile, nor reads past the table.
	if err := r.CloseFile(rec, 3, 0, FixedFile); err != nil {
		t.Fatal(err)
	}
	if err := r.Read(rec, 4, 1, make([]byte, 4), 0, FixedFile); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 4)
	for _, tag := range []uint64{3, 4} {
		if err := rec.byTag(t, tag).Err(); !errors.Is(err, unix.EBADF) {
			t.Fatalf("tag %d: %v, want EBADF", tag, err)
		}
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0); err != nil {
		t.Fatalf("the registered file was closed: %v", err)
	}
	if err := r.UnregisterFiles(); err != nil {
		t.Fatal(err)
	}
}

// testRegistrationErrors: registering twice, unregistering nothing and registering an empty table
// fail the same way on both backends (EBUSY, ENXIO, EINVAL, as the kernel answers).
func testRegistrationErrors(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	f := tempFile(t)
	checks := []struct {
		name string
		err  error
		want unix.Errno
	}{
		{"unregister files when none", r.UnregisterFiles(), unix.ENXIO},
		{"unregister buffers when none", r.UnregisterBuffers(), unix.ENXIO},
		{"register no files", r.RegisterFiles(nil), unix.EINVAL},
		{"register no buffers", r.RegisterBuffers(nil), unix.EINVAL},
		{"register files", r.RegisterFiles([]int{int(f.Fd())}), 0},
		{"register files again", r.RegisterFiles([]int{int(f.Fd())}), unix.EBUSY},
		{"register buffers", r.RegisterBuffers([][]byte{make([]byte, 4096)}), 0},
		{"register buffers again", r.RegisterBuffers([][]byte{make([]byte, 4096)}), unix.EBUSY},
	}
	for _, c := range checks {
		if c.want == 0 {
			if c.err != nil {
				t.Fatalf("%s: %v", c.name, c.err)
			}
			continue
		}
		if !errors.Is(c.err, c.want) {
			t.Fatalf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
}
