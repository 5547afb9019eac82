package ring

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

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

// testWaitAllRecvWaitsForAll: a Recv with MSG_WAITALL completes once, with the whole buffer, however
// the data arrives in pieces.
func testWaitAllRecvWaitsForAll(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	client, server := tcpPair(t, r)
	const piece = 4096
	got := make([]byte, 4*piece)
	rec := &recorder{}
	if err := r.Recv(rec, 1, server, got, unix.MSG_WAITALL, 0); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, len(got))
	for i := range want {
		want[i] = byte(i / 7)
	}
	for off := 0; off < len(want); off += piece {
		if err := r.Wait(0); err != nil {
			t.Fatal(err)
		}
		r.Dispatch()
		if len(rec.got) != 0 {
			t.Fatalf("recv completed with %d bytes after %d of %d arrived", rec.got[0].Res, off, len(want))
		}
		if _, err := unix.Write(client, want[off:off+piece]); err != nil {
			t.Fatal(err)
		}
	}
	drive(t, r, rec, 1)
	mustOK(t, rec.got[0])
	if int(rec.got[0].Res) != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("recv res %d, want %d and the same bytes", rec.got[0].Res, len(want))
	}
}

// testWaitAllSendSendsAll: a Send with MSG_WAITALL larger than the socket buffers completes once,
// with every byte sent, while a reader drains the other end.
func testWaitAllSendSendsAll(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	client, server := tcpPair(t, r)
	msg := make([]byte, 8<<20)
	for i := range msg {
		msg[i] = byte(i % 251)
	}
	drained := make(chan []byte)
	go func() {
		// A plain blocking reader on its own goroutine: the peer of the ring's send.
		got := make([]byte, 0, len(msg))
		buf := make([]byte, 64<<10)
		for len(got) < len(msg) {
			n, err := unix.Read(server, buf)
			if n <= 0 || err != nil {
				break
			}
			got = append(got, buf[:n]...)
		}
		drained <- got
	}()
	rec := &recorder{}
	if err := r.Send(rec, 1, client, msg, unix.MSG_WAITALL, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 1)
	mustOK(t, rec.got[0])
	if int(rec.got[0].Res) != len(msg) {
		t.Fatalf("send res %d, want %d", rec.got[0].Res, len(msg))
	}
	if got := <-drained; !bytes.Equal(got, msg) {
		t.Fatalf("reader got %d bytes, not the %d sent", len(got), len(msg))
	}
}

// testLinkTimeoutAloneIsInvalid: a LinkTimeout with no linked operation before it is refused with
// EINVAL, as the kernel refuses it.
func testLinkTimeoutAloneIsInvalid(t *testing.T, newRing newRingFunc) {
	r := testRing(t, newRing, 8)
	rec := &recorder{}
	if err := r.Nop(rec, 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.LinkTimeout(rec, 2, time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	drive(t, r, rec, 2)
	mustOK(t, rec.byTag(t, 1))
	if err := rec.byTag(t, 2).Err(); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("link timeout after an unlinked nop: %v, want EINVAL", err)
	}
}
