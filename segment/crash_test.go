package segment

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/ring/ringtest"
)

const (
	crashDirEnv         = "SEGMENT_CRASH_DIR"
	crashBackendEnv     = "SEGMENT_CRASH_BACKEND"
	crashSeedEnv        = "SEGMENT_CRASH_SEED"
	crashPrewriteEnv    = "SEGMENT_CRASH_PREWRITE"
	crashRecSize        = 200
	crashRunsPerBackend = 30
)

// The crash test: a child process appends with group commit and prints each append's end offset
// once AppendDone says it is durable; the parent kills it with SIGKILL after a random number of
// lines, reopens the copy and checks that every offset reported durable is present and intact.
// The same directory carries over from run to run, so each open also recovers the previous runs.
func TestCrash_KilledWriterLosesNothingReportedDurable(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns child processes")
	}
	seed := rand.Uint64()
	if v := os.Getenv(crashSeedEnv); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	ringtest.ForEachBackend(t, func(t *testing.T, b ring.Backend) {
		dir := filepath.Join(t.TempDir(), "copy")
		for run := 0; run < crashRunsPerBackend; run++ {
			reported := crashRun(t, dir, b, rng.IntN(150)+1, rng.Uint64())
			crashCheck(t, dir, b, reported, run)
		}
	})
}

// crashRun starts the child, reads lines until it has seen lines of them, kills it, and returns
// the highest end offset it reported durable.
func crashRun(t *testing.T, dir string, b ring.Backend, lines int, seed uint64) uint64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrash_Child$", "-test.count=1")
	// Half the runs prewrite zeros ahead of the data (the default), half do not.
	prewrite := strconv.Itoa(8 << 10)
	if seed%2 == 0 {
		prewrite = "-1"
	}
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashBackendEnv+"="+string(b),
		crashSeedEnv+"="+strconv.FormatUint(seed, 10), crashPrewriteEnv+"="+prewrite)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var high uint64
	for n := 0; n < lines && sc.Scan(); n++ {
		v, err := strconv.ParseUint(sc.Text(), 10, 64)
		if err != nil {
			continue // the test framework's own output
		}
		high = max(high, v)
	}
	_ = cmd.Process.Kill() // SIGKILL
	_ = cmd.Wait()
	return high
}

// crashCheck reopens the copy and reads it all back.
func crashCheck(t *testing.T, dir string, b ring.Backend, reported uint64, run int) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	e := newEnv(t, ring.Config{Backend: b, Entries: 256})
	e.dir = dir
	e.cfg = crashConfig(8 << 10)
	c, rep, err := OpenSync(e.r, e.dir, e.cfg, e.ev)
	if err != nil {
		t.Fatalf("run %d: open after SIGKILL: %v", run, err)
	}
	if os.Getenv("SEGMENT_CRASH_VERBOSE") != "" {
		t.Logf("run %d: reported %d, report %+v", run, reported, rep.Records)
	}
	defer e.close(c)
	if tail := c.Records().DurableTail(); tail < reported {
		t.Fatalf("run %d: tail %d after reopen, the child reported %d durable", run, tail, reported)
	}
	if got := e.readAll(c, crashRecSize); got != c.Records().DurableTail() {
		t.Fatalf("run %d: read %d records, tail %d", run, got, c.Records().DurableTail())
	}
}

func crashConfig(prewrite int) Config {
	return Config{SegmentBytes: 16 << 10, IndexIntervalBytes: 1 << 10, PrewriteBytes: prewrite, Logger: quietLogger()}
}

// crashPrinter prints each durable end offset on stdout.
type crashPrinter struct{ w *bufio.Writer }

func (p *crashPrinter) AppendDone(_ LogKind, _ uint64, end uint64, err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "append failed:", err)
		os.Exit(3)
	}
	p.w.WriteString(strconv.FormatUint(end, 10))
	p.w.WriteByte('\n')
}
func (p *crashPrinter) ReadDone(LogKind, uint64, []byte, error) {}
func (p *crashPrinter) SealDone(uint64, Seal, error)            {}
func (p *crashPrinter) Done(Result)                             {}

// TestCrash_Child is the child's body; it does nothing unless the parent set its environment.
func TestCrash_Child(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("child of TestCrash_KilledWriterLosesNothingReportedDurable only")
	}
	seed, _ := strconv.ParseUint(os.Getenv(crashSeedEnv), 10, 64)
	rng := rand.New(rand.NewPCG(seed, 2))
	runtime.LockOSThread()
	r, err := ring.New(ring.Config{Backend: ring.Backend(os.Getenv(crashBackendEnv)), Logger: quietLogger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	p := &crashPrinter{w: bufio.NewWriter(os.Stdout)}
	prewrite, _ := strconv.Atoi(os.Getenv(crashPrewriteEnv))
	c, _, err := OpenSync(r, dir, crashConfig(prewrite), p)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	var buf []byte
	for {
		for i := rng.IntN(6); i >= 0; i-- {
			n := rng.IntN(8) + 1
			base := c.Records().NextOffset()
			buf = recordPayload(buf, base, n, crashRecSize)
			h := BatchHeader{RecordCount: uint32(n), Epoch: 1}
			if _, err := c.Append(base, &h, buf); err != nil {
				break
			}
		}
		c.Flush()
		if err := r.Wait(1); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		r.Dispatch()
		// Durable offsets go out only after the completions that made them durable.
		_ = p.w.Flush()
	}
}
