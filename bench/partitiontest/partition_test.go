package partitiontest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/engine/adminapi"
	"github.com/ringstream/ringstream/engine/config"
	"github.com/ringstream/ringstream/localcluster"
	"github.com/ringstream/ringstream/shard/heartbeat"
)

// The cluster's timeouts: short, and commit_heartbeat_timeout (the owner's quorum window, R24) below
// node_liveness_timeout, so the old owner must stop serving before the controller moves the stream.
const (
	tickMs           = 10
	heartbeatTimeout = 2000 * time.Millisecond // commit_heartbeat_timeout: R9's floor
	livenessTimeout  = 3000 * time.Millisecond // node_liveness_timeout
	streamName       = "partition"
	probeRecords     = 6000 // the old owner's unconfirmed suffix: one batch of this many records (~700 KB)
	// metaSlack bounds how late past commit_heartbeat_timeout a cut-off metadata primary steps down
	// and a cut-off owner stops serving (R24): the window is counted in ticks, and a loaded machine
	// runs ticks late.
	metaSlack = 3 * time.Second
)

func configure(_ uint16, f *config.File) {
	f.Cluster.TickMs = tickMs
	f.Cluster.CommitBroadcastInterval = 250
	f.Cluster.CommitHeartbeatTimeout = heartbeat.Millis(heartbeatTimeout.Milliseconds())
	f.Cluster.CommitIdleHeartbeatInterval = 500
	f.Cluster.CommitIdleHeartbeatTimeout = heartbeat.Millis(heartbeatTimeout.Milliseconds())
	f.Cluster.NodeLivenessTimeout = heartbeat.Millis(livenessTimeout.Milliseconds())
}

