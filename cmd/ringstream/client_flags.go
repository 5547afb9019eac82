package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/wire"
)

// clientFlags are the flags every command that talks to the nodes' client listener shares.
type clientFlags struct {
	addrs      []string
	cluster    uint64
	secret     string
	secretFile string
	timeout    time.Duration
	asJSON     bool
}

const (
	envAddr    = "RINGSTREAM_ADDR"
	envCluster = "RINGSTREAM_CLUSTER"
	envSecret  = "RINGSTREAM_SECRET"
	envAdmin   = "RINGSTREAM_ADMIN"
)

func (f *clientFlags) register(fs *pflag.FlagSet, withJSON bool) {
	addrs := []string{"127.0.0.1:7002"}
	if v := os.Getenv(envAddr); v != "" {
		addrs = strings.Split(v, ",")
	}
	fs.StringSliceVar(&f.addrs, "addr", addrs, "client addresses of some nodes, host:port, comma-separated (env "+envAddr+")")
	fs.Uint64Var(&f.cluster, "cluster", 1, "the cluster id of the nodes (env "+envCluster+")")
	fs.StringVar(&f.secret, "secret", "", "the cluster secret (env "+envSecret+"; prefer the env or --secret-file)")
	fs.StringVar(&f.secretFile, "secret-file", "", "a file holding the cluster secret (trailing newline dropped)")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for the cluster (per request, retries included)")
	if withJSON {
		fs.BoolVar(&f.asJSON, "json", false, "print the result as JSON")
	}
}

// config turns the flags and the environment into a client.Config.
func (f *clientFlags) config(cmd *cobra.Command) (client.Config, error) {
	cfg := client.Config{Addrs: f.addrs, Cluster: f.cluster}
	if v := os.Getenv(envCluster); v != "" && !cmd.Flags().Changed("cluster") {
		id, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cfg, usageErr(fmt.Errorf("%s=%q: not a cluster id: %w", envCluster, v, err))
		}
		cfg.Cluster = id
	}
	secret := f.secret
	switch {
	case f.secret != "" && f.secretFile != "":
		return cfg, usageErr(errors.New("give --secret or --secret-file, not both"))
	case f.secretFile != "":
		b, err := os.ReadFile(f.secretFile)
		if err != nil {
			return cfg, usageErr(fmt.Errorf("--secret-file: %w", err))
		}
		secret = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	case secret == "":
		secret = os.Getenv(envSecret)
	}
	cfg.Secret = []byte(secret)
	if f.timeout <= 0 {
		return cfg, usageErr(fmt.Errorf("--timeout %v: must be positive", f.timeout))
	}
	for _, a := range cfg.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return cfg, usageErr(fmt.Errorf("--addr %q: want host:port (%v)", a, err))
		}
	}
	return cfg, nil
}

// dial connects with the flags' configuration.
func (f *clientFlags) dial(ctx context.Context, cmd *cobra.Command) (*client.Client, error) {
	cfg, err := f.config(cmd)
	if err != nil {
		return nil, err
	}
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		return nil, clientErr(err)
	}
	return c, nil
}

// clientErr gives a client error its exit status.
func clientErr(err error) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	code := exitFailure
	switch {
	case errors.Is(err, client.ErrUnknownStream):
		code = exitNotFound
	case errors.Is(err, client.ErrStreamExists):
		code = exitExists
	case errors.Is(err, client.ErrInvalidName), errors.Is(err, client.ErrInvalidCopies), errors.Is(err, client.ErrInvalidPolicy),
		errors.Is(err, client.ErrInvalidCount), errors.Is(err, client.ErrInvalidSize), errors.Is(err, wire.ErrRule):
		code = exitInvalid // a rule of the cluster, checked here or by a node
	case errors.Is(err, client.ErrConfig), errors.Is(err, client.ErrRecordTooLarge):
		code = exitUsage
	case errors.Is(err, wire.ErrAuthFailed), errors.Is(err, wire.ErrAuthMissing), errors.Is(err, wire.ErrAuthNoSecret),
		errors.Is(err, wire.ErrForeignCluster), handshakeRefusal(err):
		code = exitAuth
	case errors.Is(err, client.ErrProtocol), errors.Is(err, client.ErrCorruptBatch):
		code = exitFailure
	case errors.Is(err, client.ErrNoOwner), errors.Is(err, client.ErrOwnerUnreachable), errors.Is(err, client.ErrUnavailable), errors.Is(err, client.ErrOverloaded),
		errors.Is(err, client.ErrNotYet),
		errors.Is(err, client.ErrNotOwner), errors.Is(err, client.ErrFenced), errors.Is(err, context.DeadlineExceeded),
		isNetError(err):
		code = exitUnavailable
	}
	return &exitError{code: code, err: err}
}

