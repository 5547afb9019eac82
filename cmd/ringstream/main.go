// Command ringstream is the ringstream binary: one root command, with each part of the system adding
// its subcommands from a constructor (root.AddCommand(newXCommand())).
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
			"and the cluster secret from RINGSTREAM_SECRET, --secret-file or --secret); status, attention and\n" +
			"recovery use a node's admin HTTP listener (--admin).\n\n" + exitCodesHelp,
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
	root.AddCommand(newStatusCommand())
	root.AddCommand(newAttentionCommand())
	root.AddCommand(newRecoveryCommand())
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
