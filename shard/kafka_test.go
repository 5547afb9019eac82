package shard_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// kafkaEcho is a KafkaHandler for tests. A frame "echo..." is answered with its own bytes; "submit:N"
// submits a client request for stream N and answers with the shard the reply came from; "hold" is
// kept unanswered until release; "bad" breaks a rule (the connection closes).
type kafkaEcho struct {
	mu     sync.Mutex
	held   [][2]uint64 // shard, connection
	closed []uint64
}

func kafkaFrame(payload string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...)
}

func (k *kafkaEcho) OnKafkaRequest(s *shard.Shard, conn uint64, frame []byte) error {
	switch {
	case bytes.HasPrefix(frame, []byte("bad")):
		return errors.New("test: a rule this frame breaks")
	case bytes.HasPrefix(frame, []byte("hold")):
		k.mu.Lock()
		k.held = append(k.held, [2]uint64{uint64(s.Index()), conn})
		k.mu.Unlock()
	case bytes.HasPrefix(frame, []byte("submit:")):
		stream := uint64(frame[len(frame)-1] - '0')
		req := shard.ClientRequest{Shard: s.Index(), Conn: conn, RequestID: 77, Stream: stream, Kafka: true}
		f := wire.AppendFetch(nil, wire.From{Cluster: testCluster, Node: 1}, &wire.Fetch{RequestID: 77, Stream: stream,
			BytesMax: 1})
		if err := s.SubmitClientRequest(req, f); err != nil {
			return err
		}
	default:
		s.KafkaRespond(conn, kafkaFrame(string(frame)))
	}
	return nil
}

func (k *kafkaEcho) OnKafkaReply(s *shard.Shard, req shard.ClientRequest, frame []byte) {
	h, body, err := wire.ParseFrame(frame)
	if err != nil || h.Command != wire.CommandErrorReply {
		panic("test: reply is not an error reply")
	}
	e, _ := wire.DecodeErrorReply(&h, body)
	s.KafkaRespond(req.Conn, kafkaFrame(string(e.Message)))
}

func (k *kafkaEcho) OnKafkaClosed(s *shard.Shard, conn uint64) {
	k.mu.Lock()
	k.closed = append(k.closed, conn)
	k.mu.Unlock()
}

func newKafkaNode(t *testing.T, b ring.Backend, shards int, k *kafkaEcho, edit func(*shard.ClientConfig)) *limitsNode {
	t.Helper()
	ln := &limitsNode{reg: prometheus.NewRegistry(), log: &syncBuffer{}, w: &watcher{}}
	cfg := shard.Config{Node: 1, Shards: shards, Cluster: testCluster, Tick: time.Millisecond, Schedule: testTicks,
		Seed: 3, Ring: ring.Config{Backend: b, Logger: quietLogger()},
		ClientListen: netip.MustParseAddrPort("127.0.0.1:0"), KafkaListen: netip.MustParseAddrPort("127.0.0.1:0"),
		Registry: ln.reg, Logger: slog.New(slog.NewTextHandler(ln.log, nil))}
	if edit != nil {
		edit(&cfg.Client)
	}
	n, err := shard.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.SetTickHook(ln.w.hook)
	if err := n.SetClientHandler(&echoHandler{}); err != nil {
		t.Fatal(err)
	}
	if err := n.SetKafkaHandler(k); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(nil); err != nil {
		t.Fatal(err)
	}
	ln.Node = n
	t.Cleanup(func() { stopWithin(t, n, liveness, "stop") })
	return ln
}

func readKafkaFrame(t *testing.T, c net.Conn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(liveness))
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		t.Fatalf("read response size: %v", err) // the log: see the caller
	}
	b := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read response: %v", err)
	}
	return string(b)
}

