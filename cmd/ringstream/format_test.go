package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/ringstream/ringstream/engine/config"
	"github.com/ringstream/ringstream/engine/metahost"
)

func runFormat(args ...string) (string, error) {
	cmd := newFormatCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestFormatCommand_FormatsOnceAndNeedsAMode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meta")
	base := []string{"--dir", dir, "--cluster", "42", "--node", "3", "--replica", "2"}
	if _, err := runFormat(base...); err == nil || !strings.Contains(err.Error(), "--new-cluster") {
		t.Fatalf("no mode: %v, want an error naming the two modes", err)
	}
	if _, err := runFormat(append(base, "--new-cluster", "--recover")...); err == nil {
		t.Fatal("both modes accepted")
	}
	out, err := runFormat(append(base, "--recover")...)
	if err != nil || !strings.Contains(out, "recovery") {
		t.Fatalf("format --recover: %q %v", out, err)
	}
	if _, err := runFormat(append(base, "--new-cluster")...); !errors.Is(err, metahost.ErrFormatted) {
		t.Fatalf("format again: %v, want metahost.ErrFormatted", err)
	}
	if _, err := runFormat("--dir", dir+"2", "--cluster", "42", "--node", "0", "--replica", "1", "--new-cluster"); err == nil {
		t.Fatal("node 0 accepted")
	}
}

// writeNodeConfig writes a node.toml for node id of a 4-node cluster whose metadata replicas are 1..3.
func writeNodeConfig(t *testing.T, dir string, id uint16) string {
	t.Helper()
	f := config.Defaults()
	f.Node = config.NodeSection{ID: id, DataDir: filepath.Join(dir, "data"), Listen: "127.0.0.1:7001"}
	f.Cluster.ID = 42
	f.Cluster.Peers = map[string]string{"1": "127.0.0.1:7001", "2": "127.0.0.1:7011", "3": "127.0.0.1:7021", "4": "127.0.0.1:7031"}
	f.Metadata.Replicas = []uint16{1, 2, 3}
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(f); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "node.toml")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFormatCommand_TakesItsIdsFromTheConfig: format --config formats data_dir/meta with the config's
// cluster, node and replica index; a flag that disagrees with the config (issue 24: --replica 7 for
// replicas = [1, 2, 3]) and a node without a replica are refused before anything is written.
func TestFormatCommand_TakesItsIdsFromTheConfig(t *testing.T) {
	dir := t.TempDir()
	path := writeNodeConfig(t, dir, 3)
	if _, err := runFormat("--config", path, "--replica", "7", "--new-cluster"); exitCode(err) != exitUsage ||
		!strings.Contains(err.Error(), "--replica 7 disagrees") {
		t.Fatalf("--replica 7 with the config: %v, want a usage refusal naming the flag", err)
	}
	if _, err := runFormat("--config", path, "--cluster", "9", "--new-cluster"); exitCode(err) != exitUsage {
		t.Fatalf("--cluster 9 with the config's 42: %v, want a usage refusal", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "meta")); err == nil {
		t.Fatal("a refused format wrote the directory")
	}
	out, err := runFormat("--config", path, "--replica", "2", "--new-cluster")
	if err != nil || out != "formatted "+filepath.Join(dir, "data", "meta")+": cluster 42 node 3 replica 2 (new cluster member)\n" {
		t.Fatalf("format --config: %q %v", out, err)
	}
	other := t.TempDir()
	if _, err := runFormat("--config", writeNodeConfig(t, other, 4), "--new-cluster"); exitCode(err) != exitUsage ||
		!strings.Contains(err.Error(), "holds no metadata replica") {
		t.Fatalf("node 4 outside metadata.replicas: %v, want a refusal", err)
	}
}
