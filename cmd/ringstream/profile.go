package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/cobra"
)

// Profiles: where the commands find a cluster without flags or exported variables.
//
// A profile is a TOML file, $XDG_CONFIG_HOME/ringstream/profiles/NAME.toml (~/.config when
// XDG_CONFIG_HOME is unset), holding the cluster id, the nodes' client and admin addresses and the path
// of a file with the cluster secret (never the secret itself). The file
// $XDG_CONFIG_HOME/ringstream/current names the profile every command reads by default;
// RINGSTREAM_PROFILE names another for one shell, and --profile-name for one command (--profile is the
// bench's pprof directory). `cluster up` writes the profile "local" (--profile-name to choose) and
// makes it current; `ringstream profile list|use|show|delete` manage them.
//
// Precedence, per setting: a flag given on the command line, then the environment variable
// (RINGSTREAM_ADDR, RINGSTREAM_ADMIN, RINGSTREAM_CLUSTER, RINGSTREAM_SECRET), then the profile, then
// the built-in default (127.0.0.1:7002, 127.0.0.1:7003, cluster 1, no secret). No profile at all is
// not an error: the defaults hold. A profile named (flag, environment, current file) that does not
// exist or does not load is an error (exit 2), never silently skipped.

const (
	envProfile      = "RINGSTREAM_PROFILE"
	profileFlagName = "profile-name"
	// defaultLocalProfile is the profile `cluster up` writes unless told another name.
	defaultLocalProfile = "local"
)

// profileNameRule is the rule a profile's name follows (it is a file name).
const profileNameRule = "1 to 64 characters of a-z, A-Z, 0-9, '.', '_' and '-', not starting with '.'"

