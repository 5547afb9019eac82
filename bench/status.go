package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ringstream/ringstream/engine/adminapi"
)

// statusPollInterval is how often the faults' watchers read the nodes' /v1/status.
const statusPollInterval = 20 * time.Millisecond

// errNoView: no node answered with a view of the stream.
var errNoView = errors.New("bench: no metadata replica answered with the stream")

// status reads node addr's /v1/status.
func (a *admin) status(ctx context.Context, addr string) (adminapi.Status, error) {
	body, err := a.get(ctx, addr, "/v1/status")
	if err != nil {
		return adminapi.Status{}, err
	}
	var st adminapi.Status
	if err := json.Unmarshal(body, &st); err != nil {
		return adminapi.Status{}, fmt.Errorf("bench: %s/v1/status: %w", addr, err)
	}
	return st, nil
}

// streamView is a stream as the cluster's metadata has it: from the metadata primary's status where
// one answers, else from the replica with the most committed ops.
func (a *admin) streamView(ctx context.Context, addrs []string, name string) (adminapi.Stream, error) {
	var best adminapi.Stream
	var bestCommit uint64
	found := false
	for _, addr := range addrs {
		st, err := a.status(ctx, addr)
		if err != nil || st.Meta == nil {
			continue
		}
		for _, s := range st.Streams {
			if s.Name != name {
				continue
			}
			if st.Meta.Primary && st.Meta.Normal {
				return s, nil
			}
			if !found || st.Meta.Commit > bestCommit {
				best, bestCommit, found = s, st.Meta.Commit, true
			}
		}
	}
	if !found {
		return adminapi.Stream{}, fmt.Errorf("%w: %q", errNoView, name)
	}
	return best, nil
}

// metaPrimary is the node id of the metadata primary, as a replica in normal status reports it.
func (a *admin) metaPrimary(ctx context.Context, addrs []string) (uint16, error) {
	for _, addr := range addrs {
		st, err := a.status(ctx, addr)
		if err == nil && st.Meta != nil && st.Meta.Normal && st.Meta.PrimaryID != 0 {
			return st.Meta.PrimaryID, nil
		}
	}
	return 0, fmt.Errorf("bench: no metadata replica in normal status names a primary")
}

// copyOf is node addr's copy of stream id, if it has one open.
func (a *admin) copyOf(ctx context.Context, addr string, stream uint64) (adminapi.Copy, bool, error) {
	st, err := a.status(ctx, addr)
	if err != nil {
		return adminapi.Copy{}, false, err
	}
	for _, c := range st.Copies {
		if c.Stream == stream && c.Open {
			return c, true, nil
		}
	}
	return adminapi.Copy{}, false, nil
}

// pollUntil calls cond every statusPollInterval until it reports done or ctx ends.
func pollUntil(ctx context.Context, cond func() bool) bool {
	t := time.NewTicker(statusPollInterval)
	defer t.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// controllerSeals is the active controller's node and its count of seals started, from the metadata
// primary's status.
func (a *admin) controllerSeals(ctx context.Context, addrs []string) (node uint16, seals uint64, ok bool) {
	for _, addr := range addrs {
		st, err := a.status(ctx, addr)
		if err == nil && st.Meta != nil && st.Meta.Primary && st.Controller != nil && st.Controller.Active {
			return st.Node, st.Controller.Seals, true
		}
	}
	return 0, 0, false
}
