package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runConfig(args ...string) (string, int) {
	cmd := newConfigCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs(args)
	code := exitCode(cmd.Execute())
	return out.String(), code
}

// TestConfigDefaultsPassCheck: the printed defaults are a file `config check` accepts, with the empty
// secret warned about; an invalid option exits 9 naming the key; usage errors exit 2.
func TestConfigDefaultsPassCheck(t *testing.T) {
	cmd := newConfigCommand()
	var defaults bytes.Buffer
	cmd.SetOut(&defaults)
	cmd.SetArgs([]string{"defaults"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "node.toml")
	if err := os.WriteFile(path, defaults.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runConfig("check", "--config", path)
	if code != 0 || !strings.Contains(out, "valid: node 1 of cluster 1") || !strings.Contains(out, "warning: config: cluster.secret is empty") {
		t.Fatalf("check defaults: exit %d\n%s", code, out)
	}

	bad := strings.Replace(defaults.String(), "tick_ms = 10", "tick_ms = 7", 1)
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code = runConfig("check", "--config", path, "--json")
	var res checkResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if code != exitCheckInvalid || res.Valid || !strings.Contains(res.Error, "commit_broadcast_interval is 500 ms, not a whole multiple of tick_ms") {
		t.Fatalf("check tick_ms 7: exit %d %+v", code, res)
	}
	if _, code := runConfig("check", "--config", filepath.Join(dir, "missing.toml")); code != exitCheckInvalid {
		t.Fatalf("missing file: exit %d", code)
	}
	if _, code := runConfig("check"); code != exitUsage {
		t.Fatalf("no --config: exit %d", code)
	}
}
