package segment

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/powerloss"
)

var (
	plSeeds = flag.Int("powerloss.seeds", 1000, "seeds of the power-loss test")
	plSeed  = flag.Uint64("powerloss.seed", 0, "run the power-loss test with this one seed")
	plFirst = flag.Uint64("powerloss.first", 1, "first seed of the power-loss test (runs in chunks)")
)

const plRecSize = 40

// plRun is one power-loss run: a copy worked on through Jobs on a ring wrapped by the power-loss
// model, the power cut at a random loop turn, the copy reopened on a fresh ring and checked.
type plRun struct {
	seed   uint64
	rng    *rand.Rand
	dir    string
	cfg    Config
	broken func(c *Copy)

	lp   *loop
	c    *Copy
	done []Result
	// floor is the record tail the reopened copy must reach: the highest end acknowledged
	// durable, lowered to a cut's offset once the cut starts.
	floor      uint64
	cutting    bool
	bases      []uint64 // base offsets of acknowledged batches, for cut points
	nextCursor int
	off        bool // the power is cut: events of the old copy are ignored
	failed     error

	cuts     bool // this seed cuts (half do not, and check cursors exactly)
	deletes  bool // this seed may delete the copy (a quarter do)
	deleting bool // a delete started in this life: the copy is whole (every promise holds) or gone
	stats    *plStats
	sealed   uint64        // highest fence epoch a SealDone reported durable
	epochs   []plEpoch     // log epoch entries started, in order
	cursors  []plCursorEvt // cursor events committed, by token
}

// plStats counts the rare operations that succeeded over a test's seeds, by Op, and the parks.
type plStats struct {
	ops   [OpDelete + 1]int
	parks int
}

type plEpoch struct {
	e     EpochEntry
	acked bool
}

type plCursorEvt struct {
	name  string
	off   uint64
	acked bool
}

// plEvents feeds a plRun.
type plEvents struct{ r *plRun }

func (e plEvents) AppendDone(log LogKind, token uint64, end uint64, err error) {
	if e.r.off || e.r.deleting || err != nil {
		return
	}
	if log == CursorLog {
		e.r.cursors[token].acked = true
		return
	}
	if !e.r.cutting {
		e.r.floor = max(e.r.floor, end)
	}
}
func (e plEvents) ReadDone(LogKind, uint64, []byte, error) {}
func (e plEvents) SealDone(_ uint64, s Seal, err error) {
	if !e.r.off && !e.r.deleting && err == nil {
		e.r.sealed = max(e.r.sealed, s.Epoch)
	}
}
func (e plEvents) Done(res Result) {
	run := e.r
	if run.off {
		return
	}
	run.done = append(run.done, res)
	if res.Err == nil && run.stats != nil {
		run.stats.ops[res.Op]++
	}
	switch {
	case res.Op == OpOpen && res.Err != nil:
		run.failed = fmt.Errorf("open: %w", res.Err)
	case res.Op == OpOpen:
		run.floor = run.c.records.durable // what the previous lives left is durable now
		if run.broken != nil {
			run.broken(run.c)
		}
	case res.Op == OpAppendEpoch && res.Err == nil && !run.deleting:
		run.epochs[res.Tag].acked = true
	case res.Op == OpCut:
		run.cutting = false
		if res.Err == nil {
			run.floor = max(run.floor, run.c.records.durable)
		}
	}
}

func plConfig(rng *rand.Rand) Config {
	cfg := Config{SegmentBytes: 4 << 10, IndexIntervalBytes: 512, CursorSyncBytes: 256, Logger: quietLogger()}
	cfg.PrewriteBytes = []int{-1, 4 << 10}[rng.IntN(2)]
	cfg.RecycleSegments = []int{-1, 2}[rng.IntN(2)]
	return cfg
}

// powerLossRun runs one seed and returns the first broken promise, or nil.
func powerLossRun(t testing.TB, root string, seed uint64, broken func(c *Copy), stats *plStats) error {
	rng := rand.New(rand.NewPCG(seed, 0x5e9))
	run := &plRun{seed: seed, rng: rng, dir: filepath.Join(root, "copy"), cfg: plConfig(rng), broken: broken, stats: stats}
	run.cuts = rng.IntN(2) == 0
	run.deletes = rng.IntN(4) == 0
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	defer closeFilesUnder(root) // what abandoned jobs held: a crashed process holds nothing
	disk := powerloss.NewDisk(root, seed)
	r, err := ring.New(ring.Config{Backend: ring.BackendFallback, Entries: 64, Logger: quietLogger()})
	if err != nil {
		return err
	}
	run.lp = newLoop(t, disk.Wrap(r))
	// A few lives: each ends in a power cut at a random turn, and the next reopens what is left.
	for life := 0; life < 3 && run.failed == nil; life++ {
		run.live(rng.IntN(150) + 1)
		if err := run.powerCut(disk, r); err != nil {
			return err
		}
		if run.failed != nil {
			break
		}
		if r, err = ring.New(ring.Config{Backend: ring.BackendFallback, Entries: 64, Logger: quietLogger()}); err != nil {
			return err
		}
		run.lp = newLoop(t, disk.Wrap(r))
		run.floor, run.cutting, run.bases, run.done, run.off = 0, false, run.bases[:0], run.done[:0], false
		run.deleting = false
	}
	_ = r.Close()
	closeFilesRaw(run.c)
	return run.failed
}

