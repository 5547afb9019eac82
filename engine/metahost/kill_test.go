package metahost

import (
	"bufio"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/heartbeat"
)

// The environment of the child process TestMetaGroup_PrimaryProcessKilled starts: the directory of
// node 1 and the addresses of nodes 2 and 3.
const (
	metaChildEnv   = "RINGSTREAM_META_CHILD_DIR"
	metaChildPeers = "RINGSTREAM_META_CHILD_PEERS"
)

// childNodeID is the node run in the child process: member 0, the primary of view 0.
const childNodeID = 1

// killClients is how many proposers the child runs at once, so that ops are in flight at the kill.
const killClients = 4

// TestMetaGroupChild is the child process of TestMetaGroup_PrimaryProcessKilled: node 1 of the
// three, primary of view 0. It proposes RegisterNode ops from killClients clients at once and prints
// one line per committed op ("committed <node id> <op>") until it is killed. It does nothing when run
// on its own.
func TestMetaGroupChild(t *testing.T) {
	dir := os.Getenv(metaChildEnv)
	if dir == "" {
		t.Skip("the child process of TestMetaGroup_PrimaryProcessKilled")
	}
	n := newMetaNode(t, childNodeID, dir, 2*time.Millisecond, netip.MustParseAddrPort("127.0.0.1:0"), metaNodeOpts{})
	fmt.Printf("addr %s\n", n.node.Addr())
	var peers []shard.Peer
	for i, a := range strings.Split(os.Getenv(metaChildPeers), ",") {
		peers = append(peers, shard.Peer{Node: uint16(i + 2), Addr: netip.MustParseAddrPort(a)})
	}
	if err := n.node.Start(peers); err != nil {
		t.Fatal(err)
	}
	var out sync.Mutex
	var wg sync.WaitGroup
	for c := 0; c < killClients; c++ {
		wg.Add(1)
		go func(client uint64) {
			defer wg.Done()
			for req := uint64(1); ; req++ {
				id := uint16(1000*client + req)
				res := <-n.group.Propose(client, req, meta.AppendOp(nil, meta.RegisterNode{Node: id,
					Address: "10.1.0.1:7000"}))
				if res.Err != nil {
					time.Sleep(time.Millisecond) // not primary yet: the same request again
					req--
					continue
				}
				out.Lock()
				fmt.Printf("committed %d %d\n", id, res.Op)
				out.Unlock()
			}
		}(uint64(c + 1))
	}
	wg.Wait()
}

// killGraceTicks is the survivors' eager-failover grace: 25 ticks of 2 ms. Their heartbeat timeout is
// 2,000 ticks (4 s), so a new primary within a second comes from the eager failover.
const killGraceTicks = 25

func killSurvivorOpts() metaNodeOpts {
	return metaNodeOpts{
		tune: func(c *Config) { c.EagerFailoverGraceTicks = killGraceTicks },
		schedule: heartbeat.Ticks{BroadcastIntervalTicks: 5, HeartbeatTimeoutTicks: 2000,
			IdleHeartbeatIntervalTicks: 10, IdleHeartbeatTimeoutTicks: 3000},
	}
}

// TestMetaGroup_PrimaryProcessKilled runs the metadata primary in a child process and kills it with
// SIGKILL while its clients have ops in flight (no Stop, no flush: its ring and sockets die with it).
// Every op the child saw committed must be on both survivors once they have elected a new primary,
// and the group keeps committing.
func TestMetaGroup_PrimaryProcessKilled(t *testing.T) {
	if os.Getenv(metaChildEnv) != "" {
		t.Skip("in the child")
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	for i, dir := range dirs {
		if err := Format(FormatConfig{Dir: dir, Cluster: 42, Node: uint16(i + 1), Replica: uint8(i)}); err != nil {
			t.Fatal(err)
		}
	}
	var survivors []*metaNode
	for i := 1; i < 3; i++ {
		survivors = append(survivors, newMetaNode(t, uint16(i+1), dirs[i], 2*time.Millisecond,
			netip.MustParseAddrPort("127.0.0.1:0"), killSurvivorOpts()))
	}
	t.Cleanup(func() {
		for _, n := range survivors {
			_ = n.node.Stop()
			n.group.Close()
		}
	})
	cmd, lines, childAddr := startMetaChild(t, dirs[0], survivors)
	for i, n := range survivors {
		other := survivors[1-i]
		peers := []shard.Peer{{Node: childNodeID, Addr: childAddr}, {Node: other.id, Addr: other.node.Addr()}}
		if err := n.node.Start(peers); err != nil {
			t.Fatal(err)
		}
	}
	committed := map[uint16]uint64{}
	var lastOp uint64
	readCommitted := func(until int) {
		for len(committed) < until && lines.Scan() {
			var id uint16
			var op uint64
			if _, err := fmt.Sscanf(lines.Text(), "committed %d %d", &id, &op); err == nil {
				committed[id], lastOp = op, max(lastOp, op)
			}
		}
	}
	readCommitted(60)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	readCommitted(math.MaxInt) // what the child printed before it died is committed too
	_ = cmd.Wait()
	alive := map[uint16]bool{2: true, 3: true}
	waitFor(t, "a new primary among the survivors", func() bool { return primaryOf(survivors, alive) != nil })
	t.Logf("SIGKILL to a new primary in normal status: %v with a grace of %d ticks of 2 ms (%d ops committed "+
		"by the child, last op %d)", time.Since(killed), killGraceTicks, len(committed), lastOp)
	for _, n := range survivors {
		t.Logf("node %d: %+v", n.id, n.group.Status())
	}
	if survivors[0].group.Status().EagerFailovers+survivors[1].group.Status().EagerFailovers == 0 {
		t.Fatal("no survivor started an eager failover: the view change waited for the heartbeat timeout")
	}
	last := commitOp(t, survivors, alive, 99, 1, registerOp(999)).Op
	if last <= lastOp {
		t.Fatalf("new op at %d, at or below the killed primary's committed op %d", last, lastOp)
	}
	waitFor(t, "both survivors at the new op", func() bool {
		return survivors[0].group.Status().Commit >= last && survivors[1].group.Status().Commit >= last
	})
	for _, n := range survivors {
		_ = n.node.Stop()
		st := n.group.State()
		for id := range committed {
			if _, ok := st.Node(id); !ok {
				t.Errorf("node %d: op %d (register node %d) committed on the killed primary is lost", n.id,
					committed[id], id)
			}
		}
	}
}

// startMetaChild starts TestMetaGroupChild in a child process on dir, peered with the survivors, and
// returns it, its output and the address it listens on.
func startMetaChild(t *testing.T, dir string, survivors []*metaNode) (*exec.Cmd, *bufio.Scanner, netip.AddrPort) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMetaGroupChild$", "-test.v")
	cmd.Env = append(os.Environ(), metaChildEnv+"="+dir,
		metaChildPeers+"="+survivors[0].node.Addr().String()+","+survivors[1].node.Addr().String())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	var childAddr netip.AddrPort
	for childAddr == (netip.AddrPort{}) && lines.Scan() {
		if a, ok := strings.CutPrefix(lines.Text(), "addr "); ok {
			childAddr = netip.MustParseAddrPort(a)
		}
	}
	if !childAddr.IsValid() {
		t.Fatal("the child never said its address")
	}
	return cmd, lines, childAddr
}
