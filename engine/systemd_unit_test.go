package engine

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine/config"
)

// TestSystemdUnitVerifies: docs/ringstream.service runs `ringstream serve --config
// /etc/ringstream/node.toml` with a descriptor limit, restarts on failure, waits for /readyz at the
// default admin address, and `systemd-analyze verify` finds nothing to say about it. verify also
// checks that each command is executable: ringstream is not installed where the unit runs it, so the
// copy verified runs this test's own binary instead (every other line as shipped); curl must be there.
func TestSystemdUnitVerifies(t *testing.T) {
	unit, err := os.ReadFile(filepath.Join("..", "docs", "ringstream.service"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(unit)
	for _, want := range []string{
		"\nExecStart=/usr/local/bin/ringstream serve --config /etc/ringstream/node.toml --log-level info\n",
		"\nEnvironment=RINGSTREAM_ADMIN=" + config.Defaults().Admin.Listen + "\n",
		"\nExecStartPost=/usr/bin/curl --fail ",
		" http://${RINGSTREAM_ADMIN}/readyz\n",
		"\nRestart=on-failure\n",
		"\nLimitNOFILE=65536\n",
		"\nKillSignal=SIGTERM\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("docs/ringstream.service lacks %q", want)
		}
	}
	if t.Failed() {
		return
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not on PATH (Debian's systemd package): the unit is not verified")
	}
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		t.Skipf("the unit's readiness check runs /usr/bin/curl, which this machine lacks: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ringstream.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(text, "/usr/local/bin/ringstream", self)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, "verify", path)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || strings.TrimSpace(out.String()) != "" {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out.String())
	}
}
