package ring

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// newRingFunc builds a ring of one backend. The suite calls it on a locked OS thread.
type newRingFunc func(entries uint32) (Ring, error)

// recorder is a Handler that keeps every completion it receives, in order.
type recorder struct {
	got []Completion
}

func (c *recorder) Complete(comp Completion) { c.got = append(c.got, comp) }

func (c *recorder) byTag(t *testing.T, tag uint64) Completion {
	t.Helper()
	for _, comp := range c.got {
		if comp.Tag == tag {
			return comp
		}
	}
	t.Fatalf("no completion with tag %d (have %d completions)", tag, len(c.got))
	return Completion{}
}

// testRing locks the calling goroutine to its thread (left locked, so the thread exits with the test)
// and builds a ring that is closed when the test ends.
func testRing(t *testing.T, newRing newRingFunc, entries uint32) Ring {
	t.Helper()
	runtime.LockOSThread()
	r, err := newRing(entries)
	if err != nil {
		t.Fatalf("new ring: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// drive submits and dispatches until rec holds want completions.
func drive(t *testing.T, r Ring, rec *recorder, want int) {
	t.Helper()
	for len(rec.got) < want {
		if err := r.Wait(1); err != nil {
			t.Fatalf("wait: %v", err)
		}
		r.Dispatch()
	}
	if len(rec.got) != want {
		t.Fatalf("got %d completions, want %d", len(rec.got), want)
	}
}

func tempFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "data"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func mustOK(t *testing.T, c Completion) {
	t.Helper()
	if err := c.Err(); err != nil {
		t.Fatalf("tag %d: %v", c.Tag, err)
	}
}

// runConformance runs every behaviour the Ring contract promises against one backend, on real files
// and real loopback sockets.
func runConformance(t *testing.T, newRing newRingFunc) {
	tests := []struct {
		name string
		fn   func(*testing.T, newRingFunc)
	}{
		{"Nop", testNop},
		{"WriteThenReadBack", testWriteThenReadBack},
		{"LinkedWriteFdatasync", testLinkedWriteFdatasync},
		{"FailedLinkCancelsRest", testFailedLinkCancelsRest},
		{"Ftruncate", testFtruncate},
		{"WritevReadv", testWritevReadv},
		{"BadFdReturnsError", testBadFdReturnsError},
		{"OpenatClose", testOpenatClose},
		{"QueueFullIsBackPressure", testQueueFullIsBackPressure},
		{"MixedOps100k", testMixedOps100k},
		{"RegisteredBuffers", testRegisteredBuffers},
		{"RegisteredFiles", testRegisteredFiles},
		{"MsgRingBetweenRings", testMsgRingBetweenRings},
		{"ClosedRing", testClosedRing},
		{"AcceptConnectSendRecvTCP", testSendRecvTCP},
		{"SendmsgGather", testSendmsgGather},
		{"SendZC", testSendZC},
		{"ConnectRefused", testConnectRefused},
		{"TimeoutFires", testTimeoutFires},
		{"LinkTimeoutCancelsRecv", testLinkTimeoutCancelsRecv},
		{"LinkTimeoutNotReached", testLinkTimeoutNotReached},
		{"BadArgumentsComplete", testBadArgumentsComplete},
		{"MsgRingToClosedRing", testMsgRingToClosedRing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newRing) })
	}
}

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
	if err := r.UnregisterFiles(); err != nil {
		t.Fatal(err)
	}
}

