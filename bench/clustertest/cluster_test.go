package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringstream/ringstream/bench"
	"github.com/ringstream/ringstream/engine/config"
)

// shortBench is a bench of a few seconds on 3 nodes with a durable stream and no faults.
func shortBench(t *testing.T, d time.Duration) bench.Config {
	cfg := bench.DefaultConfig()
	cfg.Binary, cfg.Dir = binary, t.TempDir()
	cfg.Producers, cfg.InFlight, cfg.Batch = 2, 2, 8
	cfg.Duration, cfg.Warmup = d, 0
	cfg.KillOwnerAt, cfg.RestartAfter = 0, -1
	return cfg
}

// runBench runs cfg and fails the test, with the report and the end of each node's log, unless the
// run passed: every confirmed record read back at its offset, none twice, every fault carried out.
func runBench(t *testing.T, cfg bench.Config) *bench.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rep, err := bench.Run(ctx, cfg, nil, nil)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, nodeLogs(cfg.Dir))
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Logf("bench report:\n%s", table.String())
	if !rep.OK() {
		t.Fatalf("bench failed: %s\nexamples: %v\n%s", strings.Join(rep.Failures, "; "), rep.Verification.Examples,
			nodeLogs(cfg.Dir))
	}
	if rep.Confirmed == 0 || rep.Missing != 0 || rep.Duplicated != 0 || rep.Misplaced != 0 {
		t.Fatalf("verification: %+v", rep.Verification)
	}
	return rep
}

// nodeLogs is the end of every node's serve.log under dir.
func nodeLogs(dir string) string {
	paths, _ := filepath.Glob(filepath.Join(dir, "node*", "serve.log"))
	var b strings.Builder
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "--- %s (last 3000 bytes)\n%s\n", p, data[max(len(data)-3000, 0):])
	}
	return b.String()
}

