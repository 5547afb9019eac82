package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/BurntSushi/toml"
	"golang.org/x/sys/unix"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/shard/heartbeat"
)

// ErrConfig wraps every error Load and Parse return. The message names the key (section.key) and the
// rule it breaks; where another package's validator found the fault, its error is wrapped as well.
var ErrConfig = errors.New("config: invalid configuration")

// SecretBytesMin is the shortest cluster secret accepted; an empty secret turns authentication off.
const SecretBytesMin = 16

// fileBytesMax bounds the config and secret files read.
const fileBytesMax = 1 << 20

// Load reads, decodes and validates the TOML file at path. A relative secret_file is read from the
// file's directory.
func Load(path string) (*Config, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return Parse(data, filepath.Dir(path))
}

// Parse decodes data over Defaults and validates the result. dir is where a relative secret_file is
// read from. Unknown keys, wrong types and invalid values are errors wrapping ErrConfig; warnings are
// in Config.Warnings.
func Parse(data []byte, dir string) (*Config, error) {
	f := Defaults()
	f.Cluster.Peers = nil // a file's peers replace the defaults' instead of merging with them
	f.Cluster.Clients = nil
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		keys := make([]string, len(undecoded))
		for i, k := range undecoded {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("%w: unknown key %s (see `ringstream config defaults` for every option)",
			ErrConfig, strings.Join(keys, ", "))
	}
	if !md.IsDefined("cluster", "peers") {
		f.Cluster.Peers = Defaults().Cluster.Peers
	}
	if !md.IsDefined("cluster", "clients") && !md.IsDefined("cluster", "peers") {
		f.Cluster.Clients = Defaults().Cluster.Clients
	} // else a file's peers without clients: derived from the peers, port plus one
	return resolve(f, dir)
}

// readBounded reads a whole file of at most fileBytesMax bytes.
func readBounded(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, fileBytesMax+1))
	if err != nil {
		return nil, err
	}
	if len(data) > fileBytesMax {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, fileBytesMax)
	}
	return data, nil
}

// keyError is a validation error for one key: the message names the key, and errors.Is finds both
// ErrConfig and the error of the validator that refused the value.
type keyError struct {
	msg   string
	cause error
}

func (e *keyError) Error() string   { return e.msg }
func (e *keyError) Unwrap() []error { return []error{ErrConfig, e.cause} }

// wrapKey names key in front of a validator's error.
func wrapKey(key string, err error) error {
	return &keyError{msg: fmt.Sprintf("%v: %s: %v", ErrConfig, key, err), cause: err}
}

// invalid is an error for key breaking rule.
func invalid(key, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrConfig, key, fmt.Sprintf(format, args...))
}

// affinityCPUs counts the CPUs the process may run on.
func affinityCPUs() (int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, fmt.Errorf("sched_getaffinity: %w", err)
	}
	return set.Count(), nil
}

// ParsePolicy reads an assignment policy as meta.Policy.String writes it: majority_durable,
// local_durable, count_durable(N) or count_accepted(N) with N in 1..255.
func ParsePolicy(s string) (meta.Policy, error) {
	switch s {
	case "majority_durable":
		return meta.Policy{Kind: meta.PolicyMajorityDurable}, nil
	case "local_durable":
		return meta.Policy{Kind: meta.PolicyLocalDurable}, nil
	}
	for _, k := range [...]meta.PolicyKind{meta.PolicyCountDurable, meta.PolicyCountAccepted} {
		prefix := strings.TrimSuffix(meta.Policy{Kind: k}.String(), "(0)") + "("
		rest, ok := strings.CutPrefix(s, prefix)
		if !ok {
			continue
		}
		digits, ok := strings.CutSuffix(rest, ")")
		var n uint64
		if ok && digits != "" && len(digits) <= 3 {
			for _, c := range digits {
				if c < '0' || c > '9' {
					ok = false
					break
				}
				n = n*10 + uint64(c-'0')
			}
		}
		if !ok || n < 1 || n > 255 {
			return meta.Policy{}, fmt.Errorf("%q: the count must be a number in 1..255, as in %s2)", s, prefix)
		}
		p := meta.Policy{Kind: k, Count: uint8(n)}
		if err := p.Validate(); err != nil {
			return meta.Policy{}, err
		}
		return p, nil
	}
	return meta.Policy{}, fmt.Errorf("%q is not a policy: want majority_durable, local_durable, "+
		"count_durable(N) or count_accepted(N)", s)
}

// heartbeatConfig is the [cluster] R23 options as heartbeat.Config.
func (f *File) heartbeatConfig() heartbeat.Config {
	return heartbeat.Config{
		CommitBroadcastInterval:     f.Cluster.CommitBroadcastInterval,
		CommitHeartbeatTimeout:      f.Cluster.CommitHeartbeatTimeout,
		CommitIdleHeartbeatInterval: f.Cluster.CommitIdleHeartbeatInterval,
		CommitIdleHeartbeatTimeout:  f.Cluster.CommitIdleHeartbeatTimeout,
	}
}