// Kafka connections: pipelined frames answered in order, a frame split across writes, a request
// routed to its stream's shard and answered back on the connection's, each broken rule a counted
// and logged close with the listener "kafka", and the bounds of [client].
func TestKafkaConnections(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		k := &kafkaEcho{}
		ln := newKafkaNode(t, b, 2, k, func(c *shard.ClientConfig) { c.RequestsMax, c.FrameBytesMax = 2, 4096 })
		addr := ln.KafkaAddr()
		if !addr.IsValid() || addr.Port() == 0 {
			t.Fatalf("kafka address %v", addr)
		}
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		all := append(append(kafkaFrame("echo one"), kafkaFrame("echo two")...), kafkaFrame("echo three")...)
		if _, err := c.Write(all[:7]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // the first frame split across two receives
		if _, err := c.Write(all[7:]); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"echo one", "echo two", "echo three"} {
			if got := readKafkaFrame(t, c); got != want {
				t.Fatalf("response %q, want %q", got, want)
			}
		}
		// Streams 1..4 live on both shards: each request is served on its stream's shard.
		for stream := byte('1'); stream <= '4'; stream++ {
			if _, err := c.Write(kafkaFrame("submit:" + string(stream))); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(liveness))
			var size [4]byte
			if _, err := io.ReadFull(c, size[:]); err != nil {
				t.Fatalf("stream %c: %v\n%s", stream, err, ln.log.String())
			}
			rest := make([]byte, binary.BigEndian.Uint32(size[:]))
			if _, err := io.ReadFull(c, rest); err != nil {
				t.Fatal(err)
			}
			got := shardNumbers(t, string(rest))
			if want := shard.ShardOf(uint64(stream-'0'), 2); got[0] != want {
				t.Fatalf("stream %c served on shard %d, want %d (connection on %d)", stream, got[0], want, got[1])
			}
		}

		// RequestsMax 2: a third request is not read while two are held.
		if _, err := c.Write(append(append(kafkaFrame("hold one"), kafkaFrame("hold two")...), kafkaFrame("echo after")...)); err != nil {
			t.Fatal(err)
		}
		ln.w.wait(t, "two held", func() bool { k.mu.Lock(); defer k.mu.Unlock(); return len(k.held) == 2 })
		if !stillOpen(c) {
			t.Fatal("closed while requests were held")
		}
		k.mu.Lock()
		held := k.held
		k.mu.Unlock()
		for _, h := range held {
			if err := ln.Node.Run(int(h[0]), func(s *shard.Shard) { s.KafkaRespond(h[1], nil) }); err != nil { // no response: acks=0
				t.Fatal(err)
			}
		}
		if got := readKafkaFrame(t, c); got != "echo after" {
			t.Fatalf("after the held requests: %q\n%s", got, ln.log.String())
		}

		for _, tc := range []struct {
			send   []byte
			reason string
		}{
			{kafkaFrame("bad request"), "bad_request"},
			{binary.BigEndian.AppendUint32(nil, 5000), "frame_too_large"},
			{binary.BigEndian.AppendUint32(nil, 3), "bad_request"},
			{binary.BigEndian.AppendUint32(nil, 0xFFFFFFFF), "bad_request"},
		} {
			before := ln.closed(t, "kafka", tc.reason)
			bc, err := net.Dial("tcp", addr.String())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bc.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			expectClosed(t, bc, tc.reason)
			bc.Close()
			ln.w.wait(t, tc.reason+" counted", func() bool { return ln.closed(t, "kafka", tc.reason) == before+1 })
		}
		if !regexp.MustCompile(`listener=kafka reason=bad_request`).MatchString(ln.log.String()) {
			t.Fatalf("no log line names the Kafka close:\n%s", ln.log.String())
		}
		if ln.closed(t, "client", "bad_request") != 0 || ln.closed(t, "client", "broken_frame") != 0 {
			t.Fatal("a Kafka close counted under the client listener")
		}
		k.mu.Lock()
		closes := len(k.closed)
		k.mu.Unlock()
		if closes != 4 {
			t.Fatalf("handler told of %d closes, want 4", closes)
		}
		if !stillOpen(c) {
			t.Fatal("a good connection was closed with the bad ones")
		}
	})
}

// shardNumbers is the two shard numbers of "served on shard A for connection shard B".
func shardNumbers(t *testing.T, s string) [2]int {
	t.Helper()
	m := regexp.MustCompile(`served on shard (\d+) for connection shard (\d+)`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("response %q", s)
	}
	var out [2]int
	for i := range out {
		for _, ch := range m[i+1] {
			out[i] = out[i]*10 + int(ch-'0')
		}
	}
	return out
}

// A Kafka connection with nothing under way is closed after IdleTimeoutTicks, counted as kafka
// idle_timeout.
func TestKafkaIdleClosed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b ring.Backend) {
		const ticks = 40
		ln := newKafkaNode(t, b, 1, &kafkaEcho{}, func(c *shard.ClientConfig) {
			c.HandshakeTimeoutTicks, c.IdleTimeoutTicks = 20, ticks
		})
		start := tickClock(ln.Shards()[0]) // before the dial: the shard may accept before Dial returns
		c, err := net.Dial("tcp", ln.KafkaAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		expectClosed(t, c, "idle kafka client")
		if ran := tickClock(ln.Shards()[0]) - start; ran < ticks {
			t.Fatalf("closed after %d ticks, before the bound of %d", ran, ticks)
		}
		ln.w.wait(t, "idle close counted", func() bool { return ln.closed(t, "kafka", "idle_timeout") == 1 })
	})
}