// powerCut ends a life: the power goes (the completions already made were seen, nothing queued is
// submitted), the model draws what survives, and the copy is reopened and checked.
func (run *plRun) powerCut(disk *powerloss.Disk, r ring.Ring) error {
	for r.Dispatch() > 0 {
	}
	run.off = true
	run.lp.js.Abandon() // what it queues is never submitted
	_ = r.Close()       // operations still queued never reach the files
	closeFilesRaw(run.c)
	rep, err := disk.PowerLoss()
	if err != nil || run.failed != nil {
		return err
	}
	if err := run.check(disk); err != nil {
		return fmt.Errorf("after powerloss seed=%d loss=%d (dirs keep a subset %v, %d unsynced, %d dropped, %d torn): %w",
			rep.Seed, rep.Loss, rep.DirSubset, rep.Unsynced, len(rep.Dropped), len(rep.Torn), err)
	}
	return nil
}

// closeFilesUnder closes every descriptor of this process open on a file under root.
func closeFilesUnder(root string) {
	list, _ := os.ReadDir("/proc/self/fd")
	for _, e := range list {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(p, root+"/") {
			_ = unix.Close(fd)
		}
	}
}

// live opens the copy and works on it for turns loop turns.
func (run *plRun) live(turns int) {
	c, err := Open(run.lp.js, run.lp.g, run.dir, run.cfg, plEvents{run}, 0)
	if err != nil {
		run.failed = err
		return
	}
	run.c = c
	for i := 0; i < turns && run.failed == nil; i++ {
		if c.ready && !c.closed {
			run.act()
			// A host parks copies it finds idle; the next append, seal or rare operation reopens.
			if run.rng.IntN(3) == 0 && !c.Parked() && c.Park() && run.stats != nil {
				run.stats.parks++
			}
		}
		run.lp.turn()
	}
}

// closeFilesRaw closes every descriptor of a copy whose ring is gone, with plain syscalls.
func closeFilesRaw(c *Copy) {
	if c == nil {
		return
	}
	for _, l := range []*Log{c.records, c.cursors} {
		if l == nil {
			continue
		}
		for _, s := range l.segs {
			if s.fd >= 0 {
				_ = unix.Close(s.fd)
			}
		}
		if l.dirfd >= 0 {
			_ = unix.Close(l.dirfd)
		}
	}
	if c.seal.active && c.seal.fenceFd >= 0 {
		_ = unix.Close(c.seal.fenceFd)
	}
}

// act does one random thing to the copy; refusals (busy, back-pressure) are part of the game.
func (run *plRun) act() {
	c, rng := run.c, run.rng
	switch k := rng.IntN(100); {
	case k < 60:
		for n := rng.IntN(4) + 1; n > 0; n-- {
			base := c.records.next
			recs := rng.IntN(3) + 1
			h := BatchHeader{RecordCount: uint32(recs), Epoch: 1, MaxTimestamp: int64(base)}
			if _, err := c.Append(0, &h, recordPayload(nil, base, recs, plRecSize)); err != nil {
				return
			}
			run.bases = append(run.bases, base)
		}
	case k < 72:
		// A consumer commits offsets it has read: at or below the durable tail.
		for n := rng.IntN(8) + 1; n > 0; n-- {
			run.nextCursor++
			ev := plCursorEvt{name: fmt.Sprintf("c%d", run.nextCursor%5), off: uint64(rng.IntN(int(c.records.durable) + 1))}
			if _, err := c.CommitCursor(uint64(len(run.cursors)), 1, ev.name, ev.off); err != nil {
				break
			}
			run.cursors = append(run.cursors, ev)
		}
	case k < 78:
		c.SyncCursors()
	case k < 83:
		_ = c.WriteCursorSnapshot(0)
	case k < 88:
		_ = c.Retain(0, 0, 8<<10, 0)
	case k < 91:
		e := EpochEntry{Epoch: uint64(len(run.epochs) + 1), RecordStart: c.records.next}
		if c.AppendEpoch(uint64(len(run.epochs)), e) == nil {
			run.epochs = append(run.epochs, plEpoch{e: e})
		}
	case k < 94:
		if run.cuts {
			run.cut()
		}
	case k < 97:
		_ = c.Seal(0, 1)
	case k < 98:
		if run.deletes && c.Delete(0) == nil {
			run.deleting = true
		}
	}
}

