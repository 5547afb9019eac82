package heartbeat

import (
	"errors"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// R23: the four options have the spec's defaults, and a file that omits them gets those defaults.
func TestR23_DefaultsApplyWhenOmitted(t *testing.T) {
	var file struct {
		Cluster Config `toml:"cluster"`
	}
	if _, err := toml.Decode("[cluster]\ncommit_broadcast_interval = \"250ms\"\n", &file); err != nil {
		t.Fatalf("decode: %v", err)
	}
	got := file.Cluster.WithDefaults()
	want := Config{CommitBroadcastInterval: 250, CommitHeartbeatTimeout: 5000,
		CommitIdleHeartbeatInterval: 2000, CommitIdleHeartbeatTimeout: 12000}
	if got != want {
		t.Fatalf("config %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	if d := DefaultConfig(); d.CommitBroadcastInterval != 500 || d.CommitHeartbeatTimeout != 5000 ||
		d.CommitIdleHeartbeatInterval != 2000 || d.CommitIdleHeartbeatTimeout != 12000 {
		t.Fatalf("defaults %+v", d)
	}
}

// R23: options are read as integer milliseconds or as duration strings.
func TestR23_OptionsDecodeMillisecondsOrDurations(t *testing.T) {
	cases := []struct {
		name, text string
		want       Millis
		fails      bool
	}{
		{"integer ms", "commit_heartbeat_timeout = 7000", 7000, false},
		{"duration string", "commit_heartbeat_timeout = \"7s\"", 7000, false},
		{"negative", "commit_heartbeat_timeout = -1", 0, true},
		{"sub-millisecond", "commit_heartbeat_timeout = \"1500us\"", 0, true},
		{"not a duration", "commit_heartbeat_timeout = \"soon\"", 0, true},
		{"wrong type", "commit_heartbeat_timeout = true", 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var cfg Config
			_, err := toml.Decode(c.text, &cfg)
			if c.fails {
				if err == nil {
					t.Fatalf("decoded %+v, want an error", cfg)
				}
				return
			}
			if err != nil || cfg.CommitHeartbeatTimeout != c.want {
				t.Fatalf("got %d, %v; want %d", cfg.CommitHeartbeatTimeout, err, c.want)
			}
		})
	}
}

// R9 and R23: each boot check fails with a message naming the option and the rule.
func TestR9_R23_BootChecksNameOptionAndRule(t *testing.T) {
	cases := []struct {
		name    string
		edit    func(*Config)
		mention []string // nil: valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"zero broadcast", func(c *Config) { c.CommitBroadcastInterval = 0 },
			[]string{"commit_broadcast_interval", "greater than 0"}},
		{"R9 heartbeat timeout below 2 s", func(c *Config) {
			c.CommitBroadcastInterval, c.CommitHeartbeatTimeout = 100, 1900
			c.CommitIdleHeartbeatInterval = 200
		}, []string{"commit_heartbeat_timeout", "R9", "2000 ms"}},
		{"R9 heartbeat timeout at 2 s is enough", func(c *Config) {
			c.CommitBroadcastInterval, c.CommitHeartbeatTimeout = 500, 2000
			c.CommitIdleHeartbeatInterval, c.CommitIdleHeartbeatTimeout = 1000, 4000
		}, nil},
		{"R9 heartbeat timeout below 4 x broadcast", func(c *Config) {
			c.CommitBroadcastInterval, c.CommitIdleHeartbeatInterval = 1000, 1000
			c.CommitHeartbeatTimeout = 3000
		}, []string{"commit_heartbeat_timeout", "R9", "4 x commit_broadcast_interval"}},
		{"R23 idle interval not a multiple", func(c *Config) { c.CommitIdleHeartbeatInterval = 1200 },
			[]string{"commit_idle_heartbeat_interval", "R23", "whole multiple"}},
		{"R23 idle interval below broadcast", func(c *Config) { c.CommitIdleHeartbeatInterval = 250 },
			[]string{"commit_idle_heartbeat_interval", "R23"}},
		{"R23 idle interval equal to broadcast is allowed", func(c *Config) {
			c.CommitIdleHeartbeatInterval = 500
		}, nil},
		{"R23 longer timeout below 4 x idle interval", func(c *Config) {
			c.CommitIdleHeartbeatTimeout = 7000
		}, []string{"commit_idle_heartbeat_timeout", "R23", "4 x commit_idle_heartbeat_interval"}},
		{"R23 larger heartbeat timeout raises idle timeout", func(c *Config) {
			c.CommitHeartbeatTimeout, c.CommitIdleHeartbeatTimeout = 8000, 3000
		}, nil},
		// Issue 9 audit: R9 and R23 allow a quorum window shorter than two idle heartbeats; it is
		// only warned about (TestR24_ShortWindowIsAWarning).
		{"R24 window shorter than two idle heartbeats is allowed", func(c *Config) {
			c.CommitIdleHeartbeatInterval, c.CommitIdleHeartbeatTimeout = 3000, 12000
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			c.edit(&cfg)
			err := cfg.Validate()
			if c.mention == nil {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v, want ErrConfig", err)
			}
			for _, m := range c.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
		})
	}
}

// R23 and R5: the options become ticks once, given tick_ms; an option that is not a whole number of
// ticks is refused; the idle timeout is raised to the busy timeout.
func TestR23_ConvertsToTicks(t *testing.T) {
	got, err := DefaultConfig().Ticks(10)
	want := Ticks{BroadcastIntervalTicks: 50, HeartbeatTimeoutTicks: 500, IdleHeartbeatIntervalTicks: 200,
		IdleHeartbeatTimeoutTicks: 1200}
	if err != nil || got != want {
		t.Fatalf("ticks %+v, %v; want %+v", got, err, want)
	}
	raised := DefaultConfig()
	raised.CommitHeartbeatTimeout, raised.CommitIdleHeartbeatTimeout = 14000, 9000
	if got, err := raised.Ticks(10); err != nil || got.IdleHeartbeatTimeoutTicks != 1400 {
		t.Fatalf("raised idle timeout %+v, %v; want 1400 ticks", got, err)
	}
	if _, err := DefaultConfig().Ticks(300); err == nil || !strings.Contains(err.Error(), "tick_ms") {
		t.Fatalf("500 ms with tick_ms 300: %v, want a tick_ms error", err)
	}
	if _, err := DefaultConfig().Ticks(0); !errors.Is(err, ErrConfig) {
		t.Fatalf("tick_ms 0: %v", err)
	}
}

func TestTicksValidate(t *testing.T) {
	ok := Ticks{BroadcastIntervalTicks: 5, HeartbeatTimeoutTicks: 20, IdleHeartbeatIntervalTicks: 10,
		IdleHeartbeatTimeoutTicks: 40}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid ticks rejected: %v", err)
	}
	bad := []Ticks{
		{},
		{BroadcastIntervalTicks: 5, HeartbeatTimeoutTicks: 20, IdleHeartbeatIntervalTicks: 0, IdleHeartbeatTimeoutTicks: 40},
		{BroadcastIntervalTicks: 5, HeartbeatTimeoutTicks: 20, IdleHeartbeatIntervalTicks: 10, IdleHeartbeatTimeoutTicks: 19},
		{BroadcastIntervalTicks: 5, HeartbeatTimeoutTicks: 19, IdleHeartbeatIntervalTicks: 10, IdleHeartbeatTimeoutTicks: 40},
	}
	for i, b := range bad {
		if err := b.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("case %d: %+v accepted", i, b)
		}
	}
}

// A configuration R9 and R23 allow is not refused: a quorum window shorter than two idle heartbeats
// validates, in ms and in ticks, and Warnings names the options and R24. The defaults warn nothing.
func TestR24_ShortWindowIsAWarning(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CommitIdleHeartbeatInterval, cfg.CommitIdleHeartbeatTimeout = 3000, 12000
	if err := cfg.Validate(); err != nil {
		t.Fatalf("refused: %v", err)
	}
	ticks, err := cfg.Ticks(10)
	if err != nil {
		t.Fatalf("ticks refused: %v", err)
	}
	for _, w := range [][]string{cfg.Warnings(), ticks.Warnings()} {
		if len(w) != 1 {
			t.Fatalf("warnings %q, want one", w)
		}
		for _, m := range []string{"commit_heartbeat_timeout", "R24", "2 x commit_idle_heartbeat_interval"} {
			if !strings.Contains(w[0], m) {
				t.Errorf("warning %q does not mention %q", w[0], m)
			}
		}
	}
	if w := DefaultConfig().Warnings(); len(w) != 0 {
		t.Fatalf("defaults warn %q", w)
	}
}
