package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/client"
)

// resolveWith parses args into a command with the client and admin flags and resolves them.
func resolveWith(t *testing.T, args ...string) (client.Config, []string, error) {
	t.Helper()
	var cf clientFlags
	var af adminFlags
	cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
	cf.register(cmd.Flags(), false)
	cmd.Flags().StringSliceVar(&af.admins, "admin", nil, "")
	af.timeout = 1
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	cfg, err := cf.config(cmd)
	if err != nil {
		return cfg, nil, err
	}
	admins, err := af.addrs(cmd)
	return cfg, admins, err
}

// TestProfiles_PrecedenceFlagEnvProfileDefault: every setting comes from the flag given, else the
// environment, else the current profile (the secret from its secret file), else the default; a
// profile named but missing or broken is a usage error, never skipped.
func TestProfiles_PrecedenceFlagEnvProfileDefault(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	cfg, admins, err := resolveWith(t)
	if err != nil || !slices.Equal(cfg.Addrs, []string{defaultClientAddr}) || cfg.Cluster != 1 || len(cfg.Secret) != 0 ||
		!slices.Equal(admins, []string{defaultAdminAddr}) {
		t.Fatalf("no profile: %+v %v %v, want the defaults", cfg, admins, err)
	}
	root, _ := profileRoot()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("s3cret-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := profile{Cluster: 9, Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, Admin: []string{"127.0.0.1:3", "127.0.0.1:4"},
		SecretFile: secret}
	if _, err := writeProfile(root, "local", p, true); err != nil {
		t.Fatal(err)
	}
	cfg, admins, err = resolveWith(t)
	if err != nil || !slices.Equal(cfg.Addrs, p.Addrs) || cfg.Cluster != 9 || string(cfg.Secret) != "s3cret-from-file" ||
		!slices.Equal(admins, p.Admin) {
		t.Fatalf("from the profile: %+v %v %v", cfg, admins, err)
	}
	t.Setenv(envAddr, "127.0.0.1:5")
	t.Setenv(envAdmin, "127.0.0.1:6,127.0.0.1:7")
	t.Setenv(envCluster, "11")
	t.Setenv(envSecret, "from-env")
	cfg, admins, err = resolveWith(t)
	if err != nil || !slices.Equal(cfg.Addrs, []string{"127.0.0.1:5"}) || cfg.Cluster != 11 || string(cfg.Secret) != "from-env" ||
		!slices.Equal(admins, []string{"127.0.0.1:6", "127.0.0.1:7"}) {
		t.Fatalf("the environment over the profile: %+v %v %v", cfg, admins, err)
	}
	cfg, admins, err = resolveWith(t, "--addr", "127.0.0.1:8", "--cluster", "12", "--secret", "flag", "--admin", "127.0.0.1:9,127.0.0.1:10")
	if err != nil || !slices.Equal(cfg.Addrs, []string{"127.0.0.1:8"}) || cfg.Cluster != 12 || string(cfg.Secret) != "flag" ||
		!slices.Equal(admins, []string{"127.0.0.1:9", "127.0.0.1:10"}) {
		t.Fatalf("flags over everything: %+v %v %v", cfg, admins, err)
	}
	for _, v := range []string{envAddr, envAdmin, envCluster, envSecret} {
		t.Setenv(v, "")
	}

	// A named profile that is missing, or one with an unknown key, is exit 2 naming it.
	if _, _, err := resolveWith(t, "--"+profileFlagName, "nosuch"); exitCode(err) != exitUsage || !strings.Contains(err.Error(), `profile "nosuch"`) {
		t.Fatalf("--profile-name nosuch: %v", err)
	}
	t.Setenv(envProfile, "nosuch")
	if _, _, err := resolveWith(t); exitCode(err) != exitUsage || !strings.Contains(err.Error(), envProfile) {
		t.Fatalf("%s=nosuch: %v", envProfile, err)
	}
	t.Setenv(envProfile, "")
	if err := os.WriteFile(profilePath(root, "broken"), []byte("cluster = 1\nadmins = [\"x\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := resolveWith(t, "--"+profileFlagName, "broken"); exitCode(err) != exitUsage || !strings.Contains(err.Error(), `unknown key "admins"`) {
		t.Fatalf("a profile with an unknown key: %v", err)
	}
	if err := os.WriteFile(profilePath(root, "badaddr"), []byte("admin = [\"127.0.0.1\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := resolveWith(t, "--"+profileFlagName, "badaddr"); exitCode(err) != exitUsage || !strings.Contains(err.Error(), `profile "badaddr"`) || !strings.Contains(err.Error(), "want host:port") {
		t.Fatalf("a profile with a bad address: %v", err)
	}
}

// TestProfileCommands: list marks the current profile, use switches it (and refuses a missing one),
// show prints the one the commands read, delete removes it and the pointer.
func TestProfileCommands(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	if out, code := runCLI(t, "", "profile", "list"); code != 0 || !strings.HasPrefix(out, "no profiles in ") {
		t.Fatalf("list of none: %d %q", code, out)
	}
	if _, code := runCLI(t, "", "profile", "show"); code != exitUsage {
		t.Fatalf("show with none current: exit %d, want %d", code, exitUsage)
	}
	root, _ := profileRoot()
	for _, name := range []string{"a", "b"} {
		if _, err := writeProfile(root, name, profile{Cluster: 1, Addrs: []string{"127.0.0.1:1"}}, name == "a"); err != nil {
			t.Fatal(err)
		}
	}
	if out, code := runCLI(t, "", "profile", "list"); code != 0 || out != "* a\n  b\n" {
		t.Fatalf("list: %d %q", code, out)
	}
	if _, code := runCLI(t, "", "profile", "use", "c"); code != exitUsage {
		t.Fatalf("use of a missing profile: exit %d", code)
	}
	if _, code := runCLI(t, "", "profile", "use", "../x"); code != exitUsage {
		t.Fatalf("use of a name against the rule: exit %d", code)
	}
	if out, code := runCLI(t, "", "profile", "use", "b"); code != 0 || out != "profile \"b\" is current\n" {
		t.Fatalf("use b: %d %q", code, out)
	}
	if out, code := runCLI(t, "", "profile", "show"); code != 0 || !strings.HasPrefix(out, `profile "b" (`) {
		t.Fatalf("show: %d %q", code, out)
	}
	if out, code := runCLI(t, "", "profile", "delete", "b"); code != 0 || out != "deleted profile \"b\"\n" {
		t.Fatalf("delete: %d %q", code, out)
	}
	if out, code := runCLI(t, "", "profile", "list"); code != 0 || out != "  a\n" {
		t.Fatalf("list after deleting the current one: %d %q", code, out)
	}
}
