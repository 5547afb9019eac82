package vsr

import (
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// pipe is an allocation-free driver of three replicas for the steady-state path: it hands messages
// straight from one replica's effects to another's Step and makes every persist durable at once.
type pipe struct {
	r    [3]*Replica
	body []byte
	req  uint64
}

func newPipe(tb testing.TB, checkpointOps uint64) *pipe {
	p := &pipe{body: counterOp(1, 1)}
	for i := range p.r {
		cfg := testConfig(3, uint8(i))
		cfg.CheckpointOps = checkpointOps
		r, err := New(cfg, newCounterMachine(), Durable{Fresh: true})
		if err != nil {
			tb.Fatal(err)
		}
		p.r[i] = r
	}
	return p
}

// pump runs effects until every replica is quiet.
func (p *pipe) pump() {
	for busy := true; busy; {
		busy = false
		for _, r := range p.r {
			fx := r.Ready()
			if fx.PersistID != 0 {
				r.Advance(fx.PersistID)
				busy = true
			}
			for i := range fx.Messages {
				busy = true
				p.r[fx.Messages[i].To].Step(&fx.Messages[i].Msg)
			}
		}
	}
}

// op proposes one request and runs it to commit on the primary and to the backups' logs.
func (p *pipe) op() {
	p.req++
	if err := p.r[0].Propose(1, p.req, p.body); err != nil {
		panic(err)
	}
	p.pump()
}

func TestAllocs_SteadyStateOpAllocatesNothing(t *testing.T) {
	p := newPipe(t, 4096)       // the steady state between checkpoints: the test stays below op 4096
	for i := 0; i < 2000; i++ { // grow every reused buffer to its steady size
		p.op()
	}
	allocs := testing.AllocsPerRun(1000, p.op)
	// The body arena takes one 64 KiB chunk per few thousand ops; anything per op would show as >= 1.
	t.Logf("%.4f allocations per op", allocs)
	if allocs >= 0.01 {
		t.Fatalf("%.4f allocations per op, want none in steady state", allocs)
	}
	if p.r[0].Commit() < 3000 || p.r[1].Op() != p.r[0].Op() {
		t.Fatalf("primary commit %d, backup op %d", p.r[0].Commit(), p.r[1].Op())
	}
}

// BenchmarkReplicaOp is one op through a 3-replica group in memory: propose, prepare to both backups,
// their persists and prepare-oks, the primary's persist, commit and apply. It runs with the default
// CheckpointOps (1024), so the cost of checkpoints is spread over the ops.
func BenchmarkReplicaOp(b *testing.B) {
	p := newPipe(b, DefaultConfig(3, 0).CheckpointOps)
	for i := 0; i < 2000; i++ {
		p.op()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.op()
	}
}

// BenchmarkPrepareFrame encodes and decodes one prepare frame of a 64-byte op, as a link would.
func BenchmarkPrepareFrame(b *testing.B) {
	e := wire.VSREntry{Op: 9, View: 1, Client: 1, Request: 9, Body: make([]byte, 64)}
	e.Checksum = entryChecksum(&e)
	m := wire.VSRMessage{Command: wire.CommandVSRPrepare, View: 1, Op: 9, Commit: 8, Entries: []wire.VSREntry{e}}
	buf := make([]byte, 0, 1024)
	var out wire.VSRMessage
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = wire.AppendVSRFrame(buf[:0], wire.From{Cluster: 1, Node: 1}, 0, &m)
		h, body, err := wire.ParseFrame(buf)
		if err != nil {
			b.Fatal(err)
		}
		if err := wire.DecodeVSR(&h, body, &out); err != nil {
			b.Fatal(err)
		}
	}
}