// forget drops every promise about the copy: a delete started and the copy's directory is gone.
func (run *plRun) forget() {
	run.floor, run.sealed, run.bases = 0, 0, nil
	for i := range run.epochs {
		run.epochs[i].acked = false
	}
	for i := range run.cursors {
		run.cursors[i].acked = false
	}
}

// cut starts a cut at a random acknowledged batch boundary at or above the head.
func (run *plRun) cut() {
	c := run.c
	var cands []uint64
	for _, b := range run.bases {
		if b >= c.records.Head() && b < c.records.durable {
			cands = append(cands, b)
		}
	}
	if len(cands) == 0 {
		return
	}
	run.cutAt(cands[run.rng.IntN(len(cands))])
}

// cutAt starts a cut at off and lowers the promises to it.
func (run *plRun) cutAt(off uint64) {
	if err := run.c.Cut(0, off, run.c.cursors.durable); err != nil {
		return
	}
	run.cutting = true
	run.floor = min(run.floor, off)
	for i := range run.epochs {
		if run.epochs[i].e.RecordStart > off {
			run.epochs[i].acked = false // the cut may drop it
		}
	}
	k := 0
	for _, b := range run.bases {
		if b < off {
			run.bases[k] = b
			k++
		}
	}
	run.bases = run.bases[:k]
}

// check reopens the copy from what the power cut left and compares it with what was promised.
// Its ring is wrapped too, so what the reopen syncs is on the model's record for the next life.
func (run *plRun) check(disk *powerloss.Disk) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	plain, err := ring.New(ring.Config{Backend: ring.BackendFallback, Entries: 64, Logger: quietLogger()})
	if err != nil {
		return err
	}
	defer plain.Close()
	r := disk.Wrap(plain)
	if _, err := os.Stat(run.dir); run.deleting && errors.Is(err, os.ErrNotExist) {
		run.forget() // the delete's rename survived: nothing is left to promise
	}
	rec := &recorder{}
	c, _, err := OpenSync(r, run.dir, run.cfg, rec)
	if errors.Is(err, ErrBusy) {
		return err
	}
	if err != nil {
		return fmt.Errorf("reopen after power loss: %w", err)
	}
	defer c.CloseSync()
	tail := c.records.durable
	if tail < run.floor {
		return fmt.Errorf("record tail %d after power loss, %d were acknowledged durable", tail, run.floor)
	}
	if n, err := readAllRecords(r, c, rec); err != nil {
		return err
	} else if n != tail-c.records.Head() {
		return fmt.Errorf("read %d records, head %d tail %d", n, c.records.Head(), tail)
	}
	for name, off := range c.cursorMap {
		if *off > tail {
			return fmt.Errorf("cursor %s at %d past the record tail %d", name, *off, tail)
		}
	}
	if err := run.checkCursors(c); err != nil {
		return err
	}
	if f := c.FenceEpoch(); f < run.sealed {
		return fmt.Errorf("fence %d after power loss, a seal at %d was reported durable", f, run.sealed)
	}
	have := c.Epochs()
	for _, pe := range run.epochs {
		if pe.acked && !slices.Contains(have, pe.e) {
			return fmt.Errorf("log epoch %+v reported durable is gone (have %+v)", pe.e, have)
		}
	}
	if _, _, err := c.VerifySync(); err != nil {
		return fmt.Errorf("verify after power loss: %w", err)
	}
	return nil
}

// checkCursors: in a seed without cuts, each consumer's cursor is the value of its last event
// acknowledged durable, or of one committed after it (which may have reached the disk too).
func (run *plRun) checkCursors(c *Copy) error {
	if run.cuts {
		return nil
	}
	last := map[string]int{}
	for i, ev := range run.cursors {
		if ev.acked {
			last[ev.name] = i
		}
	}
	for name, from := range last {
		got, ok := c.Cursor(name)
		if !ok {
			return fmt.Errorf("cursor %s lost (last acknowledged at %d)", name, run.cursors[from].off)
		}
		found := false
		for _, ev := range run.cursors[from:] {
			found = found || (ev.name == name && ev.off == got)
		}
		if !found {
			return fmt.Errorf("cursor %s at %d, last acknowledged %d", name, got, run.cursors[from].off)
		}
	}
	return nil
}