// testMsgRingBetweenRings runs two rings on two locked threads. Each sends the other a message; the
// receiver's MsgHandler sees the tag and result, and each sender sees its MsgRing complete.
func testMsgRingBetweenRings(t *testing.T, newRing newRingFunc) {
	const rounds, window = 200, 8
	a := testRing(t, newRing, 16)
	type peer struct {
		ring Ring
		err  error
	}
	ready := make(chan peer)
	finish := make(chan Ring)
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		b, err := newRing(16)
		ready <- peer{b, err}
		if err != nil {
			return
		}
		done <- echoMessages(b, <-finish, rounds)
		b.Close()
	}()
	p := <-ready
	if p.err != nil {
		t.Fatal(p.err)
	}
	b := p.ring
	finish <- a
	inbox := &recorder{}
	a.SetMsgHandler(inbox)
	sent := &recorder{}
	for i := 0; i < rounds; i++ {
		// Keep at most window messages unanswered, so no inbox or CQ ever overflows.
		for i-len(inbox.got) >= window {
			if err := a.Wait(1); err != nil {
				t.Fatal(err)
			}
			a.Dispatch()
		}
		for {
			err := a.MsgRing(sent, uint64(i), b, int32(i*3), uint64(1000+i), 0)
			if err == nil {
				break
			}
			if !errors.Is(err, ErrQueueFull) {
				t.Fatal(err)
			}
			a.Wait(1)
			a.Dispatch()
		}
		if err := a.Wait(0); err != nil {
			t.Fatal(err)
		}
		a.Dispatch()
	}
	for len(inbox.got) < rounds || len(sent.got) < rounds {
		if err := a.Wait(1); err != nil {
			t.Fatal(err)
		}
		a.Dispatch()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, c := range sent.got {
		mustOK(t, c)
		if c.Op != OpMsgRing {
			t.Fatalf("sender completion %d: %+v", i, c)
		}
	}
	for i, c := range inbox.got {
		if c.Tag != uint64(2000+i) || c.Res != int32(i*3)+1 {
			t.Fatalf("echo %d: tag %d res %d, want tag %d res %d", i, c.Tag, c.Res, 2000+i, i*3+1)
		}
	}
}

// echoMessages receives rounds messages on b and answers each to a with tag+1000 and res+1.
func echoMessages(b, a Ring, rounds int) error {
	inbox := &recorder{}
	b.SetMsgHandler(inbox)
	sent := &recorder{}
	answered := 0
	for answered < rounds || len(sent.got) < rounds {
		if err := b.Wait(1); err != nil {
			return err
		}
		b.Dispatch()
		for answered < len(inbox.got) {
			c := inbox.got[answered]
			if c.Tag != uint64(1000+answered) {
				return errors.New("echo: message out of order")
			}
			err := b.MsgRing(sent, uint64(answered), a, c.Res+1, c.Tag+1000, 0)
			if errors.Is(err, ErrQueueFull) {
				break
			}
			if err != nil {
				return err
			}
			answered++
		}
	}
	for _, c := range sent.got {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

func testClosedRing(t *testing.T, newRing newRingFunc) {
	runtime.LockOSThread()
	r, err := newRing(8)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Nop(&recorder{}, 1, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("nop on a closed ring: %v, want ErrClosed", err)
	}
	if _, err := r.Submit(); !errors.Is(err, ErrClosed) {
		t.Fatalf("submit on a closed ring: %v, want ErrClosed", err)
	}
	if err := r.Wait(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("wait on a closed ring: %v, want ErrClosed", err)
	}
	if n := r.Dispatch(); n != 0 {
		t.Fatalf("dispatch on a closed ring: %d", n)
	}
	if err := r.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second close: %v, want ErrClosed", err)
	}
}

// closedFd returns a descriptor number that is not open: one far above any this test process opens.
func closedFd(t *testing.T) int {
	t.Helper()
	const fd = 1<<20 - 3
	if _, err := unix.FcntlInt(fd, unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Fatalf("fd %d is open", fd)
	}
	return fd
}

// lockThread locks the test goroutine to its thread for the rest of the test; the thread exits with it.
func lockThread(t *testing.T) {
	t.Helper()
	runtime.LockOSThread()
}

// listenLoopback opens a TCP listening socket on 127.0.0.1 with a kernel-chosen port.
func listenLoopback(t *testing.T) (int, *unix.SockaddrInet4) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 16); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fd, sa.(*unix.SockaddrInet4)
}

