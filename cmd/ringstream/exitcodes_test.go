package main

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/engine/adminapi"
	"github.com/ringstream/ringstream/wire"
)

// runRootCode runs `ringstream args...` through the root command, as main does, and returns the exit
// status and what it printed (stdout and stderr).
func runRootCode(args ...string) (int, string) {
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	return exitCode(root.Execute()), out.String()
}

// everyCommand lists the path (without "ringstream") of every command of the tree.
func everyCommand(c *cobra.Command, path []string, out *[][]string) {
	for _, sub := range c.Commands() {
		p := append(append([]string(nil), path...), sub.Name())
		*out = append(*out, p)
		everyCommand(sub, p, out)
	}
}

// TestExitCodes_UsageIs2ForEveryCommand (issue 21 finding 3): a bad flag, too many arguments and an
// unknown subcommand exit 2 on every command (bench and config check gave 1, `stream frob` printed help
// and gave 0), and --help exits 0, command by command.
func TestExitCodes_UsageIs2ForEveryCommand(t *testing.T) {
	var paths [][]string
	everyCommand(newRootCommand(), nil, &paths)
	if len(paths) < 25 {
		t.Fatalf("%d commands found, want the whole tree", len(paths))
	}
	for _, p := range paths {
		name := strings.Join(p, " ")
		if p[0] == "help" {
			continue // cobra's help topic command takes any words
		}
		if code, out := runRootCode(append(p, "--no-such-flag")...); code != exitUsage {
			t.Errorf("ringstream %s --no-such-flag: exit %d, want %d\n%s", name, code, exitUsage, out)
		}
		if cmd, _, err := newRootCommand().Find(p); err == nil && strings.HasSuffix(cmd.Use, "...") {
			// NAME...: any number of names; none is the usage error.
			if code, out := runRootCode(p...); code != exitUsage {
				t.Errorf("ringstream %s without a name: exit %d, want %d\n%s", name, code, exitUsage, out)
			}
		} else if code, out := runRootCode(append(p, "frob", "x", "y", "z")...); code != exitUsage {
			t.Errorf("ringstream %s frob x y z: exit %d, want %d\n%s", name, code, exitUsage, out)
		}
		if code, out := runRootCode(append(p, "--help")...); code != 0 {
			t.Errorf("ringstream %s --help: exit %d, want 0\n%s", name, code, out)
		}
	}
	for _, args := range [][]string{{}, {"frob"}, {"stream"}, {"stream", "frob"}, {"recovery", "frob"},
		{"config", "frob"}, {"cluster"}, {"bench", "frob"}, {"bench", "traffic", "--idle", "--busy"},
		{"config", "check"}, {"serve"}, {"sim", "--seeds", "0"}, {"streamsim", "--variant", "no such"},
		{"format"}, {"ring", "check", "--backend", "epoll"}, {"stream", "create", "x", "--policy", "most"}} {
		if code, out := runRootCode(args...); code != exitUsage {
			t.Errorf("ringstream %s: exit %d, want %d\n%s", strings.Join(args, " "), code, exitUsage, out)
		}
	}
	if code, out := runRootCode("stream", "frob"); !strings.Contains(out, `unknown subcommand "frob"`) || !strings.Contains(out, "create") {
		t.Errorf("stream frob: exit %d, does not name the subcommands:\n%s", code, out)
	}
}

// TestExitCodes_RulesAre7BeforeTheClusterIsAsked: a stream name or copy count that breaks wire's rule
// exits 7 with the rule's text, without a node (no cluster is running at the default address).
func TestExitCodes_RulesAre7BeforeTheClusterIsAsked(t *testing.T) {
	for _, args := range [][]string{
		{"stream", "create", "orders/eu"}, {"stream", "create", "a b/c"}, {"stream", "create", "naïve"},
		{"stream", "create", ".."}, {"stream", "create", "x2", "--copies", "8"}, {"stream", "create", "x2", "--copies", "0"},
		{"stream", "delete", "orders/eu"}, {"stream", "lookup", "a b/c"}, {"produce", "naïve"}, {"consume", "orders/eu"},
		{"recovery", "withdraw", "orders/eu"}, {"consume", "ok", "--consumer", "a b"},
	} {
		where := []string{"--addr", "127.0.0.1:1", "--timeout", "2s"}
		if args[0] == "recovery" {
			where = []string{"--admin", "127.0.0.1:1"}
		}
		code, out := runRootCode(append(args, where...)...)
		if code != exitInvalid {
			t.Errorf("ringstream %s: exit %d, want %d\n%s", strings.Join(args, " "), code, exitInvalid, out)
		}
		if !strings.Contains(out, "1 to 255 bytes") && !strings.Contains(out, wire.CopiesRule) {
			t.Errorf("ringstream %s: the rule is not in the message:\n%s", strings.Join(args, " "), out)
		}
	}
	if _, out := runRootCode("stream", "create", "--help"); !strings.Contains(out, wire.StreamNameRule) {
		t.Errorf("stream create --help does not state the name rule:\n%s", out)
	}
}

// TestExitCodes_Version: `ringstream version` and `--version` print the module version, the commit and
// the Go version, and exit 0.
func TestExitCodes_Version(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out := runRootCode(args...)
		if code != 0 || !strings.HasPrefix(out, "ringstream ") || !strings.Contains(out, " commit ") ||
			!strings.Contains(out, runtime.Version()) {
			t.Errorf("ringstream %s: exit %d %q", args[0], code, out)
		}
	}
	if !strings.Contains(exitCodesHelp, "7  the request breaks a rule") {
		t.Error("the root help does not list exit 7")
	}
}

// TestHandshakeRefusalIsWiresAuthErrorsOnly: a node's refusal is the handshake's only when it carries
// one of wire's handshake errors; "the cluster has 3 nodes" is not one (it exited 6 for an invalid
// request).
func TestHandshakeRefusalIsWiresAuthErrorsOnly(t *testing.T) {
	for msg, want := range map[string]bool{
		"5 copies; the cluster has 3 nodes":              false,
		"no cluster secret here, see the cluster config": false,
		wire.ErrAuthFailed.Error():                       true,
		"x: " + wire.ErrForeignCluster.Error() + ": 0x7": true,
	} {
		err := fmt.Errorf("client: create: %w", &client.Error{Code: wire.CodeInvalidRequest, Message: msg})
		if got := handshakeRefusal(err); got != want {
			t.Errorf("%q: handshake refusal %v, want %v", msg, got, want)
		}
	}
}

// TestRecoveryAskedOfABackupIs8: a recovery action answered by a node that is not the metadata
// primary exits 8, whether or not it names the primary, and whatever the stream (only the primary may
// say a stream is unknown); an unknown stream on the primary is 3.
func TestRecoveryAskedOfABackupIs8(t *testing.T) {
	for _, c := range []struct {
		status int
		res    adminapi.RecoveryAction
		want   int
	}{
		{409, adminapi.RecoveryAction{Action: "withdraw", Stream: "nosuch", Error: "node 2 is not the metadata primary", Primary: 1}, exitNotPrimary},
		{409, adminapi.RecoveryAction{Action: "withdraw", Stream: "nosuch", Error: "node 4 is not the metadata primary"}, exitNotPrimary},
		{409, adminapi.RecoveryAction{Action: "withdraw", Stream: "nosuch", Error: `no stream is named "nosuch"`}, exitNotFound},
	} {
		if got := exitCode(recoveryErr(c.status, &c.res, []string{"127.0.0.1:1"})); got != c.want {
			t.Errorf("%+v: exit %d, want %d", c.res, got, c.want)
		}
	}
}
