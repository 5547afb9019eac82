package localcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// RunWithBinary is the TestMain of a test package that runs real nodes: it builds cmd/ringstream once
// into a temporary directory, stores its path in *binary, runs the tests (m is the *testing.M) and
// removes the directory. It returns the exit status for os.Exit.
func RunWithBinary(m interface{ Run() int }, binary *string) int {
	dir, err := os.MkdirTemp("", "ringstream-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	*binary = filepath.Join(dir, "ringstream")
	cmd := exec.Command("go", "build", "-o", *binary, "github.com/ringstream/ringstream/cmd/ringstream")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "go build of cmd/ringstream: %v\n", err)
		return 1
	}
	return m.Run()
}
