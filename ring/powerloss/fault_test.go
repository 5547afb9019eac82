package powerloss_test

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/powerloss"
	"github.com/ringstream/ringstream/ring/ringtest"
)

// TestFaultUntilClear: a fault with Until fails every matching operation from its Nth on (a full file
// system stays full), leaves other files alone, and Clear ends it: the next write lands.
func TestFaultUntilClear(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		g := newRig(t, b, 1)
		fd := g.durableFile("f", []byte("base"))
		other := g.create(9, "g")
		g.disk.Inject(powerloss.Fault{Op: ring.OpWrite, Path: "f", Nth: 2, Errno: unix.ENOSPC, Until: true})
		for tag := uint64(1); tag <= 4; tag++ {
			g.q(g.r.Write(g, tag, fd, []byte("x"), int64(3+tag), 0))
		}
		g.q(g.r.Write(g, 5, other, []byte("y"), 0, 0))
		g.run(2, 3, 4)
		if err := g.got[1].Err(); err != nil {
			t.Fatalf("write before the Nth: %v", err)
		}
		for tag := uint64(2); tag <= 4; tag++ {
			if err := g.got[tag].Err(); !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("write %d: %v, want ENOSPC until Clear", tag, err)
			}
		}
		g.disk.Clear()
		g.q(g.r.Write(g, 6, fd, []byte("z"), 5, 0))
		g.run(2, 3, 4)
		if got, _ := g.read("f"); string(got) != "basexz" {
			t.Fatalf("file holds %q, want %q (failed writes change nothing)", got, "basexz")
		}
	})
}

// TestFaultShortWriteAndReadError: a Short fault makes a write complete with half its bytes, which the
// file and the model keep; a read fault fails a read with its errno.
func TestFaultShortWriteAndReadError(t *testing.T) {
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		g := newRig(t, b, 1)
		fd := g.durableFile("f", []byte("base"))
		g.disk.Inject(powerloss.Fault{Op: ring.OpWrite, Path: "f", Short: true})
		g.q(g.r.Writev(g, 1, fd, [][]byte{[]byte("abcd"), []byte("efgh")}, 4, ring.Link))
		g.q(g.r.Fsync(g, 2, fd, true, 0))
		g.run()
		if res := g.got[1].Res; res != 4 {
			t.Fatalf("short writev wrote %d bytes, want 4", res)
		}
		g.disk.Inject(powerloss.Fault{Op: ring.OpRead, Path: "f", Errno: unix.EIO})
		buf := make([]byte, 8)
		g.q(g.r.Read(g, 3, fd, buf, 0, 0))
		g.q(g.r.Read(g, 4, fd, buf, 0, 0))
		g.run(3)
		if err := g.got[3].Err(); !errors.Is(err, unix.EIO) {
			t.Fatalf("read: %v, want EIO", err)
		}
		if res := g.got[4].Res; res != 8 || string(buf) != "baseabcd" {
			t.Fatalf("second read %d bytes %q, want the whole file", res, buf)
		}
		rep := g.crash()
		if got, _ := g.read("f"); string(got) != "baseabcd" {
			t.Fatalf("%v: file holds %q after the synced short write, want %q", rep, got, "baseabcd")
		}
	})
}
