package localcluster

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/config"
)

// binary is cmd/ringstream, built once by TestMain for the tests that run real nodes.
var binary string

func TestMain(m *testing.M) { os.Exit(RunWithBinary(m, &binary)) }

// gone is whether no process with pid exists any more (reaped: not even a zombie).
func gone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// startReal starts a 3-node cluster of real processes under ctx.
func startReal(t *testing.T, ctx context.Context) *Cluster {
	t.Helper()
	c, err := Start(ctx, Options{Binary: binary, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestContextEndKillsEveryNode: when the context given to Start ends, every node's process is killed
// and reaped, a SIGSTOPped one included: no process outlives the cluster.
func TestContextEndKillsEveryNode(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	c := startReal(t, ctx)
	var pids []int
	for _, n := range c.Nodes() {
		if !n.Running() || n.PID() == 0 {
			t.Fatalf("node %d not running after Start", n.ID)
		}
		pids = append(pids, n.PID())
	}
	if err := c.Pause(2); err != nil {
		t.Fatal(err)
	}
	cancel()
	deadline := time.After(20 * time.Second)
	for _, n := range c.Nodes() {
		select {
		case <-n.current().done: // Close, run by the context's end, reaps every process
		case <-deadline:
			t.Fatalf("node %d still running 20 s after the cluster's context ended", n.ID)
		}
	}
	for _, pid := range pids {
		if !gone(pid) {
			t.Errorf("process %d outlived the cluster's context", pid)
		}
	}
}

// TestTerminateExitsCleanlyAndRestartServesAgain: SIGTERM ends a node with exit status 0, a restart
// is ready again on the same addresses, and SIGKILL of the restarted node is seen as its exit.
func TestTerminateExitsCleanlyAndRestartServesAgain(t *testing.T) {
	c := startReal(t, t.Context())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := c.Terminate(ctx, 3); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if c.Node(3).Running() {
		t.Fatal("node 3 still running after its SIGTERM returned")
	}
	if err := c.Kill(3); !errors.Is(err, ErrState) {
		t.Fatalf("kill of a stopped node: %v, want ErrState", err)
	}
	if err := c.Restart(ctx, 3); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if err := c.Restart(ctx, 3); !errors.Is(err, ErrState) {
		t.Fatalf("restart of a running node: %v, want ErrState", err)
	}
	if got := c.Node(3).Starts(); got != 2 {
		t.Fatalf("node 3 started %d times, want 2", got)
	}
	pid := c.Node(3).PID()
	if err := c.Kill(3); err != nil {
		t.Fatal(err)
	}
	if !gone(pid) || c.Node(3).Running() {
		t.Fatalf("node 3 (pid %d) survived SIGKILL", pid)
	}
	log := c.Node(3).LogTail()
	if strings.Count(log, "localcluster: starting node 3") != 2 {
		t.Fatalf("serve.log does not hold both runs:\n%s", log)
	}
}

// TestNodeThatCannotStartFailsStartWithItsLog: a node that exits at boot (its data directory cannot
// be made) fails Start with the node's own error from its log, and no process of the cluster is left.
func TestNodeThatCannotStartFailsStartWithItsLog(t *testing.T) {
	bad := func(id uint16, f *config.File) {
		if id == 2 {
			f.Node.DataDir = "/proc/ringstream-cannot-be-here"
		}
	}
	_, err := Start(t.Context(), Options{Binary: binary, Dir: t.TempDir(), Configure: bad})
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "node 2 exited before it was ready") ||
		!strings.Contains(err.Error(), "ringstream-cannot-be-here") {
		t.Fatalf("start with a node that cannot boot: %v", err)
	}
	if pids := running(binary); len(pids) > 0 {
		t.Fatalf("processes of %s left after a failed Start: %v", binary, pids)
	}
}

// running is the pids of processes whose executable is path.
func running(path string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == path {
			out = append(out, pid)
		}
	}
	return out
}

// TestRestartWaitsForTheNodesPorts: a restart waits until the node's ports can be bound again (a
// SIGKILLed node's io_uring can keep its listening socket for a while), and names the port still held
// when they never free up.
func TestRestartWaitsForTheNodesPorts(t *testing.T) {
	c := startReal(t, t.Context())
	if err := c.Kill(2); err != nil {
		t.Fatal(err)
	}
	if err := c.Node(2).waitPortsFree(t.Context()); err != nil {
		t.Fatal(err)
	}
	held, err := net.Listen("tcp", c.Node(2).ClientAddr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	err = c.Restart(ctx, 2)
	cancel()
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), c.Node(2).ClientAddr+" still in use") {
		held.Close()
		t.Fatalf("restart with the client port held: %v", err)
	}
	if c.Node(2).Starts() != 1 {
		t.Fatalf("node 2 was started with its port held (%d starts)", c.Node(2).Starts())
	}
	time.AfterFunc(200*time.Millisecond, func() { held.Close() })
	if err := c.Restart(t.Context(), 2); err != nil {
		t.Fatalf("restart once the port is free: %v", err)
	}
}
