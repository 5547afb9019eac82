package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringstream/ringstream/bench"
	"github.com/ringstream/ringstream/engine/adminapi"
	"github.com/ringstream/ringstream/localcluster"
)

// The disk-full tests (issue 22, findings 1, 2 and 4): every node's data directory is a tmpfs of its
// own; under load one node's is shrunk to what it holds plus a little, so that its next segment
// preallocation or group commit meets ENOSPC, and later grown again. They need root (mount); without
// it they skip, except where CI=true or RINGSTREAM_REQUIRE_ROOT=1 (or RINGSTREAM_REQUIRE_NETNS=1, the
// partition tests' switch): there they fail.

const (
	tmpfsBytes     = 512 << 20 // every node's data directory before the shrink, and after the heal
	tmpfsHeadroom  = 2 << 20   // what a shrunk file system has left
	diskPoll       = 20 * time.Millisecond
	livenessMs     = 3000 // node_liveness_timeout of the local cluster (engine/config's default)
	diskFullRateRS = 4000 // records per second of the load: about 4 MB/s per copy into tmpfs
)

func requireRoot() bool {
	return os.Getenv("CI") == "true" || os.Getenv("RINGSTREAM_REQUIRE_ROOT") == "1" ||
		os.Getenv("RINGSTREAM_REQUIRE_NETNS") == "1"
}

// diskLab mounts a tmpfs on each node's data directory before the cluster starts, and shrinks and
// grows one of them on demand.
type diskLab struct {
	t    *testing.T
	dirs map[uint16]string
	hc   *http.Client
}

// newDiskLab skips the test without root (fails it where requireRoot holds) and sets cfg.Launch to
// mount the tmpfs; t.Cleanup unmounts them once the cluster is closed.
func newDiskLab(t *testing.T, cfg *bench.Config) *diskLab {
	t.Helper()
	if os.Geteuid() != 0 {
		msg := fmt.Sprintf("disk-full test: mounting a tmpfs needs root (euid %d)", os.Geteuid())
		if requireRoot() {
			t.Fatalf("%s (CI=true or RINGSTREAM_REQUIRE_ROOT=1: this test must run)", msg)
		}
		t.Skipf("%s; set RINGSTREAM_REQUIRE_ROOT=1 to make this a failure", msg)
	}
	l := &diskLab{t: t, dirs: map[uint16]string{}, hc: &http.Client{Timeout: time.Second}}
	for id := uint16(1); id <= uint16(cfg.Nodes); id++ {
		// localcluster's layout: <dir>/node<id>/data (localcluster.Node.DataDir).
		dir := filepath.Join(cfg.Dir, "node"+strconv.Itoa(int(id)), "data")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.Itoa(tmpfsBytes), "tmpfs",
			dir).CombinedOutput(); err != nil {
			msg := fmt.Sprintf("disk-full test: mount -t tmpfs on %s: %v: %s", dir, err, strings.TrimSpace(string(out)))
			if requireRoot() {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		t.Cleanup(func() {
			if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v: %s", dir, err, out)
			}
		})
		l.dirs[id] = dir
	}
	return l
}

// used is how many bytes node id's file system holds.
func (l *diskLab) used(id uint16) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(l.dirs[id], &st); err != nil {
		return 0, err
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, nil
}

