package main

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// The exit statuses of every ringstream command: one table, each status with one meaning, listed in
// the root command's help and in README. A command that cannot meet a status never returns it.
const (
	exitFailure       = 1  // a failure not listed below
	exitUsage         = 2  // bad flags or arguments, an unknown or a missing subcommand
	exitNotFound      = 3  // no such stream, no cursor for the consumer, or no pending recovery
	exitExists        = 4  // stream create: the name is taken
	exitUnavailable   = 5  // no node answered, the stream has no owner, or the retries ran out
	exitAuth          = 6  // the nodes refused the handshake: wrong cluster id or secret
	exitInvalid       = 7  // the request breaks one of the cluster's rules (name, copies, policy, count, size)
	exitNotPrimary    = 8  // a recovery action found no metadata primary in the admin list
	exitCheckInvalid  = 9  // config check: the file does not load
	exitBenchFailed   = 10 // bench: the run was carried out and failed its verification
	exitShutdownStuck = 11 // serve: the node's shutdown failed
)

const exitCodesHelp = `Exit status of every command:
  0  success (and --help, version)
  1  a failure not listed below (a protocol error, a corrupt batch, an I/O error, a node that could not start)
  2  bad flags or arguments, an unknown or a missing subcommand
  3  no such stream, no cursor for the consumer (cursor describe, delete), or no pending recovery to act on
  4  stream create: a stream of that name exists
  5  the cluster is unavailable: no node answered, the stream has no owner, or the retries ran out
  6  the handshake was refused: wrong cluster id or secret
  7  the request breaks a rule of the cluster (stream or consumer name, copies, policy); the message names it
  8  recovery: no node of the admin list is the metadata primary; the message names the primary if known
  9  config check: the file does not load (the error names the key and the rule)
  10 bench: the run was carried out and failed (a confirmed record missing or duplicated, no failover)
  11 serve: the node's shutdown failed`

// exitError is an error that sets the process's exit status (exitFailure for any other error).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode is the exit status for what Execute returned; cobra has printed the error.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := errors.AsType[*exitError](err); ok {
		return ee.code
	}
	return exitFailure
}

// usageErr marks err as a usage error (exit 2); an error that has its status already keeps it.
func usageErr(err error) error {
	if _, ok := errors.AsType[*exitError](err); ok {
		return err
	}
	return &exitError{code: exitUsage, err: err}
}

// enforceUsage gives every command of the tree under cmd the usage status for what cobra refuses
// itself: a bad flag, a wrong argument count, and, for a command that only groups subcommands, an
// unknown or missing subcommand (cobra would print the help and exit 0).
func enforceUsage(cmd *cobra.Command) {
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr(err) })
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				return usageErr(err)
			}
			return nil
		}
	}
	if cmd.HasSubCommands() && cmd.Run == nil && cmd.RunE == nil {
		cmd.Args = cobra.ArbitraryArgs
		cmd.RunE = groupRun
	}
	for _, sub := range cmd.Commands() {
		enforceUsage(sub)
	}
}

// groupRun runs a command that only groups subcommands: with none named, or an unknown one, it prints
// the subcommands to stderr and exits with the usage status.
func groupRun(cmd *cobra.Command, args []string) error {
	var names []string
	for _, sub := range cmd.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	if len(args) == 0 {
		return usageErr(fmt.Errorf("%s needs a subcommand: %s (see --help)", cmd.CommandPath(), strings.Join(names, ", ")))
	}
	return usageErr(fmt.Errorf("unknown subcommand %q for %s: want %s (see --help)", args[0], cmd.CommandPath(),
		strings.Join(names, ", ")))
}

// versionText is what `ringstream version` and `--version` print: the module version, the commit
// (with "+dirty" when the tree had changes) and the Go version, from the build information.
func versionText() string {
	module, commit, goVersion := "(unknown)", "unknown (built without VCS information)", "(unknown)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		module, goVersion = bi.Main.Version, bi.GoVersion
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty {
			commit += "+dirty"
		}
	}
	return fmt.Sprintf("ringstream %s commit %s %s", module, commit, goVersion)
}

// newVersionCommand is `ringstream version`.
func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version, the commit and the Go version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), versionText())
			return nil
		},
	}
}
