package partitiontest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// namePrefix starts every namespace and link the test makes; the creating process's id follows, so
// a later run can tell a crashed run's leftovers from a live run's.
const namePrefix = "rsp"

// staleName matches the test's namespaces and root-side links and captures the creator's pid.
var staleName = regexp.MustCompile(`^` + namePrefix + `([0-9]+)[a-z][0-9]*$`)

// lab is the test's network: a hub namespace holding a bridge, one namespace per node joined to it
// by a veth pair, and a veth pair from the root namespace (the test process) to the bridge, all in
// one private /24. The bridge lives in its own namespace so that the root namespace's firewall (a
// container runtime's FORWARD policy, br_netfilter) never sees the nodes' traffic.
type lab struct {
	t      *testing.T
	prefix string   // namePrefix and this process's pid
	subnet string   // the /24's first three octets, "10.213.N"
	nodes  []string // the node namespaces, node i+1 at index i
}

// requireNetns is whether a missing tool or privilege fails the test instead of skipping it (CI).
func requireNetns() bool {
	return os.Getenv("CI") == "true" || os.Getenv("RINGSTREAM_REQUIRE_NETNS") == "1"
}

// skipOrFail skips the test with the reason, or fails it where requireNetns holds.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if requireNetns() {
		t.Fatalf("%s (CI=true or RINGSTREAM_REQUIRE_NETNS=1: this test must run)", msg)
	}
	t.Skipf("%s; set RINGSTREAM_REQUIRE_NETNS=1 to make this a failure", msg)
}

// run runs a command and returns its combined output, or an error naming the command and quoting it.
func run(args ...string) (string, error) {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// newLab checks the tools and privileges, removes a crashed run's leftovers, and builds the network
// for n nodes; t.Cleanup tears it down, also when the test fails.
func newLab(t *testing.T, n int) *lab {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "partition test: network namespaces need root (euid %d)", os.Geteuid())
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			skipOrFail(t, "partition test: %s not found (install iproute2 and nftables): %v", tool, err)
		}
	}
	removeStale(t)
	pid := os.Getpid()
	l := &lab{t: t, prefix: namePrefix + strconv.Itoa(pid), subnet: fmt.Sprintf("10.213.%d", pid%250+1)}
	if _, err := run("ip", "netns", "add", l.hub()); err != nil {
		skipOrFail(t, "partition test: ip netns add fails here: %v", err)
	}
	t.Cleanup(l.teardown)
	for i := range n {
		l.nodes = append(l.nodes, fmt.Sprintf("%sn%d", l.prefix, i+1))
	}
	if err := l.build(); err != nil {
		t.Fatalf("partition test network: %v", err)
	}
	return l
}

func (l *lab) hub() string      { return l.prefix + "h" }
func (l *lab) rootLink() string { return l.prefix + "r" }

// ns is node id's namespace.
func (l *lab) ns(id uint16) string { return l.nodes[id-1] }

// host is node id's address (the root namespace's is .254).
func (l *lab) host(id uint16) string { return l.subnet + "." + strconv.Itoa(int(id)) }

// hosts is every node's address, node i+1 at index i (localcluster.Options.Hosts).
func (l *lab) hosts() []string {
	out := make([]string, len(l.nodes))
	for i := range l.nodes {
		out[i] = l.host(uint16(i + 1))
	}
	return out
}

// wrap runs a node's command line inside its namespace (localcluster.Options.Command).
func (l *lab) wrap(id uint16, argv []string) []string {
	return append([]string{"ip", "netns", "exec", l.ns(id)}, argv...)
}

