package fds_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ringstream/ringstream/internal/fds"
)

// TestCountsWhatIsOpenUnderADirectory: opening two files under a directory adds two to both counts,
// a file elsewhere only to Count, and closing them takes them back off.
func TestCountsWhatIsOpenUnderADirectory(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	all0, _ := fds.Count()
	under0, err := fds.Under(dir)
	if err != nil || under0 != 0 {
		t.Fatalf("%d open under a new directory (%v)", under0, err)
	}
	var files []*os.File
	for _, p := range []string{filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(other, "c")} {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	all, _ := fds.Count()
	if under, _ := fds.Under(dir); under != 2 || all != all0+3 {
		t.Fatalf("under %d, all %d (from %d): want 2 and 3 more", under, all, all0)
	}
	for _, f := range files {
		f.Close()
	}
	if under, _ := fds.Under(dir); under != 0 {
		t.Fatalf("%d open under the directory after closing", under)
	}
}