// resize remounts node id's tmpfs at size bytes.
func (l *diskLab) resize(id uint16, size int64) error {
	out, err := exec.Command("mount", "-o", "remount,size="+strconv.FormatInt(size, 10), l.dirs[id]).CombinedOutput()
	if err != nil {
		return fmt.Errorf("remount %s at %d bytes: %w: %s", l.dirs[id], size, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// fill shrinks node id's file system to what it holds plus tmpfsHeadroom: the load fills it.
func (l *diskLab) fill(id uint16) error {
	used, err := l.used(id)
	if err != nil {
		return err
	}
	return l.resize(id, (used+tmpfsHeadroom+4095)&^4095)
}

// getJSON reads http://addr/path into v.
func (l *diskLab) getJSON(ctx context.Context, addr, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := l.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s%s: %s: %s", addr, path, resp.Status, body)
	}
	return json.Unmarshal(body, v)
}

func (l *diskLab) status(ctx context.Context, lc *localcluster.Cluster, id uint16) (adminapi.Status, error) {
	var st adminapi.Status
	err := l.getJSON(ctx, lc.Node(id).AdminAddr, "/v1/status", &st)
	return st, err
}

// attention is the metadata primary's attention list (any node that answers, active or not: the
// active one lists the entries).
func (l *diskLab) attention(ctx context.Context, lc *localcluster.Cluster) []adminapi.AttentionEntry {
	for _, n := range lc.Nodes() {
		var a adminapi.Attention
		if err := l.getJSON(ctx, n.AdminAddr, "/v1/attention", &a); err == nil && a.Active {
			return a.Entries
		}
	}
	return nil
}

// metaPrimary is the node of the metadata primary as the nodes' statuses say (0: none answered).
func (l *diskLab) metaPrimary(ctx context.Context, lc *localcluster.Cluster) uint16 {
	for _, n := range lc.Nodes() {
		if st, err := l.status(ctx, lc, n.ID); err == nil && st.Meta != nil && st.Meta.Primary {
			return n.ID
		}
	}
	return 0
}

// copyOn is node id's open copy of stream, as its status shows it.
func copyOn(st adminapi.Status, stream uint64) (adminapi.Copy, bool) {
	for _, c := range st.Copies {
		if c.Stream == stream && c.Open {
			return c, true
		}
	}
	return adminapi.Copy{}, false
}

// failureOf is the status's failure entry for stream.
func failureOf(st adminapi.Status, stream uint64) (adminapi.Failure, bool) {
	for _, f := range st.Failures {
		if f.Stream == stream {
			return f, true
		}
	}
	return adminapi.Failure{}, false
}

// poll calls cond every diskPoll until it holds, and reports whether it did within limit.
func poll(ctx context.Context, limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if cond() {
			return true
		}
		time.Sleep(diskPoll) // other processes' state: there is no event to wait on
	}
	return false
}

// diskFullTimes is what one disk-full run measured, from the shrink of the file system.
type diskFullTimes struct {
	node      uint16
	reportMs  float64 // to the copy's failure in its node's status and in the controller's attention
	failover  float64 // owner: from the old owner's last confirm to the first confirm at a newer epoch
	healMs    float64 // from the grow to the copy back in the assignment and caught up
	confirmed bool    // follower: the owner confirmed again after the report
}

// reportFailure waits until node id's status lists the failure of stream's copy with ENOSPC and the
// controller's attention names the copy with the cause; it returns when that was.
func (l *diskLab) reportFailure(ctx context.Context, c bench.Controls, stream uint64, id uint16) (time.Time, bool) {
	lc := c.Cluster()
	var status, attention bool
	ok := poll(ctx, 10*time.Second, func() bool {
		if !status {
			st, err := l.status(ctx, lc, id)
			f, failed := failureOf(st, stream)
			status = err == nil && failed && strings.Contains(f.Error, "no space")
		}
		if status && !attention {
			for _, e := range l.attention(ctx, lc) {
				if e.Kind == "copy_log_failed" && e.Stream == stream && e.Node == id && strings.Contains(e.Why, "no_space") {
					attention = true
				}
			}
		}
		return status && attention
	})
	if !ok {
		c.Fail("node %d's full disk: failure in its status %v, in attention %v, within 10 s", id, status, attention)
	}
	return time.Now(), ok
}

// healed grows node id's file system back and waits until its copy of stream is in the assignment
// again, open at its epoch, with no failure listed, and holds the owner's confirmed tail of the moment
// of the grow.
func (l *diskLab) healed(ctx context.Context, c bench.Controls, id uint16, limit time.Duration) (float64, bool) {
	lc := c.Cluster()
	v, err := c.Stream(ctx)
	if err != nil {
		c.Fail("heal: the stream: %v", err)
		return 0, false
	}
	ost, _ := l.status(ctx, lc, v.Owner)
	oc, _ := copyOn(ost, v.ID)
	target := oc.Confirmed
	if err := l.resize(id, tmpfsBytes); err != nil {
		c.Fail("heal: %v", err)
		return 0, false
	}
	grown := time.Now()
	c.Event("disk_grown", id, "")
	ok := poll(ctx, limit, func() bool {
		v, err := c.Stream(ctx)
		if err != nil || (v.Owner != id && !slices.Contains(v.Followers, id)) {
			return false
		}
		st, err := l.status(ctx, lc, id)
		cp, open := copyOn(st, v.ID)
		_, failed := failureOf(st, v.ID)
		return err == nil && open && !failed && cp.Epoch == v.Epoch && cp.Durable >= target
	})
	if !ok {
		c.Fail("node %d did not heal within %v of its disk growing: back in the assignment, open, caught up to %d",
			id, limit, target)
	}
	return ms(time.Since(grown)), ok
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// diskFullConfig is the bench of a disk-full test: 3 nodes, a stream of 3 copies on majority_durable,
// load at diskFullRateRS for d, the owner off the metadata primary.
func diskFullConfig(t *testing.T, d time.Duration) (bench.Config, *diskLab) {
	cfg := shortBench(t, d)
	cfg.Rate, cfg.OwnerOffMetaPrimary = diskFullRateRS, true
	lab := newDiskLab(t, &cfg)
	return cfg, lab
}

// TestDiskFull_Follower (findings 1 and 2): a follower's file system fills under load. The stream
// keeps confirming on the other two copies; the follower's status lists its copy's failure with
// ENOSPC, and the controller's attention names the copy and the cause; once the file system has room
// again the copy heals without a restart, is placed back in the assignment and catches up. Nothing
// confirmed is lost (the bench reads every record back).
func TestDiskFull_Follower(t *testing.T) {
	cfg, lab := diskFullConfig(t, 16*time.Second)
	var got diskFullTimes
	cfg.Script = func(ctx context.Context, c bench.Controls) {
		lc := c.Cluster()
		if !after(ctx, time.Now(), 1500*time.Millisecond) {
			return
		}
		v, err := c.Stream(ctx)
		if err != nil || len(v.Followers) != 2 {
			c.Fail("stream %+v has not 2 followers (%v)", v, err)
			return
		}
		follower := v.Followers[0]
		if follower == lab.metaPrimary(ctx, lc) {
			follower = v.Followers[1] // keep the controller's node's disk out of it
		}
		got.node = follower
		if err := lab.fill(follower); err != nil {
			c.Fail("fill: %v", err)
			return
		}
		shrunk := time.Now()
		c.Event("disk_filled", follower, "follower")
		at, ok := lab.reportFailure(ctx, c, v.ID, follower)
		if !ok {
			return
		}
		got.reportMs = ms(at.Sub(shrunk))
		t.Logf("follower node %d: failure in status and attention %.0f ms after the fill", follower, got.reportMs)
		var owner uint16
		var base uint64
		got.confirmed = poll(ctx, 3*time.Second, func() bool {
			w, err := c.Stream(ctx)
			if err != nil {
				return false
			}
			st, err := lab.status(ctx, lc, w.Owner)
			cp, open := copyOn(st, w.ID)
			if err != nil || !open || cp.Role != "owner" {
				return false
			}
			if owner != w.Owner {
				owner, base = w.Owner, cp.Confirmed
				return false
			}
			return cp.Confirmed > base
		})
		if !got.confirmed {
			c.Fail("the stream confirmed nothing in the 3 s after node %d's disk filled", follower)
			return
		}
		if got.healMs, ok = lab.healed(ctx, c, follower, 12*time.Second); ok {
			t.Logf("follower node %d: healed and caught up %.0f ms after its disk grew", follower, got.healMs)
		}
	}
	runBench(t, cfg)
	t.Logf("follower node %d: failure reported %.0f ms after the fill, healed and caught up %.0f ms after the grow",
		got.node, got.reportMs, got.healMs)
}

// TestDiskFull_Owner (finding 4): the owner's file system fills under load. The stream fails over
// within node_liveness_timeout + 500 ms of the owner's last confirm (the owner's node keeps
// heartbeating: only the flag in its heartbeat moves the stream); status and attention name the copy
// and the cause; once the file system has room again the old owner's copy heals without a restart and
// catches up as a follower. Later in the same run the new owner is SIGKILLed, for the gap of a process
// loss beside the gap of a full disk. Nothing confirmed is lost.
func TestDiskFull_Owner(t *testing.T) {
	cfg, lab := diskFullConfig(t, 22*time.Second)
	cfg.KillOwnerAt, cfg.RestartAfter = 17, 1.5
	var got diskFullTimes
	cfg.Script = func(ctx context.Context, c bench.Controls) {
		start := time.Now()
		lc := c.Cluster()
		if !after(ctx, start, 1500*time.Millisecond) {
			return
		}
		v, err := c.Stream(ctx)
		if err != nil || v.Owner == 0 {
			c.Fail("stream %+v has no owner (%v)", v, err)
			return
		}
		owner := v.Owner
		got.node = owner
		st, _ := lab.status(ctx, lc, owner)
		oc, _ := copyOn(st, v.ID)
		lastConfirm, lastTail := time.Now(), oc.Confirmed
		if err := lab.fill(owner); err != nil {
			c.Fail("fill: %v", err)
			return
		}
		shrunk := time.Now()
		c.Event("disk_filled", owner, "owner")
		// Until another owner confirms at a newer epoch, track the old owner's last confirm.
		var newOwner uint16
		var newBase uint64
		moved := poll(ctx, 10*time.Second, func() bool {
			if st, err := lab.status(ctx, lc, owner); err == nil {
				if cp, ok := copyOn(st, v.ID); ok && cp.Role == "owner" && cp.Confirmed > lastTail {
					lastConfirm, lastTail = time.Now(), cp.Confirmed
				}
			}
			w, err := c.Stream(ctx)
			if err != nil || w.Owner == owner || w.Epoch <= v.Epoch {
				return false
			}
			st, err := lab.status(ctx, lc, w.Owner)
			cp, open := copyOn(st, w.ID)
			if err != nil || !open || cp.Role != "owner" || cp.Epoch != w.Epoch {
				return false
			}
			if newOwner != w.Owner {
				newOwner, newBase = w.Owner, cp.Appended
				return false
			}
			return cp.Confirmed > newBase
		})
		if !moved {
			c.Fail("the stream did not fail over from node %d, whose disk is full, within 10 s", owner)
			return
		}
		got.failover = ms(time.Since(lastConfirm))
		t.Logf("owner node %d's disk full: failed over to node %d, %.0f ms from its last confirm to the first at "+
			"the new epoch (%.0f ms after the fill)", owner, newOwner, got.failover, ms(time.Since(shrunk)))
		if limit := float64(livenessMs + 500); got.failover > limit {
			c.Fail("failover from the full owner took %.0f ms, past node_liveness_timeout + 500 ms (%.0f ms)",
				got.failover, limit)
		}
		c.Event("failed_over", newOwner, "")
		at, ok := lab.reportFailure(ctx, c, v.ID, owner)
		if ok {
			got.reportMs = ms(at.Sub(shrunk))
			t.Logf("owner node %d: failure in status and attention %.0f ms after the fill", owner, got.reportMs)
		}
		left := time.Until(start.Add(time.Duration(cfg.KillOwnerAt*float64(time.Second)) - time.Second))
		if got.healMs, ok = lab.healed(ctx, c, owner, left); ok {
			t.Logf("owner node %d: healed and caught up %.0f ms after its disk grew", owner, got.healMs)
		}
	}
	rep := runBench(t, cfg)
	gap := "none"
	if rep.FailoverGapMs != nil {
		gap = fmt.Sprintf("%.0f ms", *rep.FailoverGapMs)
	}
	t.Logf("owner node %d: disk-full failover gap %.0f ms (last confirm of the old owner to the first at the new "+
		"epoch), failure reported %.0f ms after the fill, healed and caught up %.0f ms after the grow; SIGKILL "+
		"failover gap of the same run %s", got.node, got.failover, got.reportMs, got.healMs, gap)
}

// TestDiskFull_FollowerThenOwnerKill (finding 2): a follower's file system fills, then the owner is
// SIGKILLed and stays down. The failed follower said it cannot answer, so the controller took it out
// of the assignment and the recovery never waits for it: the stream fails over to the healthy
// follower alone within node_liveness_timeout + 500 ms (it was 11.6-18.4 s, waiting for "node 3
// (alive, not answering)"). Nothing confirmed is lost.
func TestDiskFull_FollowerThenOwnerKill(t *testing.T) {
	cfg, lab := diskFullConfig(t, 10*time.Second)
	cfg.KillOwnerAt, cfg.RestartAfter = 5, -1
	cfg.Script = func(ctx context.Context, c bench.Controls) {
		lc := c.Cluster()
		if !after(ctx, time.Now(), 1500*time.Millisecond) {
			return
		}
		v, err := c.Stream(ctx)
		if err != nil || len(v.Followers) != 2 {
			c.Fail("stream %+v has not 2 followers (%v)", v, err)
			return
		}
		follower := v.Followers[0]
		if follower == lab.metaPrimary(ctx, lc) {
			follower = v.Followers[1]
		}
		if err := lab.fill(follower); err != nil {
			c.Fail("fill: %v", err)
			return
		}
		shrunk := time.Now()
		c.Event("disk_filled", follower, "follower")
		if at, ok := lab.reportFailure(ctx, c, v.ID, follower); ok {
			t.Logf("follower node %d: failure in status and attention %.0f ms after the fill", follower, ms(at.Sub(shrunk)))
		}
	}
	rep := runBench(t, cfg)
	if rep.FailoverGapMs == nil {
		t.Fatal("no produce confirmed after the owner's SIGKILL")
	}
	t.Logf("owner SIGKILL with a failed follower: failover gap %.0f ms", *rep.FailoverGapMs)
	if limit := float64(livenessMs + 500); *rep.FailoverGapMs > limit {
		t.Fatalf("failover gap %.0f ms with a failed follower, past node_liveness_timeout + 500 ms (%.0f ms)",
			*rep.FailoverGapMs, limit)
	}
}
