package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/engine"
	"github.com/ringstream/ringstream/engine/config"
)

// newServeCommand is `ringstream serve --config node.toml`: one node, until SIGTERM or SIGINT.
//
// The first signal starts the clean shutdown (engine.Node.Shutdown: produces in flight answered, the
// controller told, logs closed), bounded by --shutdown-timeout; a second signal, or the timeout,
// stops the node at once. A clean shutdown exits 0; a node that could not start exits 1 with the
// cause (configuration, data directory, listeners); one whose stop failed exits 11 (exitShutdownStuck).
func newServeCommand() *cobra.Command {
	var path string
	var shutdownTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run one ringstream node from its configuration file",
		Long: "Run one ringstream node: its shards, peer links, metadata replica (when it is one), controller, " +
			"stream copies, client listener and admin HTTP (/metrics, /v1/status, /v1/attention, /debug/pprof/).\n\n" +
			"The metadata replica's directory must have been made by `ringstream format`. SIGTERM or SIGINT " +
			"shuts the node down cleanly (exit 0); a second signal stops it at once.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return usageErr(errors.New("serve: --config is required (see `ringstream config defaults`)"))
			}
			cfg, err := config.Load(path)
			if err != nil {
				return err
			}
			level, err := parseLogLevel(cmd.Flag("log-level").Value.String())
			if err != nil {
				return err
			}
			slog.SetDefault(cfg.Logger(cmd.ErrOrStderr(), level)) // log.format, for the node and its rings
			for _, w := range cfg.Warnings {
				slog.Warn(w)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return serve(ctx, cmd.ErrOrStderr(), cfg, shutdownTimeout)
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "the node's TOML configuration file")
	cmd.Flags().DurationVar(&shutdownTimeout, "shutdown-timeout", 10*time.Second,
		"how long a clean shutdown may wait for produces in flight before the node stops anyway")
	return cmd
}

// serve runs the node until ctx ends, then shuts it down.
func serve(ctx context.Context, out io.Writer, cfg *config.Config, shutdownTimeout time.Duration) error {
	logger := slog.Default()
	holdPs(cfg, logger)
	n, err := engine.NewNode(cfg, logger)
	if err != nil {
		return err
	}
	if err := n.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "ringstream: node %d serving: peers %s, clients %s, admin %s\n", n.ID(), n.PeerAddr(),
		n.ClientAddr(), n.AdminAddr())
	if k := n.KafkaAddr(); k.IsValid() {
		fmt.Fprintf(out, "ringstream: node %d serving Kafka clients at %s\n", n.ID(), k)
	}
	<-ctx.Done()
	fmt.Fprintf(out, "ringstream: node %d shutting down (at most %v)\n", n.ID(), shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	again := make(chan os.Signal, 1)
	signal.Notify(again, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(again)
	go func() {
		select {
		case <-again:
			logger.Warn("second signal: stopping at once")
			cancel()
		case <-sctx.Done():
		}
	}()
	if err := n.Shutdown(sctx); err != nil {
		return &exitError{code: exitShutdownStuck, err: fmt.Errorf("serve: shutdown: %w", err)}
	}
	fmt.Fprintf(out, "ringstream: node %d stopped\n", n.ID())
	return nil
}

// holdPs lets every shard's ring wait with its P held (ring.Config.WaitHoldsP: sysmon no longer
// wakes every 20 us to take it back) and keeps one P more than the shards for the node's other
// goroutines (admin API, timers, the GC's workers), which a waiting shard no longer lends its P.
func holdPs(cfg *config.Config, logger *slog.Logger) {
	cfg.WaitHoldsP = true
	if p := runtime.GOMAXPROCS(0); p < cfg.ShardCount+1 {
		runtime.GOMAXPROCS(cfg.ShardCount + 1)
		logger.Info("serve: GOMAXPROCS raised to shards + 1: each shard holds its P while it waits",
			"gomaxprocs", cfg.ShardCount+1, "was", p, "shards", cfg.ShardCount)
	}
}
