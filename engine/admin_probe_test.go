package engine

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/shard"
)

// adminRaw is GET path on n's admin listener: the status code and body.
func adminRaw(t *testing.T, n *Node, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get("http://" + n.AdminAddr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// gatedRing holds every Openat of its shard until open is closed: a disk so slow that the copies of
// that shard cannot open while the rest of the node runs.
type gatedRing struct {
	ring.Ring
	open <-chan struct{}
}

func (g gatedRing) Openat(h ring.Handler, tag uint64, dirfd int, path string, flags int, mode uint32, fl ring.Flags) error {
	<-g.open
	return g.Ring.Openat(h, tag, dirfd, path, flags, mode, fl)
}

// readyz is n's /readyz: its status code and answer.
func readyz(t *testing.T, n *Node) (int, Readiness) {
	t.Helper()
	code, body := adminRaw(t, n, "/readyz")
	var rd Readiness
	if err := json.Unmarshal(body, &rd); err != nil {
		t.Fatalf("/readyz %d: %q: %v", code, body, err)
	}
	if (code == http.StatusOK) != rd.Ready || (code != http.StatusOK && code != http.StatusServiceUnavailable) || rd.Reason == "" {
		t.Fatalf("/readyz %d with %+v", code, rd)
	}
	return code, rd
}

// TestNode_ReadyzOnlyAfterTheCopiesOpened: a follower's node restarted over its directory, with the
// disk of its stream's shard holding every open, answers /healthz 200 at once and /readyz 503: first
// while its metadata replica has not heard the primary, then, caught up, naming the copy that has not
// opened. Once the disk lets the open through, /readyz turns 200 with the copy open, and stays 200
// even when the other two nodes die and the metadata group has no quorum.
func TestNode_ReadyzOnlyAfterTheCopiesOpened(t *testing.T) {
	c := newFailoverCluster(t, 50)
	defer c.stop()
	stream := c.createStream("probed")
	for i := 0; shard.ShardOf(stream, 2) != 1; i++ { // off shard 0, where the metadata replica runs
		stream = c.createStream(fmt.Sprintf("probed-%d", i))
	}
	var asg meta.Assignment
	c.metaState(1, func(s *meta.State) { asg, _ = s.Assignment(stream) })
	var follower uint16
	for _, f := range asg.Followers {
		if !c.nodes[f].Meta().Status().Primary {
			follower = f
		}
	}
	if follower == 0 {
		t.Fatalf("no follower of %+v outside the metadata primary", asg)
	}
	waitForTB(t, "every node ready before the restart", func() bool {
		for _, n := range c.nodes {
			if code, _ := readyz(t, n); code != http.StatusOK {
				return false
			}
		}
		return true
	})
	c.nodes[follower].Kill()
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	defer release() // runs before c.stop: a held shard would not stop
	n, err := NewNodeWithOptions(failoverConfig(t, follower, c.dir(follower), c.peer[follower], c.client[follower], 50),
		quietLogger(), NodeOptions{DrainTimeout: time.Millisecond, WrapRing: func(i int, r ring.Ring) ring.Ring {
			if i == 1 {
				return gatedRing{Ring: r, open: gate}
			}
			return r
		}})
	if err != nil {
		t.Fatal(err)
	}
	c.nodes[follower] = n
	c.start(follower)
	if code, body := adminRaw(t, n, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d %s right after Start", code, body)
	}
	copyReason := fmt.Sprintf("copies assigned to this node not open yet (first: stream %d", stream)
	var reasons []string
	note := func(r string) {
		if len(reasons) == 0 || reasons[len(reasons)-1] != r {
			reasons = append(reasons, r)
		}
	}
	waitForTB(t, "/readyz naming the unopened copy", func() bool {
		code, rd := readyz(t, n)
		if code == http.StatusOK {
			t.Fatalf("/readyz 200 with the copy's open held; reasons before: %q", reasons)
		}
		note(rd.Reason)
		return strings.Contains(rd.Reason, copyReason)
	})
	for range 20 {
		if code, rd := readyz(t, n); code == http.StatusOK {
			t.Fatalf("/readyz 200 with the copy's open held; reasons before: %q", reasons)
		} else {
			note(rd.Reason)
		}
		time.Sleep(5 * time.Millisecond)
	}
	release()
	waitForTB(t, "/readyz 200", func() bool {
		code, rd := readyz(t, n)
		note(rd.Reason)
		return code == http.StatusOK
	})
	if st := c.copyState(follower, stream); !st.Open || st.Epoch < asg.Epoch {
		t.Fatalf("/readyz 200 with the copy %+v (assignment epoch %d); reasons before: %q", st, asg.Epoch, reasons)
	}
	t.Logf("reasons before ready: %q", reasons)
	if code, rd := readyz(t, n); code != http.StatusOK {
		t.Fatalf("/readyz %d %+v after it was ready", code, rd)
	}
	for id, other := range c.nodes { // the metadata group loses its quorum: readiness stays
		if id != follower {
			other.Kill()
		}
	}
	waitForTB(t, "the replica out of its normal view", func() bool { return !n.Meta().Status().Normal })
	if code, rd := readyz(t, n); code != http.StatusOK {
		t.Fatalf("/readyz %d %+v once the quorum was gone, after it was ready", code, rd)
	}
}