// after waits d from the script's start, or returns false when the load ended first.
func after(ctx context.Context, start time.Time, d time.Duration) bool {
	t := time.NewTimer(time.Until(start.Add(d)))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// TestOwnerKill_ConfirmedRecordsSurviveAndOldOwnerRejoins: under continuous produce to a stream of 3
// copies on majority_durable, the owner's process is SIGKILLed; the stream fails over by itself,
// every confirmed record is read back at exactly one offset, and the old owner, restarted, is a
// follower at the failover's epoch (no other recovery). This is also the CI run of `ringstream bench`.
func TestOwnerKill_ConfirmedRecordsSurviveAndOldOwnerRejoins(t *testing.T) {
	cfg := shortBench(t, 5*time.Second)
	cfg.KillOwnerAt, cfg.RestartAfter = 1.5, 1.5
	rep := runBench(t, cfg)
	if rep.FailoverGapMs == nil || rep.NewAssignmentMs == nil {
		t.Fatalf("no failover measured: gap %v, assignment %v", rep.FailoverGapMs, rep.NewAssignmentMs)
	}
	if rep.RejoinedWithoutRecovery == nil || !*rep.RejoinedWithoutRecovery {
		t.Fatalf("the restarted owner did not rejoin as a follower without another recovery: %v",
			rep.RejoinedWithoutRecovery)
	}
}

// TestOwnerOnMetadataPrimary_KillCostsAViewChangeToo: the owner's node also holds the metadata
// primary; its SIGKILL needs a view change before the stream can fail over.
func TestOwnerOnMetadataPrimary_KillCostsAViewChangeToo(t *testing.T) {
	cfg := shortBench(t, 6*time.Second)
	cfg.KillOwnerAt, cfg.RestartAfter, cfg.OwnerOnMetaPrimary = 1.5, 2, true
	rep := runBench(t, cfg)
	if rep.FailoverGapMs == nil {
		t.Fatal("no produce confirmed at a newer epoch after the kill")
	}
}

// TestFollowerKills_OneThenTheOther: SIGKILL a follower, restart it, then SIGKILL the other
// follower and restart it, under produce: the owner keeps a majority throughout and nothing
// confirmed is lost.
func TestFollowerKills_OneThenTheOther(t *testing.T) {
	cfg := shortBench(t, 6*time.Second)
	cfg.Script = func(ctx context.Context, c bench.Controls) {
		start := time.Now()
		v, err := c.Stream(ctx)
		if err != nil || len(v.Followers) != 2 {
			c.Fail("stream %+v has not 2 followers (%v)", v, err)
			return
		}
		lc := c.Cluster()
		for i, id := range v.Followers {
			if !after(ctx, start, time.Duration(1+2*i)*time.Second) {
				c.Fail("load ended before follower %d's kill", id)
				return
			}
			if err := lc.Kill(id); err != nil {
				c.Fail("kill follower %d: %v", id, err)
				return
			}
			c.Event(bench.EventKill, id, "follower")
			after(ctx, start, time.Duration(2+2*i)*time.Second)
			if err := lc.Restart(context.WithoutCancel(ctx), id); err != nil {
				c.Fail("restart follower %d: %v", id, err)
				return
			}
			c.Event(bench.EventRestart, id, "follower")
		}
	}
	runBench(t, cfg)
}

// TestRollingRestart_AllNodesUnderLoad: every node in turn gets SIGTERM (it must exit 0) and is
// started again, under produce.
func TestRollingRestart_AllNodesUnderLoad(t *testing.T) {
	cfg := shortBench(t, 9*time.Second)
	cfg.Script = func(ctx context.Context, c bench.Controls) {
		start := time.Now()
		lc := c.Cluster()
		for i, n := range lc.Nodes() {
			if !after(ctx, start, time.Duration(1+2*i)*time.Second) {
				c.Fail("load ended before node %d's restart", n.ID)
				return
			}
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
			err := lc.Terminate(stopCtx, n.ID)
			cancel()
			if err != nil {
				c.Fail("SIGTERM of node %d: %v", n.ID, err)
				return
			}
			c.Event("terminated", n.ID, "SIGTERM, exit 0")
			if err := lc.Restart(context.WithoutCancel(ctx), n.ID); err != nil {
				c.Fail("restart of node %d: %v", n.ID, err)
				return
			}
			c.Event(bench.EventRestart, n.ID, "")
		}
	}
	runBench(t, cfg)
}

// TestRestartWithAnotherShardCount: a node SIGKILLed under produce comes back with 2 shards
// instead of 1 (stream logs are not per shard) and the cluster keeps every confirmed record.
func TestRestartWithAnotherShardCount(t *testing.T) {
	cfg := shortBench(t, 5*time.Second)
	cfg.Script = func(ctx context.Context, c bench.Controls) {
		start := time.Now()
		v, err := c.Stream(ctx)
		if err != nil || len(v.Followers) == 0 {
			c.Fail("stream %+v has no follower (%v)", v, err)
			return
		}
		id, lc := v.Followers[0], c.Cluster()
		after(ctx, start, time.Second)
		if err := lc.Kill(id); err != nil {
			c.Fail("kill node %d: %v", id, err)
			return
		}
		c.Event(bench.EventKill, id, "follower")
		if err := lc.Reconfigure(id, func(f *config.File) { f.Shards.Count = 2 }); err != nil {
			c.Fail("reconfigure node %d: %v", id, err)
			return
		}
		if err := lc.Restart(context.WithoutCancel(ctx), id); err != nil {
			c.Fail("restart node %d with 2 shards: %v", id, err)
			return
		}
		c.Event(bench.EventRestart, id, "2 shards")
	}
	runBench(t, cfg)
}

// TestTraffic_IdleGroupsBatchTheirHeartbeats: `bench traffic` on a few idle groups reports the issue's
// keys from the nodes' metrics, and the batched Commit and reply frames are fewer than the entries
// they carry (the unbatched baseline sends one frame per entry).
func TestTraffic_IdleGroupsBatchTheirHeartbeats(t *testing.T) {
	tc := bench.DefaultTrafficConfig()
	tc.Binary, tc.Groups, tc.Window = binary, 20, 3*time.Second // settle: the default, past the 5 s to idle
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rep, err := bench.RunTraffic(ctx, tc, nil)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Logf("traffic:\n%s", table.String())
	if rep.CommitEntriesPer5s <= 0 || rep.ReplyEntriesPer5s <= 0 || rep.BytesPer5s <= 0 {
		t.Fatalf("no heartbeat traffic counted: %+v", rep.Frames)
	}
	if rep.CommitFramesPer5s >= rep.Unbatched.CommitFramesPer5s || rep.ReplyFramesPer5s >= rep.Unbatched.ReplyFramesPer5s {
		t.Fatalf("batched frames %v / %v not below the unbatched %v / %v", rep.CommitFramesPer5s, rep.ReplyFramesPer5s,
			rep.Unbatched.CommitFramesPer5s, rep.Unbatched.ReplyFramesPer5s)
	}
	if rep.GroupsIdle < float64(tc.Groups) {
		t.Fatalf("%v groups idle, want at least %d", rep.GroupsIdle, tc.Groups)
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"commit_frames_per_5s", "reply_frames_per_5s", "commit_entries_per_5s", "bytes_per_5s", "unbatched"} {
		if !strings.Contains(js.String(), `"`+k+`"`) {
			t.Errorf("traffic JSON has no %q", k)
		}
	}
}
