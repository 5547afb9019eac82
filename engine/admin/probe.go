package admin

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/wire"
)

// readinessWait bounds the read of the applied metadata state one /readyz makes on shard 0.
const readinessWait = time.Second

// Readiness is the answer of /readyz: whether the node finished starting, and what it waits for.
type Readiness struct {
	Node   uint16 `json:"node"`
	Ready  bool   `json:"ready"`
	Reason string `json:"reason"`
}

// assignedCopy is a copy the applied metadata state places on this node.
type assignedCopy struct {
	stream      uint64
	incarnation uint32
	epoch       uint32
}

// serveHealth is /healthz: 200 while the process serves HTTP at all (liveness: restart it only when
// this fails).
func (n *node) serveHealth(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = fmt.Fprintf(w, "ok: node %d %s\n", n.id, n.stateName())
}

// serveReady is /readyz: 200 with {"ready":true} once the node is ready (engine.Node.Readiness), 503 with
// the reason otherwise.
func (n *node) serveReady(w http.ResponseWriter, r *http.Request) {
	rd := n.Readiness(r.Context())
	status := http.StatusOK
	if !rd.Ready {
		status = http.StatusServiceUnavailable
	}
	writeStatusJSON(w, status, rd)
}

// Readiness says whether the node finished starting: it serves (Start ran, Shutdown did not), its
// metadata replica (where it holds one) is in a normal view with working storage and caught up (the
// primary, or a backup that applied the commit number of a Commit entry the primary sent it since it
// opened: a replica restarted with a commit behind the group's looks normal at once), and every copy its
// replica's applied state assigns to it has opened at its assignment's epoch or later (streams with a
// recovery recorded are the controller's to bring back and do not count; a copy that failed to open
// is reported by Status and the copy failure metric, and does not hold readiness either). Once ready,
// the node stays ready until it stops: a later view change or a new stream's copy opening does not
// take it out of a load balancer's rotation. A node without a replica knows no assignment: it is ready
// once it serves.
func (n *node) Readiness(ctx context.Context) Readiness {
	out := Readiness{Node: n.id}
	if st := n.state(); st != StateServing {
		out.Reason = "node is " + n.stateName()
		return out
	}
	if n.admin.ready.Load() {
		out.Ready, out.Reason = true, "ready"
		return out
	}
	if reason := n.notReady(ctx); reason != "" {
		out.Reason = reason
		return out
	}
	n.admin.ready.Store(true)
	n.log.Info("node ready")
	out.Ready, out.Reason = true, "ready"
	return out
}

// notReady is why the node is not ready yet, "" when it is.
func (n *node) notReady(ctx context.Context) string {
	if n.meta == nil {
		return ""
	}
	if reason := metaNotReady(n.meta.Status()); reason != "" {
		return reason
	}
	assigned, err := n.assignedCopies(ctx)
	if err != nil {
		return fmt.Sprintf("applied metadata state not read: %v", err)
	}
	missing, first := unopenedCopies(assigned, n.streams.AppendCopyTails(nil), n.failedCopies())
	if missing > 0 {
		return fmt.Sprintf("%d of %d copies assigned to this node not open yet (first: stream %d "+
			"incarnation %d at epoch %d)", missing, len(assigned), first.stream, first.incarnation, first.epoch)
	}
	return ""
}

// metaNotReady is why the metadata replica of status ms does not let the node be ready yet, ""
// when it does.
func metaNotReady(ms metahost.Status) string {
	switch {
	case ms.PersistErr != nil:
		return fmt.Sprintf("metadata replica's storage failed: %v", ms.PersistErr)
	case ms.Recovering:
		return "metadata replica is recovering its state from the group"
	case !ms.Normal:
		return fmt.Sprintf("metadata replica is not in a normal view (view change under way at view %d, "+
			"or no quorum of replicas reachable)", ms.View)
	case !ms.Primary && !ms.HeardPrimary:
		return fmt.Sprintf("metadata replica has not heard from the primary of view %d yet", ms.View)
	case !ms.Primary && ms.Commit < ms.CommitHeard:
		return fmt.Sprintf("metadata replica is catching up: applied %d of the primary's commit %d",
			ms.Commit, ms.CommitHeard)
	}
	return ""
}

// assignedCopies lists the copies the applied metadata state places on this node, streams with a
// recovery recorded left out (read on shard 0).
func (n *node) assignedCopies(ctx context.Context) ([]assignedCopy, error) {
	ctx, cancel := context.WithTimeout(ctx, readinessWait)
	defer cancel()
	var out []assignedCopy
	err := n.metaSvc.OnShard0(ctx, func() {
		state := n.meta.State()
		for _, s := range state.Streams() {
			a, ok := state.Assignment(s.ID)
			if !ok || !a.Includes(n.id) {
				continue
			}
			if _, recovering := state.RecoveryOf(s.ID); recovering {
				continue
			}
			out = append(out, assignedCopy{stream: s.ID, incarnation: s.Incarnation, epoch: a.Epoch})
		}
	})
	return out, err
}

// failedCopies are the copies of this node that did not open or whose log failed.
func (n *node) failedCopies() map[copyKey]bool {
	out := map[copyKey]bool{}
	for _, f := range n.streams.Status() {
		out[copyKey{stream: f.Stream, incarnation: f.Incarnation}] = true
	}
	return out
}

// unopenedCopies counts the assigned copies that have neither opened at their assignment's epoch or
// later (tails: the copies the stream host published, sorted by stream) nor failed, and names the
// first of them.
func unopenedCopies(assigned []assignedCopy, tails []wire.CopyTail, failed map[copyKey]bool) (int, assignedCopy) {
	opened := make(map[copyKey]uint32, len(tails))
	for _, t := range tails {
		opened[copyKey{stream: t.Stream, incarnation: t.Incarnation}] = t.Epoch
	}
	missing, first := 0, assignedCopy{}
	for _, a := range assigned {
		key := copyKey{stream: a.stream, incarnation: a.incarnation}
		if epoch, ok := opened[key]; (ok && epoch >= a.epoch) || failed[key] {
			continue
		}
		if missing == 0 {
			first = a
		}
		missing++
	}
	return missing, first
}

// copyKey names one incarnation of a stream.
type copyKey struct {
	stream      uint64
	incarnation uint32
}