// build makes the bridge, the root's link to it, and each node's namespace and link.
func (l *lab) build() error {
	hub := l.hub()
	steps := [][]string{
		{"ip", "-n", hub, "link", "set", "lo", "up"},
		{"ip", "-n", hub, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", hub, "link", "set", "br0", "up"},
		{"ip", "link", "add", l.rootLink(), "type", "veth", "peer", "name", "root0", "netns", hub},
		{"ip", "-n", hub, "link", "set", "root0", "master", "br0", "up"},
		{"ip", "addr", "add", l.subnet + ".254/24", "dev", l.rootLink()},
		{"ip", "link", "set", l.rootLink(), "up"},
	}
	for i, ns := range l.nodes {
		port := "node" + strconv.Itoa(i+1)
		steps = append(steps,
			[]string{"ip", "netns", "add", ns},
			[]string{"ip", "-n", ns, "link", "set", "lo", "up"},
			[]string{"ip", "-n", hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"ip", "-n", hub, "link", "set", port, "master", "br0", "up"},
			[]string{"ip", "-n", ns, "addr", "add", l.host(uint16(i+1)) + "/24", "dev", "eth0"},
			[]string{"ip", "-n", ns, "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if _, err := run(s...); err != nil {
			return err
		}
	}
	return nil
}

// teardown kills what still runs in the namespaces and deletes them (the veth pairs go with them).
func (l *lab) teardown() {
	for _, ns := range append([]string{l.hub()}, l.nodes...) {
		if err := deleteNamespace(ns); err != nil {
			l.t.Errorf("partition test cleanup: %v", err)
		}
	}
	run("ip", "link", "del", l.rootLink()) // gone with the hub already, normally
}

// deleteNamespace SIGKILLs every process in ns and deletes it; a namespace already gone is no error.
func deleteNamespace(ns string) error {
	if _, err := os.Stat("/run/netns/" + ns); os.IsNotExist(err) {
		return nil
	}
	if out, err := run("ip", "netns", "pids", ns); err == nil {
		for _, f := range strings.Fields(out) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				unix.Kill(pid, unix.SIGKILL)
			}
		}
	}
	_, err := run("ip", "netns", "del", ns)
	return err
}

// removeStale deletes namespaces and root links this test left behind in a run whose process is gone.
func removeStale(t *testing.T) {
	out, err := run("ip", "netns", "list")
	if err != nil {
		skipOrFail(t, "partition test: ip netns list fails here: %v", err)
	}
	for _, line := range strings.Split(out, "\n") {
		if name := firstField(line); deadCreator(name) {
			t.Logf("removing namespace %s left by a crashed run", name)
			if err := deleteNamespace(name); err != nil {
				t.Logf("stale namespace %s: %v", name, err)
			}
		}
	}
	links, _ := run("ip", "-o", "link", "show")
	for _, line := range strings.Split(links, "\n") {
		parts := strings.SplitN(line, ": ", 3)
		if len(parts) < 2 {
			continue
		}
		if name, _, _ := strings.Cut(parts[1], "@"); deadCreator(name) {
			t.Logf("removing link %s left by a crashed run", name)
			run("ip", "link", "del", name)
		}
	}
}

func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

// deadCreator is whether name is one of the test's and its creator process no longer exists.
func deadCreator(name string) bool {
	m := staleName.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	pid, err := strconv.Atoi(m[1])
	if err != nil || pid == os.Getpid() {
		return false
	}
	return unix.Kill(pid, 0) == unix.ESRCH
}

// cutRules drop every packet in and out of a namespace except on loopback (which also carries a
// namespace's traffic to its own addresses).
const cutRules = `table inet ringstream_partition {
	chain in {
		type filter hook input priority 0; policy drop;
		iif lo accept
	}
	chain out {
		type filter hook output priority 0; policy drop;
		oif lo accept
	}
}
`

// cut installs cutRules in node id's namespace.
func (l *lab) cut(id uint16) error {
	cmd := exec.Command("ip", "netns", "exec", l.ns(id), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(cutRules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %w: %s", l.ns(id), err, out)
	}
	return nil
}

// heal removes cutRules from node id's namespace.
func (l *lab) heal(id uint16) error {
	_, err := run("ip", "netns", "exec", l.ns(id), "nft", "delete", "table", "inet", "ringstream_partition")
	return err
}

// inNamespace runs f on an OS thread moved into network namespace ns, so that every socket f opens
// (a dial's socket is made on the calling thread) lives there. The thread goes back to its own
// namespace afterwards; if it cannot, it stays locked and the runtime discards it with the goroutine.
func inNamespace(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("this thread's namespace: %w", err)
			return
		}
		defer unix.Close(home)
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("namespace %s: %w", ns, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		err = f()
		if unix.Setns(home, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}