// TestPartition_OwnerCutOff_FailsOverAndRejoinsWithSuffixCut: three nodes, each in its own network
// namespace; a stream of 3 copies on majority_durable under continuous produce; the owner's node is
// cut off by a packet filter. The old owner confirms nothing after the cut, and what it does past
// commit_heartbeat_timeout is checked against R24 (checkR24), the controller moves the stream after
// node_liveness_timeout, the
// load goes on at the new owner, and once healed the old owner is a follower at the new epoch with
// its unconfirmed suffix cut; every confirmed record is read back exactly once, at its offset.
func TestPartition_OwnerCutOff_FailsOverAndRejoinsWithSuffixCut(t *testing.T) {
	lab := newLab(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	lc, err := localcluster.Start(ctx, localcluster.Options{Binary: binary, Dir: dir, Hosts: lab.hosts(),
		Command: lab.wrap, Configure: configure})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		lc.Close()
		if t.Failed() {
			t.Log(nodeLogs(dir))
		}
	})
	cl, err := client.Dial(ctx, client.Config{Addrs: lc.ClientAddrs(), Cluster: lc.ClusterID(), Secret: []byte(lc.Secret()),
		DialTimeout: time.Second, RequestTimeout: time.Second, Retries: 100, BackoffMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.CreateStream(ctx, streamName, client.StreamOptions{Copies: 3}); err != nil {
		t.Fatal(err)
	}
	ld, err := startLoad(cl, streamName)
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.waitConfirmed(ctx, 200, 0); err != nil {
		t.Fatal(err)
	}
	before := waitStream(ctx, t, lc, 0, func(s adminapi.Stream) bool { return s.Owner != 0 })
	old := before.Owner
	t.Logf("stream %d at epoch %d: owner %d, followers %v; cutting node %d off at %s", before.ID, before.Epoch, old,
		before.Followers, old, time.Now().UTC().Format("15:04:05.000"))

	cutAt := time.Now()
	if err := lab.cut(old); err != nil {
		t.Fatal(err)
	}
	confirmedAtCut := ld.confirmed()
	target := &prober{probeTarget: probeTarget{ns: lab.ns(old), clientAddr: lc.Node(old).ClientAddr,
		adminAddr: lc.Node(old).AdminAddr, cluster: lc.ClusterID(), secret: []byte(lc.Secret()), stream: streamName},
		cutAt: cutAt}
	defer target.close()
	early, err := target.run(ctx, "early", probeRecords)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("old owner, probed from its namespace: %v", early)
	if early.confirmed {
		t.Errorf("the cut-off owner confirmed a produce %v after the cut", early.after)
	}
	if early.status.Meta != nil && early.status.Meta.Primary {
		checkMetaStepDown(ctx, t, target)
	}
	sleepUntil(ctx, cutAt.Add(heartbeatTimeout))
	var late probe
	for {
		if late, err = target.run(ctx, "late", 0); err != nil {
			t.Fatal(err)
		}
		if late.fetchErr != nil || late.after > heartbeatTimeout+metaSlack {
			break
		}
		sleepUntil(ctx, time.Now().Add(5*statusPoll))
	}
	t.Logf("old owner, probed from its namespace: %v", late)
	checkR24(t, late)
	lateCopy, _ := copyOf(late.status, before.ID)

	after := waitStream(ctx, t, lc, old, func(s adminapi.Stream) bool { return s.Epoch > before.Epoch && s.Owner != old })
	movedAfter := time.Since(cutAt)
	t.Logf("controller moved the stream %v after the cut: epoch %d, owner %d, followers %v", movedAfter.Round(time.Millisecond),
		after.Epoch, after.Owner, after.Followers)
	if movedAfter < livenessTimeout {
		t.Errorf("stream moved %v after the cut, before node_liveness_timeout %v", movedAfter, livenessTimeout)
	}
	if err := ld.waitConfirmed(ctx, ld.confirmed()+200, after.Epoch); err != nil {
		t.Fatal(err)
	}
	if at, ok := ld.firstConfirmAt(after.Epoch); ok {
		t.Logf("first confirm at epoch %d: %v after the cut (%d records were confirmed at the cut)", after.Epoch,
			at.Sub(cutAt).Round(time.Millisecond), confirmedAtCut)
	}
	if err := ld.finish(ctx); err != nil {
		t.Fatal(err)
	}
	cutTails, err := target.run(ctx, "final", 0)
	if err != nil {
		t.Fatal(err)
	}
	oldCopy, ok := copyOf(cutTails.status, before.ID)
	if !ok {
		t.Fatalf("the cut-off node has no open copy of stream %d: %+v (status error %v)", before.ID, cutTails.status.Copies,
			cutTails.statusErr)
	}
	t.Logf("old owner's copy before the heal: %+v (after the heartbeat timeout: %+v)", oldCopy, lateCopy)

	if err := lab.heal(old); err != nil {
		t.Fatal(err)
	}
	checkRejoined(ctx, t, lc, old, after, oldCopy)
	n, err := ld.readBack(ctx, cl, streamName)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("read back %d records: every confirmed record once, at its offset; no probe record", n)
}

// checkMetaStepDown: the cut-off node held the metadata primary; it must step down once its quorum
// window passes (R24). Its status is read from inside its namespace until it does; the bound is
// commit_heartbeat_timeout plus metaSlack, since the window is counted in ticks and a loaded machine
// runs ticks late.
func checkMetaStepDown(ctx context.Context, t *testing.T, pr *prober) {
	t.Helper()
	for {
		var st adminapi.Status
		err := inNamespace(pr.ns, func() (err error) {
			st, err = getStatus(ctx, pr.adminAddr, probeTimeout)
			return err
		})
		took := time.Since(pr.cutAt)
		if err == nil && st.Meta != nil && !(st.Meta.Primary && st.Meta.Normal) {
			t.Logf("R24 met by the metadata primary: the cut-off node stepped down %v after the cut (view %d)",
				took.Round(time.Millisecond), st.Meta.View)
			return
		}
		if took > heartbeatTimeout+metaSlack {
			t.Errorf("R24: the cut-off metadata primary still leads %v after the cut (status %+v, %v)",
				took.Round(time.Millisecond), st.Meta, err)
			return
		}
		sleepUntil(ctx, time.Now().Add(5*statusPoll))
	}
}

// checkR24: the cut-off owner's stream copy must serve no read past commit_heartbeat_timeout (R24),
// with metaSlack for late ticks: its fetch is refused (unavailable) once it heard no quorum within
// its window.
func checkR24(t *testing.T, late probe) {
	t.Helper()
	if late.fetchErr == nil {
		t.Errorf("R24: the cut-off owner still served a fetch of %d records %v after the cut (commit_heartbeat_timeout %v)",
			late.fetched, late.after.Round(time.Millisecond), heartbeatTimeout)
		return
	}
	// The copy's own refusal (engine/stream's msgQuorumLost), not a lookup the client retried with;
	// or "not yet" from the node's metadata service: the client, refused by the copy, asks the cut-off
	// node for the stream's route, and its replica, stepped down by R24 too, has no primary to ask.
	const refusal = "within commit_heartbeat_timeout (R24)"
	copyRefused := errors.Is(late.fetchErr, client.ErrUnavailable) &&
		strings.Contains(late.fetchErr.Error()+late.fetchLog, refusal)
	if !copyRefused && !errors.Is(late.fetchErr, client.ErrNotYet) {
		t.Errorf("R24: the cut-off owner's fetch %v after the cut was not refused by its copy as unavailable (%q): %v; "+
			"attempts:\n%s", late.after.Round(time.Millisecond), refusal, late.fetchErr, late.fetchLog)
		return
	}
	t.Logf("R24 met by the stream owner: its fetch was refused %v after the cut: %v", late.after.Round(time.Millisecond),
		late.fetchErr)
}

// checkRejoined waits until the healed node old holds a follower copy at the stream's epoch with the
// new owner's tails, the stream still owned by the failover's owner with no recovery pending (a
// later epoch that only adds old back as a follower is no recovery). It then checks that those tails
// are below the suffix old appended while cut off: that suffix was cut.
func checkRejoined(ctx context.Context, t *testing.T, lc *localcluster.Cluster, old uint16, asg adminapi.Stream,
	cut adminapi.Copy) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var oc, nc adminapi.Copy
	var now adminapi.Stream
	for {
		now = waitStream(wctx, t, lc, 0, func(adminapi.Stream) bool { return true })
		ost, oerr := getStatus(wctx, lc.Node(old).AdminAddr, time.Second)
		nst, nerr := getStatus(wctx, lc.Node(asg.Owner).AdminAddr, time.Second)
		var ook, nok bool
		oc, ook = copyOf(ost, asg.ID)
		nc, nok = copyOf(nst, asg.ID)
		if oerr == nil && nerr == nil && ook && nok && oc.Role == "follower" && oc.Epoch == now.Epoch &&
			nc.Epoch == now.Epoch && oc.Durable == nc.Durable && nc.Confirmed == nc.Durable {
			break
		}
		select {
		case <-wctx.Done():
			t.Fatalf("old owner %d did not rejoin as a follower with the owner's tails: stream %+v, its copy %+v (%v), "+
				"the owner's %+v (%v)", old, now, oc, oerr, nc, nerr)
		case <-time.After(statusPoll):
		}
	}
	t.Logf("old owner rejoined at epoch %d (failover epoch %d): %+v; owner %d: %+v", now.Epoch, asg.Epoch, oc, asg.Owner, nc)
	if now.Owner != asg.Owner || now.Recovery != "" {
		t.Errorf("stream owned by %d at epoch %d (recovery %q) after the rejoin: the failover chose %d at epoch %d: "+
			"another recovery ran", now.Owner, now.Epoch, now.Recovery, asg.Owner, asg.Epoch)
	}
	// The old owner held an unconfirmed suffix when it was cut off; having rejoined at the new owner's
	// tails, that suffix is gone (a follower refuses batches whose predecessor epoch differs, so it
	// cannot keep its epoch-1 records past the new history start and match the owner). The new owner
	// may by now have passed the cut-off tail: the producers keep writing until the heal.
	if cut.Appended <= cut.Confirmed {
		t.Errorf("the old owner's tail while cut off (%d) is not past what it confirmed (%d): no unconfirmed suffix to cut",
			cut.Appended, cut.Confirmed)
	}
	if oc.Appended != nc.Appended {
		t.Errorf("old owner's appended tail %d after the heal: want the new owner's %d", oc.Appended, nc.Appended)
	}
	if cut.Appended > nc.Durable {
		t.Logf("the new owner's tail %d is below the old owner's cut-off tail %d: the rejoin cut it back", nc.Durable, cut.Appended)
	}
}

// waitStream polls the nodes other than skip (0: all) until the metadata primary's view of the stream
// satisfies ok, and returns it.
func waitStream(ctx context.Context, t *testing.T, lc *localcluster.Cluster, skip uint16, ok func(adminapi.Stream) bool) adminapi.Stream {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last adminapi.Stream
	for {
		for _, n := range lc.Nodes() {
			if n.ID == skip {
				continue
			}
			st, err := getStatus(wctx, n.AdminAddr, time.Second)
			if err != nil || st.Meta == nil || !st.Meta.Primary || !st.Meta.Normal {
				continue
			}
			if s, found := streamOf(st, streamName); found {
				last = s
				if ok(s) {
					return s
				}
			}
		}
		select {
		case <-wctx.Done():
			t.Fatalf("stream %q: no metadata primary showed the wanted state; last seen %+v", streamName, last)
		case <-time.After(statusPoll):
		}
	}
}

// sleepUntil waits until at, or until ctx ends.
func sleepUntil(ctx context.Context, at time.Time) {
	tm := time.NewTimer(time.Until(at))
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
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
		fmt.Fprintf(&b, "--- %s (last 4000 bytes)\n%s\n", p, data[max(len(data)-4000, 0):])
	}
	return b.String()
}
