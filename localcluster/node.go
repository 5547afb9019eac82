package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/ringstream/ringstream/engine/config"
)

// readyPollInterval is how often a starting node's admin HTTP is asked for /v1/status.
const readyPollInterval = 20 * time.Millisecond

// logTailBytes is how much of a node's serve.log an error quotes.
const logTailBytes = 4096

// Node is one node of the cluster: its id, directory and addresses, and its process while it runs.
// Its methods are safe for concurrent use.
type Node struct {
	ID uint16
	// Dir holds node.toml, data/ and serve.log.
	Dir string
	// PeerAddr, ClientAddr and AdminAddr are node.listen, client.listen and admin.listen (ip:port).
	PeerAddr, ClientAddr, AdminAddr string
	// KafkaAddr is kafka.listen (ip:port): every node of a local cluster serves Kafka clients.
	KafkaAddr string

	binary    string
	command   func(id uint16, argv []string) []string
	configure func(*config.File)

	mu     sync.Mutex
	proc   *process // nil when the node is not running
	starts int      // processes started
}

// process is one run of `ringstream serve`.
type process struct {
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has exited and been waited for
	waitErr error         // Wait's result, set before done closes
	started time.Time
}

// ConfigPath is the node's configuration file.
func (n *Node) ConfigPath() string { return filepath.Join(n.Dir, "node.toml") }

// DataDir is the node's data directory.
func (n *Node) DataDir() string { return filepath.Join(n.Dir, "data") }

// LogPath is the file the node's stdout and stderr are appended to.
func (n *Node) LogPath() string { return filepath.Join(n.Dir, "serve.log") }

// PID is the running process's id, or 0.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return 0
	}
	return n.proc.cmd.Process.Pid
}

// Starts is how many times the node's process was started.
func (n *Node) Starts() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.starts
}

// Running says whether the node's process has been started and has not exited.
func (n *Node) Running() bool {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// start runs `ringstream serve --config node.toml` in its own process group, its output appended to
// serve.log. The caller waits for readiness.
func (n *Node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		select {
		case <-n.proc.done:
		default:
			return fmt.Errorf("%w: node %d is running (pid %d)", ErrState, n.ID, n.proc.cmd.Process.Pid)
		}
	}
	logFile, err := os.OpenFile(n.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%w: node %d: %w", ErrStart, n.ID, err)
	}
	fmt.Fprintf(logFile, "--- localcluster: starting node %d at %s\n", n.ID, time.Now().UTC().Format(time.RFC3339Nano))
	argv := []string{n.binary, "serve", "--config", n.ConfigPath(), "--log-level", "info"}
	if n.command != nil {
		argv = n.command(n.ID, argv)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = n.Dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("%w: node %d: %s serve: %w", ErrStart, n.ID, n.binary, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{}), started: time.Now()}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	n.proc = p
	n.starts++
	return nil
}

// current is the node's latest process, or nil if it never started.
func (n *Node) current() *process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc
}

// waitReady polls the node's /v1/status until it answers 200, the process exits, or ctx ends.
func (n *Node) waitReady(ctx context.Context, hc *http.Client) error {
	p := n.current()
	if p == nil {
		return fmt.Errorf("%w: node %d was not started", ErrState, n.ID)
	}
	url := "http://" + n.AdminAddr + "/v1/status"
	tick := time.NewTicker(readyPollInterval)
	defer tick.Stop()
	for {
		if ok := n.statusOK(ctx, hc, url); ok {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%w: node %d exited before it was ready (%v); the end of %s:\n%s", ErrStart, n.ID,
				p.waitErr, n.LogPath(), n.LogTail())
		case <-ctx.Done():
			return fmt.Errorf("%w: node %d not ready after %v: %w; the end of %s:\n%s", ErrStart, n.ID,
				time.Since(p.started).Round(time.Millisecond), context.Cause(ctx), n.LogPath(), n.LogTail())
		case <-tick.C:
		}
	}
}

// statusOK is whether GET url answered 200.
func (n *Node) statusOK(ctx context.Context, hc *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// signal sends sig to the running process (to its whole group when group is set).
func (n *Node) signal(sig syscall.Signal, group bool) (*process, error) {
	p := n.current()
	if p == nil {
		return nil, fmt.Errorf("%w: node %d is not running", ErrState, n.ID)
	}
	select {
	case <-p.done:
		return nil, fmt.Errorf("%w: node %d is not running (it exited: %v)", ErrState, n.ID, p.waitErr)
	default:
	}
	pid := p.cmd.Process.Pid
	if group {
		pid = -pid
	}
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return nil, fmt.Errorf("localcluster: node %d: %v: %w", n.ID, sig, err)
	}
	return p, nil
}

// kill sends SIGKILL to the node's process group and waits until the process is reaped.
func (n *Node) kill() error {
	p, err := n.signal(syscall.SIGKILL, true)
	if err != nil {
		return err
	}
	<-p.done
	return nil
}

// terminate sends SIGTERM and waits for the exit or ctx; a non-zero exit is an error.
func (n *Node) terminate(ctx context.Context) error {
	p, err := n.signal(syscall.SIGTERM, false)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return fmt.Errorf("%w: node %d did not exit after SIGTERM: %w", ErrStop, n.ID, context.Cause(ctx))
	}
	if p.waitErr != nil {
		return fmt.Errorf("%w: node %d after SIGTERM: %w; the end of %s:\n%s", ErrStop, n.ID, p.waitErr,
			n.LogPath(), n.LogTail())
	}
	return nil
}

// waitPortsFree polls, every readyPollInterval, until the node's peer, client and admin ports can be
// bound on 127.0.0.1 with SO_REUSEADDR (as the node binds them), or ctx ends.
func (n *Node) waitPortsFree(ctx context.Context) error {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
		})
		return errors.Join(err, serr)
	}}
	tick := time.NewTicker(readyPollInterval)
	defer tick.Stop()
	for _, addr := range []string{n.PeerAddr, n.ClientAddr, n.AdminAddr, n.KafkaAddr} {
		for {
			ln, err := lc.Listen(ctx, "tcp", addr)
			if err == nil {
				ln.Close()
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: node %d: %s still in use: %w", ErrStart, n.ID, addr, err)
			case <-tick.C:
			}
		}
	}
	return nil
}

// LogTail is the last few KiB of the node's serve.log.
func (n *Node) LogTail() string {
	f, err := os.Open(n.LogPath())
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	off := max(st.Size()-logTailBytes, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	return string(b)
}
