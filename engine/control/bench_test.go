package control

import (
	"fmt"
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

// BenchmarkFailover measures the controller's own work (and meta's apply) for n streams losing their
// owner at once: the recoveries recorded, every copy sealed, the answers taken, the commits applied.
// The figure is per failover of all n streams.
func BenchmarkFailover(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				f := newFixture(&testing.T{}, testConfig(), 3)
				for i := range n {
					f.mustApply(meta.CreateStream{Name: fmt.Sprintf("s%d", i), Copies: 3, Policy: majority,
						Owner: 1, Followers: []uint16{2, 3}, Stamped: majority})
				}
				f.c.StateChanged()
				f.heartbeatAll(1, 2, 3)
				f.ready()
				b.StartTimer()
				f.heartbeat(1, wire.FlagShuttingDown)
				f.ready()
				f.commit()
				fx := f.ready()
				for _, s := range fx.Seals {
					if s.To != 1 {
						f.reply(s.To, s.Seal, 10, 0)
					}
				}
				f.ready()
				if len(f.fx.Proposals) != n {
					b.Fatalf("%d commits, want %d", len(f.fx.Proposals), n)
				}
				f.commit()
			}
		})
	}
}

// BenchmarkOnHeartbeat is one node heartbeat carrying 1,000 copies' tails.
func BenchmarkOnHeartbeat(b *testing.B) {
	f := newFixture(&testing.T{}, testConfig(), 3)
	tails := make([]wire.CopyTail, 1000)
	for i := range tails {
		tails[i] = wire.CopyTail{Stream: uint64(1000 - i), Incarnation: 1, Epoch: 1, RecordTail: uint64(i), Role: wire.RoleFollower}
	}
	frame := wire.AppendNodeHeartbeat(nil, wire.From{Cluster: 1, Node: 2}, &wire.NodeHeartbeat{}, tails)
	h, body, _ := wire.ParseFrame(frame)
	m, copies, _ := wire.DecodeNodeHeartbeat(&h, body)
	b.ReportAllocs()
	for range b.N {
		f.c.OnHeartbeat(2, m, copies)
	}
}
