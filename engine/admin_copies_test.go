package engine

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/ringstream/ringstream/engine/adminapi"
)

// copyRetry posts the operator's retry of a failed copy to n.
func copyRetry(t *testing.T, n *Node, stream string) (int, adminapi.CopyRetry) {
	t.Helper()
	resp, err := http.Post("http://"+n.AdminAddr().String()+"/v1/copies/"+stream+"/retry", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out adminapi.CopyRetry
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// TestNode_CopyRetryThroughAdminHTTP: POST /v1/copies/{stream}/retry reaches the copy's shard and
// names why it did nothing: a stream id that does not parse (400), no copy of it on the node (404).
// The retry of a failed copy itself is streamhost's (TestHeal_*, RetryCopy).
func TestNode_CopyRetryThroughAdminHTTP(t *testing.T) {
	c := newTestCluster(t, "")
	c.waitRegistered()
	n := c.nodes[1]
	if code, res := copyRetry(t, n, "abc"); code != http.StatusBadRequest || res.Started || res.Error == "" {
		t.Fatalf("retry of stream abc: %d %+v, want 400", code, res)
	}
	if code, res := copyRetry(t, n, "12345"); code != http.StatusNotFound || res.Started || res.Stream != 12345 {
		t.Fatalf("retry of a stream with no copy here: %d %+v, want 404", code, res)
	}
	if st := n.Status(); len(st.Failures) != 0 {
		t.Fatalf("failures %+v on a healthy node", st.Failures)
	}
}
