// Command ringstream is the ringstream binary: one root command, with each part of the system adding
// its subcommands from a constructor (root.AddCommand(newXCommand())).
//
// Where the commands find a cluster: the client and admin commands read the current profile
// ($XDG_CONFIG_HOME/ringstream/profiles/NAME.toml, ~/.config without XDG_CONFIG_HOME; the current
// one named in $XDG_CONFIG_HOME/ringstream/current), which `cluster up` writes; per setting, a flag
// given wins over the environment (RINGSTREAM_ADDR, RINGSTREAM_ADMIN, RINGSTREAM_CLUSTER,
// RINGSTREAM_SECRET), which wins over the profile, which wins over the built-in defaults (profile.go
// holds the rules). --admin is a list: the commands that need the metadata primary find it there.
//
// main owns the process-wide setup only: slog's default logger (text on stderr, level from
// --log-level) and the exit status. It never holds state between subcommands.
package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(exitCode(newRootCommand().Execute()))
}

// newRootCommand builds `ringstream` with every subcommand attached.
func newRootCommand() *cobra.Command {
	var logLevel string
	root := &cobra.Command{
		Use:   "ringstream",
		Short: "ringstream: a replicated, durable stream engine on io_uring",
		Long: "ringstream: a replicated, durable stream engine on io_uring.\n\n" +
			"The client commands (stream, produce, consume) reach the nodes' client listeners (--addr, --cluster,\n" +
			"and the cluster secret from --secret-file, --secret or RINGSTREAM_SECRET); status, attention,\n" +
			"cluster health, stream describe and recovery use the nodes' admin HTTP listeners (--admin, a list).\n\n" +
			"Profiles: every one of these reads the current profile ($XDG_CONFIG_HOME/ringstream/profiles/NAME.toml,\n" +
			"~/.config without XDG_CONFIG_HOME; the current one is named in $XDG_CONFIG_HOME/ringstream/current),\n" +
			"which `cluster up` writes: its cluster id, client and admin addresses and secret file. A flag given\n" +
			"wins over the environment (RINGSTREAM_ADDR, RINGSTREAM_ADMIN, RINGSTREAM_CLUSTER, RINGSTREAM_SECRET),\n" +
			"which wins over the profile. RINGSTREAM_PROFILE or --profile-name read another profile; see\n" +
			"`ringstream profile --help`.\n\n" + exitCodesHelp,
		SilenceUsage:  true,
		SilenceErrors: false,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			level, err := parseLogLevel(logLevel)
			if err != nil {
				return err
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level})))
			return nil
		},
	}
	root.PersistentFlags().StringVar(&logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	root.AddCommand(newRingCommand())
	root.AddCommand(newSimCommand())
	root.AddCommand(newStreamSimCommand())
	root.AddCommand(newFormatCommand())
	root.AddCommand(newConfigCommand())
	root.AddCommand(newServeCommand())
	root.AddCommand(newClusterCommand())
	root.AddCommand(newStreamCommand())
	root.AddCommand(newProduceCommand())
	root.AddCommand(newConsumeCommand())
	root.AddCommand(newCursorCommand())
	root.AddCommand(newStatusCommand())
	root.AddCommand(newAttentionCommand())
	root.AddCommand(newRecoveryCommand())
	root.AddCommand(newProfileCommand())
	root.AddCommand(newBenchCommand())
	root.AddCommand(newVersionCommand())
	root.Version = versionText()
	root.SetVersionTemplate("{{.Version}}\n")
	root.InitDefaultCompletionCmd() // now, so enforceUsage reaches it too
	enforceUsage(root)
	return root
}

// parseLogLevel turns --log-level into a slog level.
func parseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("invalid --log-level %q: want debug, info, warn or error", s)
}
