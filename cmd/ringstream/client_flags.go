package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

// Built-in defaults, used when neither a flag, an environment variable nor a profile sets a value.
const (
	defaultClientAddr = "127.0.0.1:7002"
	defaultAdminAddr  = "127.0.0.1:7003"
	defaultClusterID  = 1
)

func (f *clientFlags) register(fs *pflag.FlagSet, withJSON bool) {
	fs.StringSliceVar(&f.addrs, "addr", nil, "client addresses of some nodes, host:port, comma-separated (env "+envAddr+
		", then the profile; default "+defaultClientAddr+")")
	fs.Uint64Var(&f.cluster, "cluster", defaultClusterID, "the cluster id of the nodes (env "+envCluster+", then the profile)")
	fs.StringVar(&f.secret, "secret", "", "the cluster secret (env "+envSecret+"; prefer the env, --secret-file or a profile)")
	fs.StringVar(&f.secretFile, "secret-file", "", "a file holding the cluster secret (trailing newline dropped; default: the profile's)")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for the cluster (per request, retries included)")
	registerProfileFlag(fs)
	if withJSON {
		fs.BoolVar(&f.asJSON, "json", false, "print the result as JSON")
	}
}

// registerProfileFlag adds --profile-name, the profile to read instead of the current one.
func registerProfileFlag(fs *pflag.FlagSet) {
	fs.String(profileFlagName, "", "the profile to read (env "+envProfile+"; default: the current profile, see `ringstream profile`)")
}

// config turns the flags, the environment and the profile into a client.Config: a flag given wins,
// then the environment, then the profile, then the built-in default.
func (f *clientFlags) config(cmd *cobra.Command) (client.Config, error) {
	prof, err := loadProfileFor(cmd)
	if err != nil {
		return client.Config{}, err
	}
	if prof == nil {
		prof = &profile{}
	}
	cfg := client.Config{Addrs: f.addrs, Cluster: f.cluster}
	if !cmd.Flags().Changed("addr") {
		switch v := os.Getenv(envAddr); {
		case v != "":
			cfg.Addrs = strings.Split(v, ",")
		case len(prof.Addrs) > 0:
			cfg.Addrs = prof.Addrs
		default:
			cfg.Addrs = []string{defaultClientAddr}
		}
	}
	if !cmd.Flags().Changed("cluster") {
		if v := os.Getenv(envCluster); v != "" {
			id, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return cfg, usageErr(fmt.Errorf("%s=%q: not a cluster id: %w", envCluster, v, err))
			}
			cfg.Cluster = id
		} else if prof.Cluster != 0 {
			cfg.Cluster = prof.Cluster
		}
	}
	secret, err := f.resolveSecret(prof)
	if err != nil {
		return cfg, err
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

// resolveSecret is --secret, --secret-file, RINGSTREAM_SECRET or the profile's secret file, in that order.
func (f *clientFlags) resolveSecret(prof *profile) (string, error) {
	file := ""
	switch {
	case f.secret != "" && f.secretFile != "":
		return "", usageErr(errors.New("give --secret or --secret-file, not both"))
	case f.secret != "":
		return f.secret, nil
	case f.secretFile != "":
		file = f.secretFile
	case os.Getenv(envSecret) != "":
		return os.Getenv(envSecret), nil
	case prof.SecretFile != "":
		file = prof.SecretFile
	default:
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", usageErr(fmt.Errorf("secret file: %w", err))
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"), nil
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

// streamNamesArgs takes one stream name or more, each checked against the stream name rule.
func streamNamesArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return usageErr(fmt.Errorf("%s: takes NAME..., one stream name or more", cmd.CommandPath()))
	}
	for _, a := range args {
		if err := wire.ValidateStreamName(a); err != nil {
			return invalidErr(err)
		}
	}
	return nil
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
