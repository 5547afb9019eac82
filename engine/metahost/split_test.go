package metahost

import (
	"bytes"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/engine/vsr"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/powerloss"
	"github.com/ringstream/ringstream/wire"
)

// A persist whose records are more than vsr.InlineMax is split: its log append is synced before its
// copies are written, and the copies carry no records. Here the power goes while persist 3 (op 2, 9 KB)
// writes its second copy: its log append was synced, its first copy is unsynced. Whatever part of it
// a power loss keeps (the writes in any order), the replica reopens at op 1 or op 2, never in
// recovery. Without the split's fdatasync (the broken variant) a state that keeps the copy and loses
// the append is caught.
func TestMetaStore_SplitPersistSyncsTheLogFirst(t *testing.T) {
	for _, broken := range []bool{false, true} {
		dir := t.TempDir()
		if err := Format(FormatConfig{Dir: dir, Cluster: 1, Node: 1}); err != nil {
			t.Fatal(err)
		}
		disk := powerloss.NewDisk(dir, 1)
		disk.WritesInAnyOrder()
		logger := slog.New(slog.NewTextHandler(io.Discard, nil))
		s, _, err := openMetaStore(dir, vsr.Identity{Cluster: 1, Node: 1}, 64<<20, logger)
		if err != nil {
			t.Fatal(err)
		}
		_, rg, _ := storeRing(t, 64)
		s.attach(disk.Wrap(rg))
		fx1, h1 := opPersistBody(2, 1, 0, registerOp(1))
		s.submit(buildPersist(nil, &fx1, false))
		settle(t, rg)
		disk.Inject(powerloss.Fault{Op: ring.OpWrite, Path: metaLogFile, Nth: 3, Errno: unix.EIO})
		fx2, _ := opPersistBody(3, 2, h1, bytes.Repeat([]byte{7}, vsr.InlineMax+1000))
		p := buildPersist(nil, &fx2, false)
		if !p.split {
			t.Fatal("a 9 KB persist is not split")
		}
		if broken {
			p.split = false // the log append shares the copies' fdatasync, yet they carry no records
		}
		s.submit(p)
		settle(t, rg)
		if done, err := s.durable(); done != 2 || err == nil {
			t.Fatalf("durable %d %v, want persist 3 failed", done, err)
		}
		s.close()
		caught := false
		for seed := uint64(0); seed < 200 && !caught; seed++ {
			dst := filepath.Join(t.TempDir(), "state")
			rep, err := disk.PowerLossCopy(dst, seed)
			if err != nil {
				t.Fatal(err)
			}
			s2, d, err := openMetaStore(dst, vsr.Identity{Cluster: 1, Node: 1}, 64<<20, logger)
			if err != nil {
				t.Fatal(err)
			}
			s2.close()
			if d.Recovering || d.Superblock.Op < 1 {
				if !broken {
					t.Fatalf("%s: reopened %+v recovering %v (%v), want op 1 or 2", rep, d.Superblock, d.Recovering,
						d.Cause)
				}
				caught = true
			}
		}
		if broken && !caught {
			t.Fatal("the split persist without its first fdatasync survived 200 power-loss states")
		}
	}
}

// opPersistBody is persist seq of op `op` of view 1 after parent, with body: its effects and the
// entry's checksum.
func opPersistBody(seq, op, parent uint64, body []byte) (vsr.Effects, uint64) {
	e := wire.VSREntry{Op: op, View: 1, Client: 1, Request: op, Parent: parent, Body: body}
	e.Checksum = vsr.EntryChecksum(&e)
	sb := vsr.Superblock{Sequence: seq, View: 1, LogView: 1, Op: op, Head: e.Checksum,
		Identity: vsr.Identity{Cluster: 1, Node: 1}}
	return vsr.Effects{PersistID: seq, Entries: []wire.VSREntry{e}, Superblock: sb}, e.Checksum
}
