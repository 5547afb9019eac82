package vsr

import (
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// FuzzVSRReplicaStep feeds any frame that decodes to a backup holding a short log: the replica never
// panics on a peer's bytes and its invariants hold after the step.
func FuzzVSRReplicaStep(f *testing.F) {
	entries := chain(0, 0, 3, 0)
	from := wire.From{Cluster: 1, Node: 1}
	for _, m := range []wire.VSRMessage{
		{Command: wire.CommandVSRPrepare, Replica: 0, Op: 1, Commit: 0, Entries: entries[:1]},
		{Command: wire.CommandVSRPrepareOK, Replica: 2, Op: 1, Checksum: entries[0].Checksum},
		{Command: wire.CommandVSRStartViewChange, Replica: 2, View: 1},
		{Command: wire.CommandVSRDoViewChange, Replica: 2, View: 1, Op: 3, Checksum: entries[2].Checksum, Entries: entries},
		{Command: wire.CommandVSRStartView, Replica: 0, View: 3, LogView: 3, Op: 3, Commit: 2,
			Checksum: entries[2].Checksum, Entries: entries},
		{Command: wire.CommandVSRRequestPrepare, Replica: 2, Op: 1},
		{Command: wire.CommandVSRSnapshot, Replica: 0, Op: 2, Checksum: 1, Total: 2, Payload: []byte{1, 2}},
		{Command: wire.CommandVSRSnapshot, Replica: 0, Op: 5, Checksum: 7, Offset: 0, Total: 100, Payload: []byte{1, 2}},
		{Command: wire.CommandVSRRequestSnapshot, Replica: 2, Op: 2, Checksum: 1, Offset: 1},
		{Command: wire.CommandVSRRequestStartView, Replica: 2},
		{Command: wire.CommandVSRRecovery, Replica: 2, Request: 9},
		{Command: wire.CommandVSRRecoveryResponse, Replica: 0, View: 2, Request: 9},
		{Command: wire.CommandVSRRecoveryResponse, Replica: 0, View: 3, LogView: 3, Op: 3, Commit: 1, Request: 9,
			Checksum: entries[2].Checksum, Entries: entries},
	} {
		f.Add(wire.AppendVSRFrame(nil, from, 0, &m))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		h, body, err := wire.ParseFrame(frame)
		if err != nil {
			return
		}
		var m wire.VSRMessage
		if err := wire.DecodeVSR(&h, body, &m); err != nil {
			return
		}
		r, err := New(testConfig(3, 1), newCounterMachine(), Durable{Fresh: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := range entries[:2] {
			p := wire.VSRMessage{Command: wire.CommandVSRPrepare, Replica: 0, Op: entries[i].Op, Commit: uint64(i),
				Entries: entries[i : i+1]}
			r.Step(&p)
		}
		r.Step(&m)
		r.CheckInvariants()
		r.Tick()
		r.CheckInvariants()
	})
}
