package shard_test

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// TestClusterSecretRefusesStranger: nodes 1 and 2 share a cluster secret; node 3 has another secret, or
// none. Node 3's links never come up and the refusals are counted on both sides, while nodes 1 and 2
// authenticate each other and a group frame crosses between them (the dialer's proof goes ahead of it).
func TestClusterSecretRefusesStranger(t *testing.T) {
	secret := []byte("cluster secret, at least 16 bytes")
	cases := []struct {
		name   string
		third  []byte
		reason string
	}{
		{"wrong secret", []byte("another secret, also 16+ bytes"), "wrong"},
		{"no secret", nil, "missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, backend ring.Backend) {
				var w watcher
				sender := newGroup(42, []uint16{1, 2}, 1, 1)
				sender.Cluster, sender.Node, sender.FrameAt, sender.FrameTo = testCluster, 1, 5, 2
				receiver := newGroup(42, []uint16{1, 2}, 2, 1)
				cfg := func(id uint16, shards int, secret []byte) shard.Config {
					return shard.Config{Node: id, Shards: shards, Secret: secret, Ring: ring.Config{Backend: backend}}
				}
				a := newNetNodeCfg(t, cfg(1, 2, secret), &w, sender)
				b := newNetNodeCfg(t, cfg(2, 3, secret), nil, receiver)
				c := newNetNodeCfg(t, cfg(3, 1, tc.third), nil)
				nodes := []*shard.Node{a, b, c}
				for i, n := range nodes {
					var peers []shard.Peer
					for j, p := range nodes {
						if j != i {
							peers = append(peers, shard.Peer{Node: uint16(j + 1), Addr: p.Addr()})
						}
					}
					if err := n.Start(peers); err != nil {
						t.Fatal(err)
					}
					defer n.Stop()
				}
				owner := b.Shards()[shard.ShardOf(42, 3)].Stats()
				refused := func(n *shard.Node) uint64 {
					var sum uint64
					for _, s := range n.Shards() {
						sum += s.Stats().AuthRefused.Load()
					}
					return sum
				}
				upTo := func(n *shard.Node, peer uint16) bool {
					for _, l := range n.Status() {
						if l.Peer == peer && !l.Up {
							return false
						}
					}
					return true
				}
				w.wait(t, "1 and 2 linked, the frame routed, node 3 refused on both sides", func() bool {
					return upTo(a, 2) && upTo(b, 1) && owner.FramesRouted.Load() == 1 &&
						refused(a) > 0 && refused(b) > 0 && refused(c) > 0
				})
				for _, n := range []*shard.Node{a, b} {
					for _, l := range n.Status() {
						if l.Peer == 3 && l.Up {
							t.Fatalf("a link to node 3 (%s) is up", tc.reason)
						}
					}
				}
				for _, l := range c.Status() {
					if l.Up {
						t.Fatalf("node 3 (%s secret) has a link up to node %d", tc.reason, l.Peer)
					}
				}
				for _, n := range nodes {
					n.Stop() // before reading the groups, which live on the shards' goroutines
				}
				if sender.FrameErr != nil || len(receiver.Frames) != 1 || string(receiver.Frames[0]) != "ringstream" {
					t.Fatalf("frame between the authenticated nodes: %v %q", sender.FrameErr, receiver.Frames)
				}
			})
		})
	}
}

var testSecret = []byte("cluster secret, at least 16 bytes")

func authRefused(n *shard.Node) uint64 {
	var sum uint64
	for _, s := range n.Shards() {
		sum += s.Stats().AuthRefused.Load()
	}
	return sum
}