// handshakeRefusal reports a node's refusal of the handshake: its message carries the text of one of
// wire's handshake errors (another request that merely mentions "cluster" is not one: issue 21, where
// "5 copies; the cluster has 3 nodes" exited as a wrong secret).
func handshakeRefusal(err error) bool {
	e, ok := errors.AsType[*client.Error](err)
	if !ok || e.Code != wire.CodeInvalidRequest {
		return false
	}
	for _, sent := range []error{wire.ErrAuthFailed, wire.ErrAuthMissing, wire.ErrAuthNoSecret, wire.ErrForeignCluster, wire.ErrRevision} {
		if strings.Contains(e.Message, sent.Error()) {
			return true
		}
	}
	return false
}

func isNetError(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe) || strings.Contains(err.Error(), "no node answered")
}

// exactArgs is cobra.ExactArgs with a usage exit status and the argument's name.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usageErr(fmt.Errorf("want %d argument(s) (%s), got %d", len(names), strings.Join(names, ", "), len(args)))
		}
		return nil
	}
}

// streamArgs is exactArgs for a command whose first argument is a stream name: a name that breaks
// wire's rule exits 7 with the rule, before any node is asked.
func streamArgs(names ...string) cobra.PositionalArgs {
	exact := exactArgs(names...)
	return func(cmd *cobra.Command, args []string) error {
		if err := exact(cmd, args); err != nil {
			return err
		}
		return invalidErr(wire.ValidateStreamName(args[0]))
	}
}

// invalidErr marks a rule's refusal (exit 7); nil stays nil.
func invalidErr(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: exitInvalid, err: err}
}

// clientCommand sets what every client command shares: usage exit status for bad flags.
func clientCommand(cmd *cobra.Command) *cobra.Command {
	cmd.SilenceUsage = true
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr(err) })
	return cmd
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// adminFlags are the flags of the commands that read a node's admin HTTP listener.
type adminFlags struct {
	admin   string
	timeout time.Duration
	asJSON  bool
}

func (f *adminFlags) register(fs *pflag.FlagSet) {
	admin := "127.0.0.1:7003"
	if v := os.Getenv(envAdmin); v != "" {
		admin = v
	}
	fs.StringVar(&f.admin, "admin", admin, "the node's admin HTTP address, host:port (env "+envAdmin+")")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "give up after this long")
	fs.BoolVar(&f.asJSON, "json", false, "print the node's JSON document")
}

// get reads path from the admin listener into v.
func (f *adminFlags) get(ctx context.Context, path string, v any) error {
	if _, _, err := net.SplitHostPort(f.admin); err != nil {
		return usageErr(fmt.Errorf("--admin %q: want host:port (%v)", f.admin, err))
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+f.admin+path, nil)
	if err != nil {
		return usageErr(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return &exitError{code: exitUnavailable, err: fmt.Errorf("GET %s from %s: %w", path, f.admin, err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return &exitError{code: exitUnavailable, err: fmt.Errorf("GET %s from %s: %w", path, f.admin, err)}
	}
	if resp.StatusCode != http.StatusOK {
		return &exitError{code: exitFailure, err: fmt.Errorf("GET %s from %s: %s: %s", path, f.admin, resp.Status,
			strings.TrimSpace(string(body)))}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return &exitError{code: exitFailure, err: fmt.Errorf("GET %s from %s: not the expected JSON: %w", path, f.admin, err)}
	}
	return nil
}
