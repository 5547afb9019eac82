package clustertest

import (
	"context"
	"crypto/rand"
	bin "encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/localcluster"
	"github.com/ringstream/ringstream/wire"
)

// rawClient is a client connection that speaks the wire protocol by hand, so it can send what the Go
// client refuses to.
type rawClient struct {
	t  *testing.T
	nc net.Conn
}

// dialRaw connects to addr and runs the client handshake with secret.
func dialRaw(t *testing.T, addr string, cluster uint64, secret string) *rawClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	rc := &rawClient{t: t, nc: nc}
	hello := wire.ClientHello{RequestID: 1, Cluster: cluster, Revision: wire.Revision}
	_, _ = rand.Read(hello.Nonce[:])
	rc.write(wire.AppendClientHello(nil, &hello))
	h, body := rc.read()
	ch, err := wire.DecodeClientChallenge(&h, body)
	if err != nil {
		t.Fatalf("challenge from %s: %v (%s)", addr, err, h.Command)
	}
	if err := wire.VerifyClientChallenge([]byte(secret), &hello, &ch); err != nil {
		t.Fatal(err)
	}
	p := wire.ClientProof{RequestID: 2, Proof: wire.ClientHelloProof([]byte(secret), &hello, &ch)}
	rc.write(wire.AppendClientProof(nil, cluster, &p))
	return rc
}

func (rc *rawClient) write(b []byte) {
	rc.t.Helper()
	if _, err := rc.nc.Write(b); err != nil {
		rc.t.Fatal(err)
	}
}

func (rc *rawClient) read() (wire.Header, []byte) {
	rc.t.Helper()
	_ = rc.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, wire.HeaderSize)
	if _, err := io.ReadFull(rc.nc, buf); err != nil {
		rc.t.Fatalf("read: %v", err)
	}
	h, err := wire.ParseHeader(buf)
	if err != nil {
		rc.t.Fatal(err)
	}
	buf = append(buf, make([]byte, h.BodySize)...)
	if _, err := io.ReadFull(rc.nc, buf[wire.HeaderSize:]); err != nil {
		rc.t.Fatal(err)
	}
	h, body, err := wire.ParseFrame(buf)
	if err != nil {
		rc.t.Fatal(err)
	}
	return h, body
}

// TestBadStreamNames_RefusedWithTheRuleAndEveryNodeStaysUp is issue 21's finding 1 on real `ringstream
// serve` processes: a create of 'orders/eu' panicked the metadata primary, and the client's retry the
// next one. Each name is sent by hand (the Go client and the commands refuse it before sending) to
// every node; each answers CodeBadStreamName with the rule, and afterwards every process still runs
// and a stream is created.
func TestBadStreamNames_RefusedWithTheRuleAndEveryNodeStaysUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const cluster = 21
	lc, err := localcluster.Start(ctx, localcluster.Options{Binary: binary, Dir: t.TempDir(), ClusterID: cluster})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	rid := uint64(10)
	for _, n := range lc.Nodes() {
		rc := dialRaw(t, n.ClientAddr, cluster, lc.Secret())
		for _, name := range []string{"orders/eu", "a b/c", "naïve"} {
			rid++
			h := wire.Header{Command: wire.CommandCreateStream, Cluster: cluster}
			bin.LittleEndian.PutUint64(h.Area[:8], rid)
			h.Area[8], h.Area[9] = 3, uint8(wire.PolicyMajority)
			frame := wire.BeginFrame(nil, &h)
			frame = append(frame, name...)
			wire.EndFrame(frame, 0)
			rc.write(frame)
			rh, body := rc.read()
			e, err := wire.DecodeErrorReply(&rh, body)
			if err != nil || e.RequestID != rid || e.Code != wire.CodeBadStreamName ||
				!strings.Contains(string(e.Message), wire.StreamNameRule) {
				t.Fatalf("node %d: create %q: %s %+v %v, want CodeBadStreamName with the rule", n.ID, name, rh.Command, e, err)
			}
		}
	}
	for _, n := range lc.Nodes() {
		if !n.Running() {
			t.Fatalf("node %d stopped:\n%s", n.ID, nodeLogs(lc.Dir()))
		}
	}
	c, err := client.Dial(ctx, client.Config{Addrs: lc.ClientAddrs(), Cluster: cluster, Secret: []byte(lc.Secret())})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateStream(ctx, "orders-eu", client.StreamOptions{Copies: 3}); err != nil {
		t.Fatalf("create after the refusals: %v", err)
	}
}