var profileNameRE = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$`)

// profile is one profile file.
type profile struct {
	Cluster    uint64   `toml:"cluster"`
	Addrs      []string `toml:"addrs"`
	Admin      []string `toml:"admin"`
	SecretFile string   `toml:"secret_file,omitempty"`
	// Dir is the local cluster's directory, when `cluster up` wrote the profile.
	Dir string `toml:"dir,omitempty"`

	name string // not in the file
	path string
}

// validateProfileName checks a profile's name against profileNameRule.
func validateProfileName(name string) error {
	if !profileNameRE.MatchString(name) {
		return usageErr(fmt.Errorf("profile name %q: want %s", name, profileNameRule))
	}
	return nil
}

// profileRoot is $XDG_CONFIG_HOME/ringstream (or ~/.config/ringstream).
func profileRoot() (string, error) {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "ringstream"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("profiles: no XDG_CONFIG_HOME and no home directory: %w", err)
	}
	return filepath.Join(home, ".config", "ringstream"), nil
}

func profilePath(root, name string) string {
	return filepath.Join(root, "profiles", name+".toml")
}

// currentProfileName is the name in the current-profile file, or "" when there is none.
func currentProfileName(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "current"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("profiles: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// selectedProfileName is the profile a command reads and where the name came from: --profile-name, then
// RINGSTREAM_PROFILE, then the current-profile file; "" when none is named.
func selectedProfileName(cmd *cobra.Command, root string) (name, from string, err error) {
	if f := cmd.Flags().Lookup(profileFlagName); f != nil && f.Changed {
		return f.Value.String(), "--" + profileFlagName, nil
	}
	if v := os.Getenv(envProfile); v != "" {
		return v, envProfile, nil
	}
	name, err = currentProfileName(root)
	return name, filepath.Join(root, "current"), err
}

// loadProfileFor is the profile cmd reads, or nil when none is named anywhere.
func loadProfileFor(cmd *cobra.Command) (*profile, error) {
	root, err := profileRoot()
	if err != nil {
		return nil, nil // no place for profiles: the flags, environment and defaults hold
	}
	name, from, err := selectedProfileName(cmd, root)
	if err != nil {
		return nil, usageErr(err)
	}
	if name == "" {
		return nil, nil
	}
	p, err := readProfile(root, name)
	if err != nil {
		return nil, usageErr(fmt.Errorf("%w (named by %s)", err, from))
	}
	return p, nil
}

// readProfile loads and checks profile name.
func readProfile(root, name string) (*profile, error) {
	if err := validateProfileName(name); err != nil {
		return nil, err
	}
	path := profilePath(root, name)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("profile %q: no file %s (see `ringstream profile list`)", name, path)
	}
	if err != nil {
		return nil, fmt.Errorf("profile %q: %w", name, err)
	}
	var p profile
	md, err := toml.Decode(string(b), &p)
	if err != nil {
		return nil, fmt.Errorf("profile %q (%s): %w", name, path, err)
	}
	if undec := md.Undecoded(); len(undec) > 0 {
		return nil, fmt.Errorf("profile %q (%s): unknown key %q", name, path, undec[0].String())
	}
	for _, a := range slices.Concat(p.Addrs, p.Admin) {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("profile %q (%s): address %q: want host:port (%v)", name, path, a, err)
		}
	}
	if p.SecretFile != "" && !filepath.IsAbs(p.SecretFile) {
		p.SecretFile = filepath.Join(filepath.Dir(path), p.SecretFile)
	}
	p.name, p.path = name, path
	return &p, nil
}

// writeProfile writes profile name (mode 0600) and, with makeCurrent, points the current file at it.
func writeProfile(root, name string, p profile, makeCurrent bool) (string, error) {
	if err := validateProfileName(name); err != nil {
		return "", err
	}
	var b bytes.Buffer
	b.WriteString("# a ringstream profile: `ringstream profile show " + name + "`\n")
	if err := toml.NewEncoder(&b).Encode(p); err != nil {
		return "", err
	}
	path := profilePath(root, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("profiles: %w", err)
	}
	if err := writeFileAtomic(path, b.Bytes()); err != nil {
		return "", err
	}
	if makeCurrent {
		if err := writeFileAtomic(filepath.Join(root, "current"), []byte(name+"\n")); err != nil {
			return "", err
		}
	}
	return path, nil
}

// writeFileAtomic writes data to path through a temporary file and a rename.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("profiles: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("profiles: %w", err)
	}
	return nil
}

// newProfileCommand is `ringstream profile list|use|show|delete`.
func newProfileCommand() *cobra.Command {
	cmd := clientCommand(&cobra.Command{
		Use:   "profile",
		Short: "List, choose and show the profiles that tell the commands where a cluster is",
		Long: "A profile holds a cluster's id, its nodes' client and admin addresses and the path of its secret\n" +
			"file; every client and admin command reads the current one, so none needs flags or exported\n" +
			"variables. Profiles live in $XDG_CONFIG_HOME/ringstream/profiles/NAME.toml (~/.config without\n" +
			"XDG_CONFIG_HOME); $XDG_CONFIG_HOME/ringstream/current names the current one. RINGSTREAM_PROFILE\n" +
			"or --profile-name pick another; a flag or environment variable overrides the profile's setting.\n" +
			"`cluster up` writes the profile \"local\" and makes it current.",
		Args: cobra.NoArgs,
	})
	cmd.AddCommand(newProfileListCommand(), newProfileUseCommand(), newProfileShowCommand(), newProfileDeleteCommand())
	return cmd
}

func newProfileListCommand() *cobra.Command {
	return clientCommand(&cobra.Command{
		Use:   "list",
		Short: "List the profiles; the current one is marked *",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			root, err := profileRoot()
			if err != nil {
				return err
			}
			current, err := currentProfileName(root)
			if err != nil {
				return err
			}
			names, err := profileNames(root)
			if err != nil {
				return err
			}
			if len(names) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "no profiles in %s (`ringstream cluster up` writes one)\n",
					filepath.Join(root, "profiles"))
				return nil
			}
			for _, n := range names {
				mark := " "
				if n == current {
					mark = "*"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", mark, n)
			}
			return nil
		},
	})
}

// profileNames is every profile's name, sorted.
func profileNames(root string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, "profiles"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".toml"); ok && !e.IsDir() {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names, nil
}

func newProfileUseCommand() *cobra.Command {
	return clientCommand(&cobra.Command{
		Use:   "use NAME",
		Short: "Make a profile the current one",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			root, err := profileRoot()
			if err != nil {
				return err
			}
			if _, err := readProfile(root, args[0]); err != nil {
				return usageErr(err)
			}
			if err := writeFileAtomic(filepath.Join(root, "current"), []byte(args[0]+"\n")); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "profile %q is current\n", args[0])
			return nil
		},
	})
}

func newProfileShowCommand() *cobra.Command {
	var asJSON bool
	cmd := clientCommand(&cobra.Command{
		Use:   "show [NAME]",
		Short: "Show a profile (default: the one the commands read now)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			root, err := profileRoot()
			if err != nil {
				return err
			}
			name, from := "", ""
			if len(args) == 1 {
				name, from = args[0], "the argument"
			} else if name, from, err = selectedProfileName(cmd, root); err != nil {
				return err
			}
			if name == "" {
				return usageErr(fmt.Errorf("no profile is current (%s names none); "+
					"`ringstream cluster up` writes one, `ringstream profile use NAME` chooses one", filepath.Join(root, "current")))
			}
			p, err := readProfile(root, name)
			if err != nil {
				return usageErr(err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"name": p.name, "path": p.path, "cluster": p.Cluster,
					"addrs": p.Addrs, "admin": p.Admin, "secret_file": p.SecretFile, "dir": p.Dir})
			}
			printProfile(cmd.OutOrStdout(), p, from)
			return nil
		},
	})
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the profile as JSON")
	return cmd
}

func printProfile(w io.Writer, p *profile, from string) {
	fmt.Fprintf(w, "profile %q (%s, named by %s)\n", p.name, p.path, from)
	fmt.Fprintf(w, "  cluster      %d\n", p.Cluster)
	fmt.Fprintf(w, "  addrs        %s\n", strings.Join(p.Addrs, ","))
	fmt.Fprintf(w, "  admin        %s\n", strings.Join(p.Admin, ","))
	fmt.Fprintf(w, "  secret_file  %s\n", dash(p.SecretFile))
	if p.Dir != "" {
		fmt.Fprintf(w, "  dir          %s\n", p.Dir)
	}
}

func newProfileDeleteCommand() *cobra.Command {
	return clientCommand(&cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a profile (and the current pointer, if it named it)",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			root, err := profileRoot()
			if err != nil {
				return err
			}
			if err := validateProfileName(args[0]); err != nil {
				return err
			}
			if err := os.Remove(profilePath(root, args[0])); err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return usageErr(fmt.Errorf("no profile %q (see `ringstream profile list`)", args[0]))
				}
				return err
			}
			if cur, _ := currentProfileName(root); cur == args[0] {
				_ = os.Remove(filepath.Join(root, "current"))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted profile %q\n", args[0])
			return nil
		},
	})
}
