package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/bench"
)

// resolveBench parses args as `ringstream bench` flags and resolves them.
func resolveBench(t *testing.T, args ...string) (bench.Config, error) {
	t.Helper()
	bf := &benchFlags{cfg: bench.DefaultConfig()}
	cmd := &cobra.Command{Use: "bench"}
	bf.register(cmd.Flags(), nil)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	return bf.resolve(cmd.Flags())
}

func TestBenchFlags_DefaultFaultsFollowTheDuration(t *testing.T) {
	cases := []struct {
		args              []string
		killAt, restartAt float64
		follower          float64
	}{
		{nil, 8, 6, 0}, // the spec's case: 20 s, kill at 8 s, restart at 14 s
		{[]string{"--duration", "10s"}, 4, 3, 0},
		{[]string{"--stream", "durable", "--kill-owner-at-secs", "3", "--duration", "10s"}, 3, 3, 0},
		{[]string{"--kill-follower-at-secs", "2"}, 0, 6, 2}, // a fault given: no default owner kill
		{[]string{"--restart-after-secs", "-1"}, 8, -1, 0},
	}
	for _, tc := range cases {
		c, err := resolveBench(t, tc.args...)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if c.KillOwnerAt != tc.killAt || c.RestartAfter != tc.restartAt || c.KillFollowerAt != tc.follower {
			t.Errorf("%v: kill owner at %v, restart after %v, kill follower at %v; want %v, %v, %v", tc.args,
				c.KillOwnerAt, c.RestartAfter, c.KillFollowerAt, tc.killAt, tc.restartAt, tc.follower)
		}
	}
}

func TestBenchFlags_StreamKindAndOverrides(t *testing.T) {
	c, err := resolveBench(t, "--stream", "local")
	if err != nil || c.Copies != 1 || c.Policy != "local_durable" {
		t.Fatalf("--stream local: %d copies, %s (%v)", c.Copies, c.Policy, err)
	}
	c, err = resolveBench(t, "--stream", "durable", "--copies", "2", "--policy", "count_durable(2)")
	if err != nil || c.Copies != 2 || c.Policy != "count_durable(2)" {
		t.Fatalf("overrides: %d copies, %s (%v)", c.Copies, c.Policy, err)
	}
	for _, args := range [][]string{
		{"--stream", "fast"},
		{"--duration", "5s", "--kill-owner-at-secs", "7"},
		{"--cluster", "127.0.0.1:1", "--kill-owner-at-secs", "1"},
		{"--compression", "lz4"},
	} {
		if _, err := resolveBench(t, args...); !errors.Is(err, bench.ErrConfig) || !strings.Contains(err.Error(), "--") {
			t.Errorf("%v: %v, want bench.ErrConfig naming the flag", args, err)
		}
	}
	c, err = resolveBench(t, "--cluster", "127.0.0.1:1, 127.0.0.1:2", "--admin", "127.0.0.1:3")
	if err != nil || len(c.Addrs) != 2 || c.Addrs[1] != "127.0.0.1:2" || len(c.Admins) != 1 || c.KillOwnerAt != 0 {
		t.Fatalf("--cluster: %+v (%v)", c, err)
	}
}

func TestBenchSweepShardList(t *testing.T) {
	got, err := parseInts("1, 2,4")
	if err != nil || len(got) != 3 || got[2] != 4 {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"", "0", "1,x", "-2"} {
		if _, err := parseInts(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