// TestDialerChecksAcceptorProof: a dialing shard with a secret refuses an answer whose proof was made
// with another secret (counted, link down); an answer with the right proof brings the link up, and the
// shard then sends its own proof, ahead of anything else.
func TestDialerChecksAcceptorProof(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend ring.Backend) {
		var w watcher
		peer := newRawPeer(t, 2)
		n := newNetNodeCfg(t, shard.Config{Node: 1, Shards: 1, Secret: testSecret, Ring: ring.Config{Backend: backend}}, &w)
		if err := n.Start([]shard.Peer{{Node: 2, Addr: peer.addr()}}); err != nil {
			t.Fatal(err)
		}
		defer n.Stop()
		answer := func(secret []byte) (net.Conn, wire.Handshake, wire.Handshake) {
			c, err := peer.ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			h, body := readFrame(t, c)
			dial, err := wire.DecodeHandshake(&h, body)
			if err != nil || dial.Nonce == (wire.Nonce{}) {
				t.Fatalf("dialer's handshake %+v: %v (want a nonce)", dial, err)
			}
			ours := wire.Handshake{Node: 2, Cluster: testCluster, Revision: wire.Revision, Nonce: wire.Nonce{7, 31: 7}}
			ours.Proof = wire.AcceptorProof(secret, &dial, &ours)
			if _, err := c.Write(wire.AppendHandshake(nil, ours)); err != nil {
				t.Fatal(err)
			}
			return c, dial, ours
		}
		answer([]byte("another secret, also 16+ bytes"))
		w.wait(t, "refusal counted", func() bool { return authRefused(n) == 1 })
		if n.Status()[0].Up {
			t.Fatal("link up after a proof under another secret")
		}
		c, dial, ours := answer(testSecret)
		w.wait(t, "link up", linksUp(n, true))
		h, body := readFrame(t, c)
		p, err := wire.DecodeHandshakeProof(&h, body)
		if err != nil {
			t.Fatalf("first frame after the handshake: %v %v", h.Command, err)
		}
		if err := wire.VerifyDialer(testSecret, &dial, &ours, p); err != nil {
			t.Fatal(err)
		}
	})
}

// TestAcceptorChecksDialerProof: the accepting node refuses a dialer without a nonce, a wrong proof and
// a proof replayed from an earlier connection (each closed and counted), and keeps a connection whose
// proof holds.
func TestAcceptorChecksDialerProof(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend ring.Backend) {
		n := newNetNodeCfg(t, shard.Config{Node: 1, Shards: 2, Secret: testSecret, Ring: ring.Config{Backend: backend}}, nil)
		if err := n.Start([]shard.Peer{{Node: 2, Addr: netip.MustParseAddrPort("127.0.0.1:9")}}); err != nil {
			t.Fatal(err)
		}
		defer n.Stop()
		// dial sends a handshake with nonce, checks the node's answer, and sends proof(dial, answer).
		dial := func(nonce wire.Nonce, proof func(dial, accept *wire.Handshake) wire.Proof) net.Conn {
			c, err := net.Dial("tcp", n.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			hs := wire.Handshake{Node: 2, Cluster: testCluster, Revision: wire.Revision, ShardCount: 1, Nonce: nonce}
			if _, err := c.Write(wire.AppendHandshake(nil, hs)); err != nil {
				t.Fatal(err)
			}
			if nonce == (wire.Nonce{}) {
				return c
			}
			h, body := readFrame(t, c)
			accept, err := wire.DecodeHandshake(&h, body)
			if err != nil {
				t.Fatal(err)
			}
			if err := wire.VerifyAcceptor(testSecret, &hs, &accept); err != nil {
				t.Fatalf("node's answer: %v", err)
			}
			if _, err := c.Write(wire.AppendHandshakeProof(nil, testCluster, 2, proof(&hs, &accept))); err != nil {
				t.Fatal(err)
			}
			return c
		}
		closed := func(c net.Conn) bool {
			c.SetReadDeadline(time.Now().Add(liveness))
			_, err := c.Read(make([]byte, 1))
			return err == io.EOF
		}
		var recorded wire.Proof
		good := dial(wire.Nonce{1, 31: 1}, func(d, a *wire.Handshake) wire.Proof {
			recorded = wire.DialerProof(testSecret, d, a)
			return recorded
		})
		cases := []struct {
			name string
			c    net.Conn
		}{
			{"no nonce", dial(wire.Nonce{}, nil)},
			{"wrong secret", dial(wire.Nonce{2, 31: 2}, func(d, a *wire.Handshake) wire.Proof {
				return wire.DialerProof([]byte("another secret, also 16+ bytes"), d, a)
			})},
			{"replayed proof", dial(wire.Nonce{1, 31: 1}, func(d, a *wire.Handshake) wire.Proof { return recorded })},
		}
		for _, tc := range cases {
			if !closed(tc.c) {
				t.Errorf("%s: connection not closed", tc.name)
			}
		}
		if got := authRefused(n); got != uint64(len(cases)) {
			t.Fatalf("AuthRefused %d, want %d", got, len(cases))
		}
		good.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := good.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("authenticated connection: %v, want it kept open", err)
		}
	})
}
