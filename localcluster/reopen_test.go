package localcluster

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReopen_StartsAKeptClusterAgain: a cluster stopped in its own directory starts again from its
// files, with the same ids, addresses, secret and cluster id, and nothing formatted again; a directory
// without a cluster is refused. Exited closes when a node's process dies, and ExitError says how.
func TestReopen_StartsAKeptClusterAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c, err := Start(ctx, Options{Binary: binary, Dir: dir, ClusterID: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !Kept(dir) {
		t.Fatal("Kept false for a started cluster's directory")
	}
	exited := c.Node(2).Exited()
	if err := syscall.Kill(c.Node(2).PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("Exited not closed 20 s after the node's SIGKILL")
	}
	if err := c.Node(2).ExitError(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("ExitError %v, want the kill", err)
	}
	addrs, secret := c.ClientAddrs(), c.Secret()
	c.Close()
	meta := filepath.Join(dir, "node1", "data", "meta")
	before, err := os.ReadDir(meta)
	if err != nil {
		t.Fatal(err)
	}

	r, err := Reopen(ctx, Options{Binary: binary, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !slices.Equal(r.ClientAddrs(), addrs) || r.Secret() != secret || r.ClusterID() != 5 || len(r.Nodes()) != 3 {
		t.Fatalf("reopened: %v %q %d, want %v %q 5", r.ClientAddrs(), r.Secret(), r.ClusterID(), addrs, secret)
	}
	for _, n := range r.Nodes() {
		if !n.Running() {
			t.Fatalf("node %d not running after Reopen", n.ID)
		}
	}
	if after, err := os.ReadDir(meta); err != nil || len(after) < len(before) {
		t.Fatalf("node 1's metadata directory after Reopen: %v %v (before %d entries)", after, err, len(before))
	}
	if _, err := Reopen(ctx, Options{Binary: binary, Dir: t.TempDir()}); err == nil {
		t.Fatal("Reopen of an empty directory accepted")
	}
}
