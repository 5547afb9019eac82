package shard_test

import (
	"net"
	"sync"
	"testing"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/shardtest"
	"github.com/ringstream/ringstream/wire"
)

// dataSender keeps the link's data queue full of one 1 MiB frame until want frames were queued. It
// sends the same header and body every time: nothing is copied, so nothing needs a fresh buffer.
type dataSender struct {
	*shardtest.Group
	s              shard.Sender
	header, body   []byte
	queued, want   int
	inFlight, room int
}

func (d *dataSender) Attach(s shard.Sender) { d.s = s; d.Group.Attach(s) }

func (d *dataSender) OnTurn() {
	for d.queued < d.want && d.inFlight < d.room {
		if d.s.SendData(2, d.header, d.body, d, 0) != nil {
			return
		}
		d.queued++
		d.inFlight++
	}
}

func (d *dataSender) DataSent(node uint16, tag uint64, err error) { d.inFlight-- }

// dataSink counts the frames its group receives, without copying them.
type dataSink struct {
	*shardtest.Group
	got, want int
	done      chan struct{}
}

func (d *dataSink) OnFrame(from uint16, h *wire.Header, body []byte) {
	d.got++
	if d.got == d.want {
		close(d.done)
	}
}

// BenchmarkDataFrame1MiB sends 1 MiB data frames from the owner's bytes to a follower node over
// loopback (SendData: one SENDMSG over header and body), beside plain write(2) of the same bytes on a
// loopback TCP connection in the same run. copied/B is user-space bytes copied per byte sent: none on
// the send side by construction, and the receive side's FrameReader moves (Stats.RecvBytesMoved).
func BenchmarkDataFrame1MiB(b *testing.B) {
	const size = 1 << 20
	b.Run("sendmsg", func(b *testing.B) {
		const id = 21
		body := make([]byte, size)
		header := dataFrameParts(id, body)
		snd := &dataSender{Group: newGroup(id, []uint16{1, 2}, 1, 1), header: header, body: body, want: b.N, room: 64}
		sink := &dataSink{Group: newGroup(id, []uint16{1, 2}, 2, 1), want: b.N, done: make(chan struct{})}
		t := b
		var w watcher
		a := newNetNodeCfg(t, shard.Config{Node: 1, Ring: ring.Config{Backend: ring.BackendIOUring}}, &w, snd)
		c := newNetNodeCfg(t, shard.Config{Node: 2, Ring: ring.Config{Backend: ring.BackendIOUring}}, &w, sink)
		if err := a.Start([]shard.Peer{{Node: 2, Addr: c.Addr()}}); err != nil {
			b.Fatal(err)
		}
		defer a.Stop()
		if err := c.Start([]shard.Peer{{Node: 1, Addr: a.Addr()}}); err != nil {
			b.Fatal(err)
		}
		defer c.Stop()
		w.wait(t, "links up", func() bool { return linksUp(a, true)() && linksUp(c, true)() })
		b.SetBytes(size + wire.HeaderSize)
		b.ResetTimer()
		if err := a.Run(0, func(*shard.Shard) {}); err != nil { // a turn: OnTurn starts queueing
			b.Fatal(err)
		}
		<-sink.done
		b.StopTimer()
		moved := c.Shards()[0].Stats().RecvBytesMoved.Load()
		b.ReportMetric(float64(moved)/float64(b.N*(size+wire.HeaderSize)), "copied/B")
	})
	b.Run("write2", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			buf := make([]byte, 2<<20)
			total := b.N * (size + wire.HeaderSize)
			for total > 0 {
				n, err := c.Read(buf[:min(len(buf), total)])
				if err != nil {
					return
				}
				total -= n
			}
		}()
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		frame := make([]byte, size+wire.HeaderSize)
		b.SetBytes(size + wire.HeaderSize)
		b.ResetTimer()
		for range b.N {
			if _, err := conn.Write(frame); err != nil {
				b.Fatal(err)
			}
		}
		wg.Wait()
		b.StopTimer()
		b.ReportMetric(0, "copied/B")
	})
}
