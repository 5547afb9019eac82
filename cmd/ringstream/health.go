package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/engine/adminapi"
)

// The cluster's health, as `cluster health` prints it and `attention` adds to the controller's list.
// It is built from what the nodes' admin listeners serve: /v1/status of every address of the admin
// list (read at once). Decisions where the nodes say nothing directly:
//   - A node is up when its admin listener answered. A registered node (in a metadata replica's
//     heartbeat list) that is not in the admin list, or whose address did not answer, is down unless an
//     answering replica's link to it is up ("link up": alive, its admin listener not asked).
//   - The streams, owners and followers are the metadata primary's view (the highest-commit replica
//     when no primary answered).
//   - A stream is under-replicated when a node of its assignment (owner and followers) is down, when an
//     up node of it lists no open copy, or when the assignment has fewer copies than the stream's count.
//   - The metadata group has a primary when an answering replica says it is primary in a normal view.

// healthDoc is `cluster health --json`.
type healthDoc struct {
	Healthy         bool            `json:"healthy"`
	Nodes           []healthNode    `json:"nodes"`
	Unreachable     []healthAddr    `json:"unreachable_admin,omitempty"`
	UnderReplicated []healthStream  `json:"under_replicated"`
	WithoutOwner    []healthStream  `json:"without_owner"`
	Recoveries      []healthStream  `json:"pending_recoveries"`
	Metadata        healthMeta      `json:"metadata"`
	Streams         int             `json:"streams"`
	FailedCopies    []healthFailure `json:"failed_copies,omitempty"`

	metaSource       *adminapi.Status
	streamsByID      map[uint64]adminapi.Stream
	statusesByNodeID map[uint16]*adminapi.Status
}

type healthNode struct {
	Node      uint16 `json:"node"`
	State     string `json:"state"` // up, link up, down
	AdminAddr string `json:"admin_addr,omitempty"`
	Client    string `json:"client_addr,omitempty"`
	Replica   bool   `json:"metadata_replica"`
}

type healthAddr struct {
	Addr  string `json:"addr"`
	Error string `json:"error"`
}

type healthStream struct {
	Name        string   `json:"name"`
	ID          uint64   `json:"id"`
	Incarnation uint32   `json:"incarnation"`
	Owner       uint16   `json:"owner"`
	Followers   []uint16 `json:"followers"`
	Missing     []uint16 `json:"missing_copies,omitempty"` // nodes of the assignment without a serving copy
	Why         string   `json:"why"`
}

type healthFailure struct {
	Node uint16 `json:"node"`
	adminapi.Failure
}

type healthMeta struct {
	Primary  uint16           `json:"primary,omitempty"` // 0: none answered as primary
	View     uint32           `json:"view"`
	Commit   uint64           `json:"commit"`
	Replicas []healthMetaRepl `json:"replicas"`
	Why      string           `json:"why,omitempty"` // when there is no primary
}

type healthMetaRepl struct {
	Node    uint16 `json:"node"`
	View    uint32 `json:"view"`
	Op      uint64 `json:"op"`
	Commit  uint64 `json:"commit"`
	Primary bool   `json:"primary"`
	Normal  bool   `json:"normal"`
	Error   string `json:"persist_error,omitempty"`
}

// buildHealth computes the cluster's health from every admin address's status.
func buildHealth(sts []nodeStatus) *healthDoc {
	h := &healthDoc{statusesByNodeID: map[uint16]*adminapi.Status{}, streamsByID: map[uint64]adminapi.Stream{},
		UnderReplicated: []healthStream{}, WithoutOwner: []healthStream{}, Recoveries: []healthStream{}}
	for _, s := range sts {
		if s.Status == nil {
			h.Unreachable = append(h.Unreachable, healthAddr{Addr: s.Addr, Error: s.Err.Error()})
			continue
		}
		h.statusesByNodeID[s.Status.Node] = s.Status
	}
	h.buildMeta()
	h.buildNodes(sts)
	h.buildStreams()
	h.Healthy = len(h.UnderReplicated) == 0 && len(h.WithoutOwner) == 0 && len(h.Recoveries) == 0 &&
		h.Metadata.Primary != 0 && len(h.FailedCopies) == 0 && !slices.ContainsFunc(h.Nodes, func(n healthNode) bool {
		return n.State == "down"
	})
	return h
}

// buildMeta picks the metadata view: the primary's, else the highest-commit replica's.
func (h *healthDoc) buildMeta() {
	var best *adminapi.Status
	for _, id := range sortedKeys(h.statusesByNodeID) {
		st := h.statusesByNodeID[id]
		m := st.Meta
		if m == nil {
			continue
		}
		h.Metadata.Replicas = append(h.Metadata.Replicas, healthMetaRepl{Node: st.Node, View: m.View, Op: m.Op, Commit: m.Commit,
			Primary: m.Primary, Normal: m.Normal, Error: m.PersistError})
		switch {
		case m.Primary && m.Normal:
			best = st
			h.Metadata.Primary = st.Node
		case best == nil || (h.Metadata.Primary == 0 && m.Commit > best.Meta.Commit):
			best = st
		}
	}
	h.metaSource = best
	if best != nil {
		h.Metadata.View, h.Metadata.Commit = best.Meta.View, best.Meta.Commit
	}
	if h.Metadata.Primary == 0 {
		h.Metadata.Why = h.noPrimaryWhy()
	}
}

