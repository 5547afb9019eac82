package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/ringstream/ringstream/engine/config"
	"github.com/ringstream/ringstream/localcluster"
	"github.com/ringstream/ringstream/wire"
)

// buildBinary builds this command into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary and runs real processes")
	}
	bin := filepath.Join(t.TempDir(), "ringstream")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// wireClient is a bare client connection for the serve tests.
type wireClient struct {
	t       *testing.T
	c       net.Conn
	cluster uint64
	rid     uint64
}

func dialWire(t *testing.T, addr string, cluster uint64, secret string) *wireClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	w := &wireClient{t: t, c: c, cluster: cluster, rid: 10}
	hello := wire.ClientHello{RequestID: 1, Cluster: cluster, Revision: wire.Revision}
	_, _ = rand.Read(hello.Nonce[:])
	w.write(wire.AppendClientHello(nil, &hello))
	h, body := w.read()
	ch, err := wire.DecodeClientChallenge(&h, body)
	if err != nil {
		t.Fatalf("challenge: %v", err)
	}
	w.write(wire.AppendClientProof(nil, cluster, &wire.ClientProof{RequestID: 2,
		Proof: wire.ClientHelloProof([]byte(secret), &hello, &ch)}))
	return w
}

func (w *wireClient) write(b []byte) {
	if _, err := w.c.Write(b); err != nil {
		w.t.Fatal(err)
	}
}

func (w *wireClient) read() (wire.Header, []byte) {
	w.t.Helper()
	_ = w.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, wire.HeaderSize)
	if _, err := io.ReadFull(w.c, buf); err != nil {
		w.t.Fatal(err)
	}
	h, err := wire.ParseHeader(buf)
	if err != nil {
		w.t.Fatal(err)
	}
	buf = append(buf, make([]byte, h.BodySize)...)
	if _, err := io.ReadFull(w.c, buf[wire.HeaderSize:]); err != nil {
		w.t.Fatal(err)
	}
	h, body, err := wire.ParseFrame(buf)
	if err != nil {
		w.t.Fatal(err)
	}
	return h, body
}

// call sends a request frame built for request id rid and returns the reply, or the error reply.
func (w *wireClient) call(build func(rid uint64) []byte) (wire.Header, []byte, *wire.ErrorReply) {
	w.t.Helper()
	w.rid++
	w.write(build(w.rid))
	h, body := w.read()
	if h.Command == wire.CommandErrorReply {
		e, err := wire.DecodeErrorReply(&h, body)
		if err != nil {
			w.t.Fatal(err)
		}
		return h, body, &e
	}
	return h, body, nil
}

// retry calls until the reply is not CodeUnavailable or CodeNotYet (a node still registering, a copy opening).
func (w *wireClient) retry(what string, build func(rid uint64) []byte) (wire.Header, []byte) {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		h, body, e := w.call(build)
		if e == nil {
			return h, body
		}
		if (e.Code != wire.CodeUnavailable && e.Code != wire.CodeNotYet) || time.Now().After(deadline) {
			w.t.Fatalf("%s: %v %s", what, e.Code, e.Message)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServe_ThreeProcessesFormClusterAndStopOnSIGTERM: three `ringstream serve` processes on
// 127.0.0.1 (formatted by `ringstream format`) form a cluster; a 3-copy stream is created, looked up
// and produced to through the client protocol, each produce confirmed; a node restarted with another
// cluster secret is refused by the others (counted in their metrics), a data directory served with
// another cluster id is refused naming both ids, and SIGTERM stops every node with exit status 0
// within the shutdown bound.
func TestServe_ThreeProcessesFormClusterAndStopOnSIGTERM(t *testing.T) {
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lc, err := localcluster.Start(ctx, localcluster.Options{Binary: bin, Dir: t.TempDir(), Shards: 2, ClusterID: 9})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	w := dialWire(t, lc.Node(2).ClientAddr, 9, lc.Secret())
	from := wire.From{Cluster: 9}
	h, body := w.retry("create", func(rid uint64) []byte {
		return wire.AppendCreateStream(nil, from, &wire.CreateStream{RequestID: rid, Name: []byte("orders"), Copies: 3,
			Policy: wire.PolicyMajority})
	})
	created, err := wire.DecodeCreateStreamReply(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	h, body = w.retry("lookup", func(rid uint64) []byte {
		return wire.AppendLookupStream(nil, from, &wire.LookupStream{RequestID: rid, Name: []byte("orders")})
	})
	look, err := wire.DecodeLookupStreamReply(&h, body)
	if err != nil || look.Owner == 0 {
		t.Fatalf("lookup %+v: %v", look, err)
	}
	owner := dialWire(t, string(look.OwnerAddr), 9, lc.Secret())
	for seq := uint64(1); seq <= 20; seq++ {
		h, body = owner.retry("produce", func(rid uint64) []byte {
			return wire.AppendProduce(nil, from, &wire.Produce{RequestID: rid, Stream: created.Stream, ProducerID: 1,
				Sequence: seq, Count: 1, Batch: fmt.Appendf(nil, "record %d", seq)})
		})
		r, err := wire.DecodeProduceReply(&h, body)
		if err != nil || r.BaseOffset != seq-1 || r.Duplicate {
			t.Fatalf("produce %d: %+v %v", seq, r, err)
		}
	}

	// Node 3 restarted with another secret: the others refuse its links and count it.
	if err := lc.Terminate(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := lc.Reconfigure(3, func(f *config.File) { f.Cluster.Secret = strings.Repeat("w", 32) }); err != nil {
		t.Fatal(err)
	}
	if err := lc.Restart(ctx, 3); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, lc.Node(1).AdminAddr, "ringstream_shard_auth_refused_total")

	// Node 1's directory served as a node of cluster 10: refused, naming both ids.
	if err := lc.Terminate(ctx, 1); err != nil {
		t.Fatal(err)
	}
	other := wrongClusterConfig(t, lc.Node(1).ConfigPath())
	out, err := exec.CommandContext(ctx, bin, "serve", "--config", other).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !bytes.Contains(out, []byte("cluster 9 node 1")) ||
		!bytes.Contains(out, []byte("cluster 10 node 1")) {
		t.Fatalf("serve of node 1's directory as cluster 10: %v\n%s", err, out)
	}

	for _, id := range []uint16{2, 3} {
		start := time.Now()
		tctx, tcancel := context.WithTimeout(ctx, 15*time.Second)
		err := lc.Terminate(tctx, id)
		tcancel()
		if err != nil {
			t.Fatalf("SIGTERM node %d: %v", id, err)
		}
		t.Logf("node %d exited 0 %v after SIGTERM", id, time.Since(start))
	}
}

// wrongClusterConfig writes a copy of the config at path with cluster.id 10 and returns its path.
func wrongClusterConfig(t *testing.T, path string) string {
	t.Helper()
	var f config.File
	if _, err := toml.DecodeFile(path, &f); err != nil {
		t.Fatal(err)
	}
	f.Cluster.ID = 10
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(f); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "other.toml")
	if err := os.WriteFile(out, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitMetric waits until a metric line named name on the admin address has a value above 0.
func waitMetric(t *testing.T, admin, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + admin + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(line, name+"{") && !strings.HasSuffix(line, " 0") {
					return
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s stayed 0 on %s", name, admin)
}
