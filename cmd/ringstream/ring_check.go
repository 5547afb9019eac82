package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/ringstream/ringstream/ring"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// errSelfTest: the ring check's self-test failed (the report says which step).
var errSelfTest = errors.New("ring check: self-test failed")

// newRingCommand builds `ringstream ring` and its subcommands.
func newRingCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ring",
		Short: "Inspect the io_uring ring on this machine",
	}
	cmd.AddCommand(newRingCheckCommand())
	return cmd
}

func newRingCheckCommand() *cobra.Command {
	var backend, taskRun, dir string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Report what the ring found on this machine and run a self-test through it",
		Long: "Opens a ring and prints the kernel, the io_uring setup flags accepted and refused (with why),\n" +
			"the features, the operations supported and the backend in use. Then it runs a self-test:\n" +
			"openat, write + fdatasync (linked), read-back and close through the ring in a temporary\n" +
			"directory under --dir; mkdirat, renameat, statx and unlinkat linked in one chain; and a\n" +
			"MsgRing round trip between two rings on two threads.\n" +
			"It exits non-zero when the self-test fails.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := parseBackend(backend)
			if err != nil {
				return usageErr(err)
			}
			cfg := ring.Config{Backend: b, TaskRun: ring.TaskRun(taskRun), Logger: slog.Default()}
			if err := cfg.Validate(); err != nil {
				return usageErr(fmt.Errorf("invalid --task-run %q: want coop or defer: %w", taskRun, err))
			}
			return runRingCheck(cmd.OutOrStdout(), cfg, dir)
		},
	}
	cmd.Flags().StringVar(&backend, "backend", "auto", "ring backend: auto, io_uring or fallback")
	cmd.Flags().StringVar(&taskRun, "task-run", string(ring.TaskRunCoop),
		"io_uring task-run setup flags to try first: coop (COOP_TASKRUN) or defer (DEFER_TASKRUN)")
	cmd.Flags().StringVar(&dir, "dir", os.TempDir(), "directory for the self-test's temporary files")
	return cmd
}

func parseBackend(s string) (ring.Backend, error) {
	switch b := ring.Backend(s); b {
	case ring.BackendAuto, ring.BackendIOUring, ring.BackendFallback:
		return b, nil
	}
	return "", fmt.Errorf("invalid --backend %q: want auto, io_uring or fallback", s)
}

// runRingCheck opens a ring on a locked thread, prints what it found and runs the self-test.
func runRingCheck(out io.Writer, cfg ring.Config, dir string) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, err := ring.New(cfg)
	if err != nil {
		return fmt.Errorf("ring check: open %s ring: %w", cfg.Backend, err)
	}
	defer r.Close()
	printInfo(out, r.Info())
	fileErr := checkFileIO(r, dir)
	reportStep(out, "write + fdatasync + read-back", fileErr)
	var pathErr error
	if missing := missingOps(r.Info(), ring.OpMkdirAt, ring.OpRenameAt, ring.OpStatx, ring.OpUnlinkAt); missing != "" {
		fmt.Fprintf(out, "self-test %-32s skipped: the kernel lacks %s\n", "mkdir + rename + stat + unlink:", missing)
	} else {
		pathErr = checkPathOps(r, dir)
		reportStep(out, "mkdir + rename + stat + unlink", pathErr)
	}
	msgErr := checkMsgRing(r, cfg)
	reportStep(out, "msg_ring between two rings", msgErr)
	if fileErr != nil || pathErr != nil || msgErr != nil {
		fmt.Fprintln(out, "self-test: FAILED")
		return errSelfTest
	}
	fmt.Fprintln(out, "self-test: ok")
	return nil
}

func printInfo(out io.Writer, info ring.Info) {
	fmt.Fprintf(out, "kernel:         %s\n", info.Kernel)
	fmt.Fprintf(out, "backend:        %s\n", info.Backend)
	if info.FallbackReason != "" {
		fmt.Fprintf(out, "fallback:       %s\n", info.FallbackReason)
	}
	fmt.Fprintf(out, "setup accepted: %s\n", listOrNone(info.SetupFlags))
	if len(info.SetupRefused) == 0 {
		fmt.Fprintf(out, "setup refused:  none\n")
	}
	for _, r := range info.SetupRefused {
		fmt.Fprintf(out, "setup refused:  %s\n", r)
	}
	fmt.Fprintf(out, "features:       %s\n", listOrNone(info.Features))
	fmt.Fprintf(out, "queue sizes:    sq %d, cq %d\n", info.SQEntries, info.CQEntries)
	var have, missing []string
	for _, op := range ring.Opcodes() {
		if info.Has(op) {
			have = append(have, op.String())
		} else {
			missing = append(missing, op.String())
		}
	}
	fmt.Fprintf(out, "ops supported:  %s\n", listOrNone(have))
	fmt.Fprintf(out, "ops missing:    %s\n", listOrNone(missing))
}

func listOrNone(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	return strings.Join(items, " ")
}

func reportStep(out io.Writer, step string, err error) {
	if err != nil {
		fmt.Fprintf(out, "self-test %-32s FAILED: %v\n", step+":", err)
		return
	}
	fmt.Fprintf(out, "self-test %-32s ok\n", step+":")
}

// completions is the check's Handler: it keeps every completion.
type completions struct{ got []ring.Completion }

func (c *completions) Complete(comp ring.Completion) { c.got = append(c.got, comp) }

// await drives r until c holds n completions.
func (c *completions) await(r ring.Ring, n int) error {
	for len(c.got) < n {
		if err := r.Wait(1); err != nil {
			return err
		}
		r.Dispatch()
	}
	return nil
}

