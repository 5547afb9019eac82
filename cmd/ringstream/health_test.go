package main

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine/adminapi"
)

// replicaStatus is a node's /v1/status as a metadata replica serves it.
func replicaStatus(node uint16, primary bool, streams []adminapi.Stream, copies []adminapi.Copy, beats []adminapi.NodeBeat) *adminapi.Status {
	return &adminapi.Status{Node: node, Cluster: 1, State: "serving", Registered: true,
		Meta:    &adminapi.Meta{View: 1, Op: 10, Commit: 10, Primary: primary, PrimaryID: 1, Normal: true},
		Streams: streams, Copies: copies, Heartbeats: adminapi.Heartbeats{Nodes: beats}}
}

func threeBeats(linkUp3 bool) []adminapi.NodeBeat {
	return []adminapi.NodeBeat{{Node: 1, Status: "registered", LinkUp: true}, {Node: 2, Status: "registered", LinkUp: true},
		{Node: 3, Status: "registered", LinkUp: linkUp3}}
}

// TestHealth_NamesDownNodesAndUnderReplicatedStreams: the health's verdicts from the nodes' statuses:
// a node whose admin does not answer and whose link is down is down, and the streams with a copy on it
// are under-replicated (the one it owns has no owner); a copy that is not open on an up node counts as
// missing; all clear is healthy; no replica answering as primary says so with the replicas that did.
func TestHealth_NamesDownNodesAndUnderReplicatedStreams(t *testing.T) {
	streams := []adminapi.Stream{
		{ID: 1, Name: "a", Incarnation: 1, Copies: 3, Owner: 1, Followers: []uint16{2, 3}},
		{ID: 2, Name: "b", Incarnation: 1, Copies: 3, Owner: 3, Followers: []uint16{1, 2}},
		{ID: 3, Name: "c", Incarnation: 1, Copies: 2, Owner: 1, Followers: []uint16{2}},
	}
	open := func(ids ...uint64) []adminapi.Copy {
		var cs []adminapi.Copy
		for _, id := range ids {
			cs = append(cs, adminapi.Copy{Stream: id, Incarnation: 1, Open: true})
		}
		return cs
	}
	healthy := []nodeStatus{
		{Addr: "n1", Status: replicaStatus(1, true, streams, open(1, 2, 3), threeBeats(true))},
		{Addr: "n2", Status: replicaStatus(2, false, streams, open(1, 2, 3), threeBeats(true))},
		{Addr: "n3", Status: replicaStatus(3, false, streams, open(1, 2), threeBeats(true))},
	}
	if h := buildHealth(healthy); !h.Healthy || len(h.UnderReplicated) != 0 || h.Metadata.Primary != 1 {
		t.Fatalf("all up: %+v", h)
	}

	down := []nodeStatus{healthy[0], healthy[1], {Addr: "n3", Err: errors.New("connection refused")}}
	down[0].Status = replicaStatus(1, true, streams, open(1, 2, 3), threeBeats(false))
	down[1].Status = replicaStatus(2, false, streams, open(1, 2, 3), threeBeats(false))
	h := buildHealth(down)
	if h.Healthy || h.nodeState(3) != "down" {
		t.Fatalf("node 3 dead: healthy %v, node 3 %q", h.Healthy, h.nodeState(3))
	}
	var names []string
	for _, s := range h.UnderReplicated {
		names = append(names, s.Name)
		if !slices.Equal(s.Missing, []uint16{3}) || !strings.Contains(s.Why, "node 3 is down") {
			t.Fatalf("under-replicated %s: %+v", s.Name, s)
		}
	}
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Fatalf("under-replicated %v, want a and b", names)
	}
	if len(h.WithoutOwner) != 1 || h.WithoutOwner[0].Name != "b" {
		t.Fatalf("without an owner: %+v, want b (owned by node 3)", h.WithoutOwner)
	}

	// Node 3's admin is not asked but node 1's link to it is up: alive, not down.
	linkOnly := []nodeStatus{healthy[0], healthy[1]}
	if h := buildHealth(linkOnly); h.nodeState(3) != "link up" || !h.Healthy {
		t.Fatalf("node 3 alive by its link: %q, healthy %v", h.nodeState(3), h.Healthy)
	}

	// An up node that lists a copy closed (or none) makes its stream under-replicated.
	closed := slices.Clone(healthy)
	closed[2] = nodeStatus{Addr: "n3", Status: replicaStatus(3, false, streams, []adminapi.Copy{{Stream: 1, Incarnation: 1}, {Stream: 2, Incarnation: 1, Open: true}}, threeBeats(true))}
	if h := buildHealth(closed); len(h.UnderReplicated) != 1 || h.UnderReplicated[0].Name != "a" ||
		!strings.Contains(h.UnderReplicated[0].Why, "node 3 serves no open copy") {
		t.Fatalf("a closed copy: %+v", h.UnderReplicated)
	}

	// No replica is primary: no primary, and why names the replicas that answered.
	noPrimary := []nodeStatus{{Addr: "n2", Status: replicaStatus(2, false, streams, nil, threeBeats(false))}}
	noPrimary[0].Status.Meta.Normal = false
	h = buildHealth(noPrimary)
	if h.Healthy || h.Metadata.Primary != 0 || !strings.Contains(h.Metadata.Why, "node 2 (in a view change, view 1, no link to nodes [3])") {
		t.Fatalf("no primary: %+v", h.Metadata)
	}
	doc, ok := describeStream(h, "a")
	if !ok || len(doc.Copies) != 3 || doc.Copies[0].State != "link up" || doc.Copies[1].State != "not open" || doc.Copies[2].State != "down" {
		t.Fatalf("describe without copies: %+v", doc)
	}
}
