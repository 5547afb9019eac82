package partitiontest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binary is the ringstream binary built once for the package's tests.
var binary string

// TestMain builds cmd/ringstream once into a temporary directory; every test's nodes run it.
func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ringstream-partitiontest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "ringstream")
	cmd := exec.Command("go", "build", "-o", binary, "github.com/ringstream/ringstream/cmd/ringstream")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "partitiontest: go build of cmd/ringstream: %v\n", err)
		return 1
	}
	return m.Run()
}