// checkFileIO opens a file through the ring, writes 4 KiB linked to an fdatasync, reads it back,
// compares, and closes it, all in a fresh temporary directory under dir.
func checkFileIO(r ring.Ring, dir string) error {
	tmp, err := os.MkdirTemp(dir, "ringstream-check-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	c := &completions{}
	path := filepath.Join(tmp, "check.data")
	if err := r.Openat(c, 1, unix.AT_FDCWD, path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600, 0); err != nil {
		return fmt.Errorf("openat: %w", err)
	}
	if err := c.await(r, 1); err != nil {
		return err
	}
	if err := c.got[0].Err(); err != nil {
		return err
	}
	fd := int(c.got[0].Res)
	data := make([]byte, 4096)
	for i := range data {
		data[i] = byte(i*31 + 7)
	}
	if err := r.Write(c, 2, fd, data, 0, ring.Link); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if err := r.Fsync(c, 3, fd, true, 0); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	back := make([]byte, len(data))
	stepErr := c.await(r, 3)
	if stepErr == nil {
		stepErr = firstErr(c.got[1:3])
	}
	if stepErr == nil && c.got[1].Res != int32(len(data)) {
		stepErr = fmt.Errorf("short write: %d of %d bytes", c.got[1].Res, len(data))
	}
	if stepErr == nil {
		stepErr = r.Read(c, 4, fd, back, 0, 0)
		if stepErr == nil {
			stepErr = c.await(r, 4)
		}
		if stepErr == nil {
			stepErr = c.got[3].Err()
		}
		if stepErr == nil && !bytes.Equal(back, data) {
			stepErr = errors.New("read-back differs from what was written")
		}
	}
	if err := r.CloseFile(c, 5, fd, 0); err != nil {
		unix.Close(fd)
		return errors.Join(stepErr, err)
	}
	if err := c.await(r, len(c.got)+1); err != nil {
		return errors.Join(stepErr, err)
	}
	return errors.Join(stepErr, c.got[len(c.got)-1].Err())
}

// missingOps names the ops info lacks, or is empty.
func missingOps(info ring.Info, ops ...ring.Opcode) string {
	var names []string
	for _, op := range ops {
		if !info.Has(op) {
			names = append(names, op.String())
		}
	}
	return strings.Join(names, " ")
}

// checkPathOps runs one linked chain in a fresh temporary directory under dir: mkdirat, renameat of
// the new directory, statx of it under its new name, unlinkat of it; then the directory must be empty.
func checkPathOps(r ring.Ring, dir string) error {
	tmp, err := os.MkdirTemp(dir, "ringstream-check-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	c := &completions{}
	var st unix.Statx_t
	a, b := filepath.Join(tmp, "a"), filepath.Join(tmp, "b")
	steps := []func() error{
		func() error { return r.MkdirAt(c, 1, unix.AT_FDCWD, a, 0o700, ring.Link) },
		func() error { return r.RenameAt(c, 2, unix.AT_FDCWD, a, unix.AT_FDCWD, b, 0, ring.Link) },
		func() error { return r.Statx(c, 3, unix.AT_FDCWD, b, 0, unix.STATX_TYPE, &st, ring.Link) },
		func() error { return r.UnlinkAt(c, 4, unix.AT_FDCWD, b, unix.AT_REMOVEDIR, 0) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	if err := c.await(r, len(steps)); err != nil {
		return err
	}
	for _, comp := range c.got {
		if err := comp.Err(); err != nil {
			return err
		}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("statx of the renamed directory: mode %o, want a directory", st.Mode)
	}
	left, err := os.ReadDir(tmp)
	if err == nil && len(left) != 0 {
		err = fmt.Errorf("%d entries left after unlinkat", len(left))
	}
	return err
}

func firstErr(cs []ring.Completion) error {
	for _, c := range cs {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

// checkMsgRing starts a second ring of the same backend on its own locked thread. This ring posts
// it a message; the peer answers with tag+1 and res+1.
func checkMsgRing(r ring.Ring, cfg ring.Config) error {
	cfg.Backend = r.Info().Backend
	type started struct {
		peer ring.Ring
		err  error
	}
	ready := make(chan started)
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		peer, err := ring.New(cfg)
		ready <- started{peer, err}
		if err != nil {
			return
		}
		defer peer.Close()
		done <- echoOnce(peer, r)
	}()
	s := <-ready
	if s.err != nil {
		return fmt.Errorf("second ring: %w", s.err)
	}
	inbox := &completions{}
	r.SetMsgHandler(inbox)
	defer r.SetMsgHandler(nil)
	sent := &completions{}
	if err := r.MsgRing(sent, 1, s.peer, 41, 7000, 0); err != nil {
		<-done
		return fmt.Errorf("msg_ring: %w", err)
	}
	err := sent.await(r, 1)
	if err == nil {
		err = sent.got[0].Err()
	}
	if err != nil {
		<-done
		return err
	}
	if err := inbox.await(r, 1); err != nil {
		return err
	}
	if err := <-done; err != nil {
		return err
	}
	if got := inbox.got[0]; got.Tag != 7001 || got.Res != 42 {
		return fmt.Errorf("answer tag %d res %d, want tag 7001 res 42", got.Tag, got.Res)
	}
	return nil
}

// echoOnce waits on peer for one message and answers it on origin.
func echoOnce(peer, origin ring.Ring) error {
	inbox := &completions{}
	peer.SetMsgHandler(inbox)
	if err := inbox.await(peer, 1); err != nil {
		return err
	}
	m := inbox.got[0]
	sent := &completions{}
	if err := peer.MsgRing(sent, 1, origin, m.Res+1, m.Tag+1, 0); err != nil {
		return fmt.Errorf("answer: %w", err)
	}
	if err := sent.await(peer, 1); err != nil {
		return err
	}
	return sent.got[0].Err()
}