// noPrimaryWhy says why no primary answered: which replicas answered and which did not.
func (h *healthDoc) noPrimaryWhy() string {
	if len(h.Metadata.Replicas) == 0 {
		return "no metadata replica answered: the admin list holds none, or they are down"
	}
	var up []string
	for _, r := range h.Metadata.Replicas {
		state := "backup"
		if !r.Normal {
			state = "in a view change"
		}
		desc := fmt.Sprintf("node %d (%s, view %d", r.Node, state, r.View)
		if lost := h.linksDown(r.Node); len(lost) > 0 {
			desc += fmt.Sprintf(", no link to nodes %v", lost)
		}
		up = append(up, desc+")")
	}
	return fmt.Sprintf("no replica answers as the primary of a normal view (no quorum, or a view change in progress); "+
		"answering: %s; the others did not answer", strings.Join(up, ", "))
}

// linksDown is the registered nodes node's shard 0 link does not reach.
func (h *healthDoc) linksDown(node uint16) []uint16 {
	var out []uint16
	if st := h.statusesByNodeID[node]; st != nil {
		for _, b := range st.Heartbeats.Nodes {
			if !b.LinkUp && b.Node != node && b.Status != "decommissioned" {
				out = append(out, b.Node)
			}
		}
	}
	return out
}

// buildNodes lists the registered nodes (the metadata view's heartbeat list) and every node that answered.
func (h *healthDoc) buildNodes(sts []nodeStatus) {
	nodes := map[uint16]*healthNode{}
	if h.metaSource != nil {
		for _, b := range h.metaSource.Heartbeats.Nodes {
			if b.Status == "decommissioned" {
				continue
			}
			nodes[b.Node] = &healthNode{Node: b.Node, State: "down", Client: b.Address}
		}
	}
	for _, s := range sts {
		if s.Status == nil {
			continue
		}
		n := nodes[s.Status.Node]
		if n == nil {
			n = &healthNode{Node: s.Status.Node}
			nodes[s.Status.Node] = n
		}
		n.State, n.AdminAddr, n.Client, n.Replica = "up", s.Addr, s.Status.ClientAddr, s.Status.Meta != nil
		for _, fl := range s.Status.Failures {
			h.FailedCopies = append(h.FailedCopies, healthFailure{Node: s.Status.Node, Failure: fl})
		}
	}
	for _, st := range h.statusesByNodeID {
		if st.Meta == nil {
			continue
		}
		for _, b := range st.Heartbeats.Nodes {
			if n := nodes[b.Node]; n != nil && n.State == "down" && b.LinkUp && b.Node != st.Node {
				n.State = "link up"
			}
		}
	}
	for _, id := range sortedKeys(nodes) {
		h.Nodes = append(h.Nodes, *nodes[id])
	}
}

// nodeState is node's state in the health document ("down" when unknown).
func (h *healthDoc) nodeState(node uint16) string {
	for _, n := range h.Nodes {
		if n.Node == node {
			return n.State
		}
	}
	return "down"
}

// buildStreams checks every stream of the metadata view.
func (h *healthDoc) buildStreams() {
	if h.metaSource == nil {
		return
	}
	h.Streams = len(h.metaSource.Streams)
	for _, s := range h.metaSource.Streams {
		h.streamsByID[s.ID] = s
		hs := healthStream{Name: s.Name, ID: s.ID, Incarnation: s.Incarnation, Owner: s.Owner, Followers: s.Followers}
		if s.Recovery != "" {
			r := hs
			r.Why = fmt.Sprintf("recovery %d %s (see `ringstream attention`)", s.RecoveryID, s.Recovery)
			h.Recoveries = append(h.Recoveries, r)
		}
		switch {
		case s.Owner == 0:
			r := hs
			r.Why = "no owner assigned"
			h.WithoutOwner = append(h.WithoutOwner, r)
		case h.nodeState(s.Owner) == "down":
			r := hs
			r.Why = fmt.Sprintf("its owner, node %d, is down", s.Owner)
			h.WithoutOwner = append(h.WithoutOwner, r)
		}
		if why, missing := h.replicationGap(s); why != "" {
			hs.Missing, hs.Why = missing, why
			h.UnderReplicated = append(h.UnderReplicated, hs)
		}
	}
}