func newTCPSocket(t *testing.T) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// tcpPair connects two loopback TCP sockets through the ring's Accept and Connect.
func tcpPair(t *testing.T, r Ring) (client, server int) {
	t.Helper()
	lfd, addr := listenLoopback(t)
	client = newTCPSocket(t)
	rec := &recorder{}
	if err := r.Accept(rec, 1, lfd, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Connect(rec, 2, client, addr, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 2)
	acc, conn := rec.byTag(t, 1), rec.byTag(t, 2)
	mustOK(t, acc)
	mustOK(t, conn)
	if acc.Op != OpAccept || conn.Op != OpConnect || conn.Res != 0 {
		t.Fatalf("accept %+v connect %+v", acc, conn)
	}
	server = int(acc.Res)
	t.Cleanup(func() { unix.Close(server) })
	peer, err := unix.Getpeername(server)
	if err != nil {
		t.Fatal(err)
	}
	local, _ := unix.Getsockname(client)
	if peer.(*unix.SockaddrInet4).Port != local.(*unix.SockaddrInet4).Port {
		t.Fatalf("accepted socket's peer is not the connecting socket")
	}
	return client, server
}

// recvAll receives exactly len(buf) bytes on fd through the ring.
func recvAll(t *testing.T, r Ring, fd int, buf []byte) {
	t.Helper()
	rec := &recorder{}
	for got := 0; got < len(buf); {
		if err := r.Recv(rec, uint64(got), fd, buf[got:], 0, 0); err != nil {
			t.Fatal(err)
		}
		drive(t, r, rec, len(rec.got)+1)
		c := rec.got[len(rec.got)-1]
		mustOK(t, c)
		if c.Res == 0 {
			t.Fatalf("peer closed after %d of %d bytes", got, len(buf))
		}
		got += int(c.Res)
	}
}

func testSendRecvTCP(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 16)
	client, server := tcpPair(t, r)
	msg := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	rec := &recorder{}
	sent := 0
	got := make([]byte, len(msg))
	received := 0
	recvRec := &recorder{}
	// Send and receive at the same time, so a full socket buffer never stalls the test.
	for sent < len(msg) || received < len(msg) {
		if sent < len(msg) && len(rec.got) == 0 {
			if err := r.Send(rec, 1, client, msg[sent:], 0, 0); err != nil {
				t.Fatal(err)
			}
		}
		if received < len(msg) && len(recvRec.got) == 0 {
			if err := r.Recv(recvRec, 2, server, got[received:], 0, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Wait(1); err != nil {
			t.Fatal(err)
		}
		r.Dispatch()
		for _, c := range rec.got {
			mustOK(t, c)
			sent += int(c.Res)
		}
		rec.got = rec.got[:0]
		for _, c := range recvRec.got {
			mustOK(t, c)
			if c.Res == 0 {
				t.Fatalf("recv saw the peer close")
			}
			received += int(c.Res)
		}
		recvRec.got = recvRec.got[:0]
		if r.InFlight() > 2 {
			t.Fatalf("in flight %d", r.InFlight())
		}
	}
	for r.InFlight() > 0 {
		r.Wait(1)
		r.Dispatch()
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("received bytes differ from those sent")
	}
	// A closed peer reads as Res 0.
	if err := unix.Shutdown(client, unix.SHUT_WR); err != nil {
		t.Fatal(err)
	}
	if err := r.Recv(recvRec, 3, server, got[:10], 0, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, recvRec, 1)
	if c := recvRec.got[0]; c.Res != 0 || c.Err() != nil {
		t.Fatalf("recv after the peer's shutdown: %+v", c)
	}
}

func testSendmsgGather(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 16)
	client, server := tcpPair(t, r)
	parts := [][]byte{[]byte("head:"), bytes.Repeat([]byte("x"), 300), []byte(":tail")}
	rec := &recorder{}
	if err := r.Sendmsg(rec, 1, client, parts, 0, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 1)
	mustOK(t, rec.got[0])
	want := bytes.Join(parts, nil)
	if int(rec.got[0].Res) != len(want) || rec.got[0].Op != OpSendmsg {
		t.Fatalf("sendmsg %+v, want res %d", rec.got[0], len(want))
	}
	got := make([]byte, len(want))
	recvAll(t, r, server, got)
	if !bytes.Equal(got, want) {
		t.Fatalf("received %q", got)
	}
}

func testSendZC(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 16)
	client, server := tcpPair(t, r)
	rec := &recorder{}
	msg := bytes.Repeat([]byte("zc"), 2048)
	err := r.SendZC(rec, 1, client, msg, 0, 0)
	if !r.Info().Has(OpSendZC) {
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("SendZC without the op: %v, want ErrUnsupported", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 1)
	c := rec.got[0]
	mustOK(t, c)
	if int(c.Res) != len(msg) || c.Op != OpSendZC || c.Flags&(cqeFlagMore|cqeFlagNotif) != 0 {
		t.Fatalf("send_zc completion %+v: want one folded completion of %d bytes", c, len(msg))
	}
	if r.InFlight() != 0 {
		t.Fatalf("in flight %d after the folded completion", r.InFlight())
	}
	got := make([]byte, len(msg))
	recvAll(t, r, server, got)
	if !bytes.Equal(got, msg) {
		t.Fatalf("received bytes differ")
	}
}

func testConnectRefused(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	lfd, addr := listenLoopback(t)
	unix.Close(lfd) // the port is now closed (the cleanup's second close is harmless)
	fd := newTCPSocket(t)
	rec := &recorder{}
	if err := r.Connect(rec, 1, fd, addr, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 1)
	if err := rec.got[0].Err(); !errors.Is(err, unix.ECONNREFUSED) {
		t.Fatalf("connect to a closed port: %v, want ECONNREFUSED", err)
	}
}

func testTimeoutFires(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	rec := &recorder{}
	if err := r.Timeout(rec, 1, 2*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Nop(rec, 2, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 2)
	if rec.got[0].Tag != 2 {
		t.Fatalf("the timeout completed before a nop queued after it")
	}
	c := rec.got[1]
	if c.Op != OpTimeout || c.Res != -int32(unix.ETIME) || c.Err() != nil {
		t.Fatalf("timeout completion %+v (err %v), want -ETIME reported as success", c, c.Err())
	}
}

func testLinkTimeoutCancelsRecv(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	_, server := tcpPair(t, r)
	rec := &recorder{}
	buf := make([]byte, 16)
	if err := r.Recv(rec, 1, server, buf, 0, Link); err != nil {
		t.Fatal(err)
	}
	if err := r.LinkTimeout(rec, 2, 3*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 2)
	if err := rec.byTag(t, 1).Err(); !errors.Is(err, unix.ECANCELED) {
		t.Fatalf("recv with no data past its link timeout: %v, want ECANCELED", err)
	}
	lt := rec.byTag(t, 2)
	if lt.Op != OpLinkTimeout || lt.Res != -int32(unix.ETIME) || lt.Err() != nil {
		t.Fatalf("link timeout %+v, want -ETIME", lt)
	}
}

func testLinkTimeoutNotReached(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	f := tempFile(t)
	rec := &recorder{}
	if err := r.Write(rec, 1, int(f.Fd()), []byte("in time"), 0, Link); err != nil {
		t.Fatal(err)
	}
	if err := r.LinkTimeout(rec, 2, time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 2)
	mustOK(t, rec.byTag(t, 1))
	if err := rec.byTag(t, 2).Err(); !errors.Is(err, unix.ECANCELED) {
		t.Fatalf("link timeout of an op that finished first: %v, want ECANCELED", err)
	}
}

// testBadArgumentsComplete: arguments no kernel accepts (a path with a NUL byte, an address family the
// ring cannot encode) complete with an error through Dispatch, like any failed operation.
func testBadArgumentsComplete(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	rec := &recorder{}
	if err := r.Openat(rec, 1, unix.AT_FDCWD, "bad\x00path", unix.O_RDONLY, 0, 0); err != nil {
		t.Fatal(err)
	}
	fd := newTCPSocket(t)
	if err := r.Connect(rec, 2, fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 2)
	if err := rec.byTag(t, 1).Err(); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("openat with a NUL in the path: %v, want EINVAL", err)
	}
	if err := rec.byTag(t, 2).Err(); !errors.Is(err, unix.EAFNOSUPPORT) {
		t.Fatalf("connect to a netlink address: %v, want EAFNOSUPPORT", err)
	}
	if r.InFlight() != 0 {
		t.Fatalf("in flight %d", r.InFlight())
	}
}

func testMsgRingToClosedRing(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	target, err := newRing(8)
	if err != nil {
		t.Fatal(err)
	}
	if err := target.Close(); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if err := r.MsgRing(rec, 1, target, 0, 1, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 1)
	if err := rec.got[0].Err(); !errors.Is(err, unix.EBADFD) {
		t.Fatalf("post to a closed ring: %v, want EBADFD", err)
	}
}
