// Package fds counts this process's open file descriptors, for tests and benchmarks that check what
// a piece of code leaves open (Linux /proc/self/fd).
package fds

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Count is the number of descriptors this process has open.
func Count() (int, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("fds: %w", err)
	}
	return len(ents), nil
}

// Under is the number of descriptors this process has open on dir or on anything under it. A
// descriptor closed while the list is read is not counted.
func Under(dir string) (int, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("fds: %w", err)
	}
	n := 0
	for _, e := range ents {
		p, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && (p == dir || strings.HasPrefix(p, dir+"/")) {
			n++
		}
	}
	return n, nil
}