// replicationGap says why stream s has fewer serving copies than it should, and on which nodes.
func (h *healthDoc) replicationGap(s adminapi.Stream) (string, []uint16) {
	members := append([]uint16{s.Owner}, s.Followers...)
	var missing []uint16
	var whys []string
	for _, m := range members {
		if m == 0 {
			continue
		}
		switch h.nodeState(m) {
		case "down":
			missing = append(missing, m)
			whys = append(whys, fmt.Sprintf("node %d is down", m))
		case "up":
			if !h.copyOpen(m, s.ID, s.Incarnation) {
				missing = append(missing, m)
				whys = append(whys, fmt.Sprintf("node %d serves no open copy", m))
			}
		}
	}
	if n := len(s.Followers) + 1; s.Owner != 0 && n < int(s.Copies) {
		whys = append(whys, fmt.Sprintf("%d of %d copies assigned", n, s.Copies))
	}
	return strings.Join(whys, "; "), missing
}

// copyOpen says whether node lists an open copy of the stream's incarnation.
func (h *healthDoc) copyOpen(node uint16, stream uint64, inc uint32) bool {
	st := h.statusesByNodeID[node]
	if st == nil {
		return false
	}
	return slices.ContainsFunc(st.Copies, func(c adminapi.Copy) bool {
		return c.Stream == stream && c.Incarnation == inc && c.Open
	})
}

func sortedKeys[K uint16 | uint64, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func newClusterHealthCommand() *cobra.Command {
	var f adminFlags
	cmd := clientCommand(&cobra.Command{
		Use:   "health",
		Short: "The cluster at a glance: nodes up and down, streams under-replicated or without an owner, recoveries",
		Long: "Read /v1/status from every node of the admin list (--admin, or the profile's) and print the nodes up\n" +
			"and down, the streams that are under-replicated (a copy's node down, or no open copy on it), the\n" +
			"streams without an owner, the pending recoveries, failed copies, and the metadata group's view\n" +
			"(which replica is primary, or why none is). --json prints one document. A node missing from the\n" +
			"admin list is judged by the metadata replicas' links to it. The exit status is 0 whatever the\n" +
			"verdict (5 when no node answered): scripts read \"healthy\" in --json.",
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := f.addrs(cmd)
			if err != nil {
				return err
			}
			h := buildHealth(f.statuses(cmd.Context(), list))
			if len(h.statusesByNodeID) == 0 {
				return &exitError{code: exitUnavailable, err: fmt.Errorf("no admin listener answered: %s", unreachableText(h))}
			}
			if f.asJSON {
				return writeJSON(cmd.OutOrStdout(), h)
			}
			return printHealth(cmd.OutOrStdout(), h)
		},
	})
	f.register(cmd.Flags())
	return cmd
}

func unreachableText(h *healthDoc) string {
	var parts []string
	for _, u := range h.Unreachable {
		parts = append(parts, u.Error)
	}
	return strings.Join(parts, "; ")
}

func printHealth(w io.Writer, h *healthDoc) error {
	up := 0
	for _, n := range h.Nodes {
		if n.State != "down" {
			up++
		}
	}
	verdict := "healthy"
	if !h.Healthy {
		verdict = "NOT healthy"
	}
	fmt.Fprintf(w, "cluster: %s; %d of %d nodes up, %d streams, %d under-replicated, %d without an owner, %d recoveries pending\n",
		verdict, up, len(h.Nodes), h.Streams, len(h.UnderReplicated), len(h.WithoutOwner), len(h.Recoveries))
	printHealthMeta(w, &h.Metadata)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nNODE\tSTATE\tCLIENT\tADMIN\tMETADATA\n")
	for _, n := range h.Nodes {
		replica := "-"
		if n.Replica {
			replica = "replica"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", n.Node, n.State, dash(n.Client), dash(n.AdminAddr), replica)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printStreamProblems(w, "under-replicated", h.UnderReplicated)
	printStreamProblems(w, "without an owner", h.WithoutOwner)
	printStreamProblems(w, "pending recovery", h.Recoveries)
	for _, fl := range h.FailedCopies {
		fmt.Fprintf(w, "FAILED copy of stream %d on node %d (%s, retrying %v): %s\n", fl.Stream, fl.Node, fl.Cause,
			fl.Retrying, fl.Error)
	}
	for _, u := range h.Unreachable {
		fmt.Fprintf(w, "admin %s did not answer: %s\n", u.Addr, u.Error)
	}
	return nil
}

func printHealthMeta(w io.Writer, m *healthMeta) {
	if m.Primary != 0 {
		fmt.Fprintf(w, "metadata: primary node %d, view %d, commit %d;", m.Primary, m.View, m.Commit)
	} else {
		fmt.Fprintf(w, "metadata: NO PRIMARY: %s;", m.Why)
	}
	for _, r := range m.Replicas {
		role := "backup"
		if r.Primary {
			role = "primary"
		}
		fmt.Fprintf(w, " node %d %s op %d", r.Node, role, r.Op)
		if r.Error != "" {
			fmt.Fprintf(w, " PERSIST FAILED (%s)", r.Error)
		}
		fmt.Fprint(w, ";")
	}
	fmt.Fprintln(w)
}

func printStreamProblems(w io.Writer, what string, list []healthStream) {
	for _, s := range list {
		fmt.Fprintf(w, "stream %q (id %d) %s: owner %d, followers %v: %s\n", s.Name, s.ID, what, s.Owner, s.Followers, s.Why)
	}
}
