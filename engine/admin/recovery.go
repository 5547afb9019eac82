package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/ringstream/ringstream/engine/adminapi"
	"github.com/ringstream/ringstream/engine/meta"
)

// acceptLossWarning is the risk an accepted loss takes, repeated in every answer.
const acceptLossWarning = "records confirmed past the new owner's tails (its seal answer, or else its last published ones), or held only by the lost copies, are lost"

// serveRecovery handles POST /v1/recovery/{accept-loss,withdraw}?stream=NAME[&owner=N]: the operator
// actions on a pending recovery. Only the metadata primary's controller builds them (it knows the
// published tails); another node answers 409 naming the primary. The op is proposed like a client's
// metadata request and the answer waits for its commit.
func (n *node) serveRecovery(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		res := adminapi.RecoveryAction{Action: action, Stream: r.URL.Query().Get("stream")}
		var owner uint64
		var err error
		if q := r.URL.Query().Get("owner"); q != "" {
			owner, err = strconv.ParseUint(q, 10, 16)
		}
		if err != nil || res.Stream == "" || (action == "withdraw" && owner != 0) {
			res.Error = "want ?stream=NAME, and for accept-loss optionally &owner=NODE (1..65535)"
			writeStatusJSON(w, http.StatusBadRequest, res)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), n.metaRequestTimeout)
		defer cancel()
		status := n.recoveryAction(ctx, &res, uint16(owner))
		writeStatusJSON(w, status, res)
	}
}

// recoveryAction builds the op on shard 0, proposes it and fills in res; it returns the HTTP status.
func (n *node) recoveryAction(ctx context.Context, res *adminapi.RecoveryAction, owner uint16) int {
	if n.ctl == nil || !n.meta.Status().Primary {
		res.Error = fmt.Sprintf("node %d is not the metadata primary", n.id)
		if n.meta != nil {
			if ms := n.meta.Status(); ms.Normal {
				res.Primary = n.replicas[int(ms.View)%len(n.replicas)]
			}
		}
		return http.StatusConflict
	}
	var op meta.Op
	var buildErr error
	err := n.metaSvc.OnShard0(ctx, func() {
		s, ok := n.meta.State().StreamByName(res.Stream)
		if !ok {
			buildErr = fmt.Errorf("no stream is named %q", res.Stream)
			return
		}
		res.StreamID = s.ID
		if res.Action == "withdraw" {
			o, err := n.ctl.Controller().Withdraw(s.ID)
			op, buildErr, res.Recovery = o, err, o.Recovery
			return
		}
		o, err := n.ctl.Controller().AcceptOwnerLoss(s.ID, owner)
		op, buildErr, res.Recovery, res.Owner = o, err, o.Recovery, o.Owner
		res.Warning = acceptLossWarning
	})
	if err == nil {
		err = buildErr
	}
	if err != nil {
		res.Error = err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			return http.StatusServiceUnavailable
		}
		return http.StatusConflict
	}
	pr, err := n.metaSvc.ProposeOp(ctx, op)
	if err != nil {
		res.Error = "the op did not commit: " + err.Error()
		return http.StatusServiceUnavailable
	}
	r, err := meta.DecodeResult(pr.Result)
	if err != nil {
		res.Error = "the op's result does not decode: " + err.Error()
		return http.StatusInternalServerError
	}
	res.Op, res.Done, res.Result = pr.Op, r.OK(), r.String()
	if !res.Done {
		return http.StatusConflict
	}
	n.metrics.recoveries.operator(res.Action)
	if res.Action == "accept-loss" {
		n.log.Warn("operator accepted the loss of a stream's owner", "stream", res.Stream, "recovery", res.Recovery,
			"owner", res.Owner, "risk", acceptLossWarning)
	}
	return http.StatusOK
}