// readAllRecords reads the record log from head to tail and checks every payload.
func readAllRecords(r ring.Ring, c *Copy, rec *recorder) (uint64, error) {
	l := c.Records()
	buf := make([]byte, 64<<10)
	next := l.Head()
	var want []byte
	for next < l.DurableTail() {
		rec.reads = rec.reads[:0]
		if err := l.Read(1, next, buf); err != nil {
			return 0, fmt.Errorf("read at %d: %w", next, err)
		}
		for len(rec.reads) == 0 {
			if err := r.Wait(1); err != nil {
				return 0, err
			}
			r.Dispatch()
		}
		if err := rec.reads[0].err; err != nil {
			return 0, fmt.Errorf("read at %d: %w", next, err)
		}
		it := NewBatchIter(rec.reads[0].data, next)
		start := next
		for {
			h, payload, ok := it.Next()
			if !ok {
				break
			}
			if h.BaseOffset != next {
				return 0, fmt.Errorf("batch base %d, want %d", h.BaseOffset, next)
			}
			want = recordPayload(want, h.BaseOffset, int(h.RecordCount), plRecSize)
			if string(payload) != string(want) {
				return 0, fmt.Errorf("batch at %d holds other bytes than were appended", h.BaseOffset)
			}
			next = h.NextOffset()
		}
		if err := it.Err(); err != nil {
			return 0, fmt.Errorf("read at %d: %w", start, err)
		}
		if next == start {
			return 0, fmt.Errorf("read at %d returned no whole batch", start)
		}
	}
	return next - l.Head(), nil
}

// plRoot is where power-loss runs keep their files: tmpfs when there is one (the model, not the
// disk, decides what survives, so real fsyncs would only cost time).
func plRoot(t *testing.T) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "segment-powerloss-")
		if err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

func plSeedList() []uint64 {
	if *plSeed != 0 {
		return []uint64{*plSeed}
	}
	seeds := make([]uint64, *plSeeds)
	for i := range seeds {
		seeds[i] = *plFirst + uint64(i)
	}
	return seeds
}

// TestPowerLoss_AcknowledgedRecordsSurvive: over many seeds, a copy appends (group commits,
// rolls, recycling or prewriting), commits cursors, snapshots, retains, cuts, records epochs,
// seals and is deleted through Jobs; the power is cut at a random turn (what was not synced is
// lost, or torn), and the copy reopened: every record acknowledged durable is there and reads back
// intact, nothing past a torn batch is served, cursors are clamped, verify passes. A copy whose
// delete started comes back whole (every promise holds) or not at all.
func TestPowerLoss_AcknowledgedRecordsSurvive(t *testing.T) {
	lockThread(t)
	root := plRoot(t)
	var stats plStats
	for _, seed := range plSeedList() {
		dir := filepath.Join(root, fmt.Sprint(seed))
		if err := powerLossRun(t, dir, seed, nil, &stats); err != nil {
			t.Fatalf("seed %d: %v\nrepro: go test ./segment -run TestPowerLoss_AcknowledgedRecordsSurvive -powerloss.seed=%d", seed, err, seed)
		}
		_ = os.RemoveAll(dir)
	}
	t.Logf("%d seeds; rare operations done: open %d, cut %d, epoch %d, retain %d, snapshot %d, close %d, delete %d; parks %d",
		len(plSeedList()), stats.ops[OpOpen], stats.ops[OpCut], stats.ops[OpAppendEpoch], stats.ops[OpRetain],
		stats.ops[OpCursorSnapshot], stats.ops[OpClose], stats.ops[OpDelete], stats.parks)
	if stats.parks == 0 {
		t.Error("no copy parked in any seed: the parked state went untested")
	}
}

// TestPowerLoss_CatchesBrokenVariants: each broken variant (a durability step removed) fails the
// power-loss run within the seeds.
func TestPowerLoss_CatchesBrokenVariants(t *testing.T) {
	lockThread(t)
	root := plRoot(t)
	for _, v := range []struct {
		name   string
		break_ func(c *Copy)
	}{
		{"group commit without fdatasync", (*Copy).BreakGroupCommitSync},
		{"roll without directory fsync", (*Copy).BreakRollDirSync},
	} {
		caught := uint64(0)
		for _, seed := range plSeedList() {
			dir := filepath.Join(root, fmt.Sprint(seed))
			err := powerLossRun(t, dir, seed, v.break_, nil)
			_ = os.RemoveAll(dir)
			if err != nil {
				caught = seed
				t.Logf("%s: caught by seed %d: %v", v.name, seed, err)
				break
			}
		}
		if caught == 0 {
			t.Errorf("%s: not caught in %d seeds", v.name, len(plSeedList()))
		}
	}
}
