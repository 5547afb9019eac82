package segment

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// tombSuffix names a copy directory being deleted (see Delete).
const tombSuffix = ".deleted"

// Delete removes the copy's files and directory through the ring; Done reports OpDelete with tag.
// An open copy is closed first (what is queued is committed; a failure there is logged and the
// delete goes on). The directory is first renamed to <dir>.deleted and its parent fsynced, so a
// crash leaves either the whole copy or a tombstone, never a partial copy that would open; then
// the tombstone's files and directories are removed and the parent fsynced again. A tombstone
// left by an earlier crash is removed first. Delete also works on a closed copy, and on one whose
// open failed.
func (c *Copy) Delete(tag uint64) error {
	if !c.closed {
		if err := c.usable(); err != nil {
			return err
		}
	}
	return c.startJob(OpDelete, tag, true, func(*job) error { return c.delete() })
}

// DeleteSync is Delete driving the ring itself (tools and tests).
func (c *Copy) DeleteSync() error {
	if c.job != nil {
		return ErrBusy
	}
	err := c.delete()
	c.closed = true
	if c.js != nil {
		c.js.removeCopy(c)
	}
	return err
}

func (c *Copy) delete() error {
	if !c.closed {
		if err := c.close(); err != nil {
			c.cfg.Logger.Warn("segment: close before delete failed", "dir", c.dir, "err", err)
		}
	}
	tomb := c.dir + tombSuffix
	if err := c.sr.removeTree(tomb); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	if err := c.sr.rename(unix.AT_FDCWD, c.dir, unix.AT_FDCWD, tomb); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // nothing left to delete
		}
		return fmt.Errorf("segment: rename %s: %w", c.dir, err)
	}
	if err := c.sr.fsyncDirOf(c.dir); err != nil {
		return err
	}
	if err := c.sr.removeTree(tomb); err != nil {
		return err
	}
	return c.sr.fsyncDirOf(c.dir)
}

// removeTree removes path and everything under it. The directory listing is a plain syscall
// (io_uring has no getdents); the unlinks go through syncRing.unlink.
func (s *syncRing) removeTree(path string) error {
	entries, err := os.ReadDir(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("segment: list %s: %w", path, pe.Err)
		}
		return fmt.Errorf("segment: list %s: %w", path, err)
	}
	for _, e := range entries {
		p := filepath.Join(path, e.Name())
		if e.IsDir() {
			if err := s.removeTree(p); err != nil {
				return err
			}
			continue
		}
		if err := s.unlink(unix.AT_FDCWD, p, false); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("segment: remove %s: %w", p, err)
		}
	}
	if err := s.unlink(unix.AT_FDCWD, path, true); err != nil {
		return fmt.Errorf("segment: remove %s: %w", path, err)
	}
	return nil
}
