package heartbeat

import (
	"errors"
	"fmt"
	"time"
)

// ErrConfig wraps every configuration error. The message names the option and the rule it breaks.
var ErrConfig = errors.New("heartbeat: invalid configuration")

// Millis is a duration option in milliseconds. In TOML it is an integer count of milliseconds
// (commit_broadcast_interval = 500) or a Go duration string (commit_broadcast_interval = "500ms").
type Millis uint64

// UnmarshalTOML reads an integer (milliseconds) or a duration string.
func (m *Millis) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("%w: negative duration %d ms", ErrConfig, x)
		}
		*m = Millis(x)
		return nil
	case string:
		d, err := time.ParseDuration(x)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		if d < 0 || d%time.Millisecond != 0 {
			return fmt.Errorf("%w: duration %q is not a whole, non-negative count of milliseconds", ErrConfig, x)
		}
		*m = Millis(d / time.Millisecond)
		return nil
	default:
		return fmt.Errorf("%w: duration must be an integer of milliseconds or a string like \"500ms\", got %T",
			ErrConfig, v)
	}
}

// Config holds the four [cluster] options of R23, in milliseconds.
type Config struct {
	// CommitBroadcastInterval is P in milliseconds: the gap between send ticks and busy heartbeats.
	CommitBroadcastInterval Millis `toml:"commit_broadcast_interval"`
	// CommitHeartbeatTimeout is the busy backups' wait, the quiet time before a group turns idle, and the
	// primary's quorum window in both states (R24).
	CommitHeartbeatTimeout Millis `toml:"commit_heartbeat_timeout"`
	// CommitIdleHeartbeatInterval is the gap between an idle group's heartbeats.
	CommitIdleHeartbeatInterval Millis `toml:"commit_idle_heartbeat_interval"`
	// CommitIdleHeartbeatTimeout is the idle backups' wait; a larger CommitHeartbeatTimeout raises it.
	CommitIdleHeartbeatTimeout Millis `toml:"commit_idle_heartbeat_timeout"`
}

// Defaults of R23.
const (
	DefaultCommitBroadcastInterval     Millis = 500
	DefaultCommitHeartbeatTimeout      Millis = 5000
	DefaultCommitIdleHeartbeatInterval Millis = 2000
	DefaultCommitIdleHeartbeatTimeout  Millis = 12000
	// CommitHeartbeatTimeoutMin is R9's floor.
	CommitHeartbeatTimeoutMin Millis = 2000
)

// DefaultConfig returns the R23 defaults.
func DefaultConfig() Config {
	return Config{
		CommitBroadcastInterval:     DefaultCommitBroadcastInterval,
		CommitHeartbeatTimeout:      DefaultCommitHeartbeatTimeout,
		CommitIdleHeartbeatInterval: DefaultCommitIdleHeartbeatInterval,
		CommitIdleHeartbeatTimeout:  DefaultCommitIdleHeartbeatTimeout,
	}
}

// WithDefaults fills every option left at zero with its default, so a file need not declare them.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.CommitBroadcastInterval == 0 {
		c.CommitBroadcastInterval = d.CommitBroadcastInterval
	}
	if c.CommitHeartbeatTimeout == 0 {
		c.CommitHeartbeatTimeout = d.CommitHeartbeatTimeout
	}
	if c.CommitIdleHeartbeatInterval == 0 {
		c.CommitIdleHeartbeatInterval = d.CommitIdleHeartbeatInterval
	}
	if c.CommitIdleHeartbeatTimeout == 0 {
		c.CommitIdleHeartbeatTimeout = d.CommitIdleHeartbeatTimeout
	}
	return c
}

// IdleTimeoutEffective is the idle backups' real wait: never less than commit_heartbeat_timeout (R23).
func (c Config) IdleTimeoutEffective() Millis {
	return max(c.CommitIdleHeartbeatTimeout, c.CommitHeartbeatTimeout)
}

// Validate runs the boot checks of R9 and R23 on the options as given. It refuses nothing they
// allow: the advice that the quorum window span two idle heartbeats is in Warnings.
// Zero options are errors: call WithDefaults first to apply the defaults.
func (c Config) Validate() error {
	named := [...]struct {
		name  string
		value Millis
	}{
		{"commit_broadcast_interval", c.CommitBroadcastInterval},
		{"commit_heartbeat_timeout", c.CommitHeartbeatTimeout},
		{"commit_idle_heartbeat_interval", c.CommitIdleHeartbeatInterval},
		{"commit_idle_heartbeat_timeout", c.CommitIdleHeartbeatTimeout},
	}
	for _, o := range named {
		if o.value == 0 {
			return fmt.Errorf("%w: %s must be greater than 0 ms", ErrConfig, o.name)
		}
	}
	if c.CommitHeartbeatTimeout < CommitHeartbeatTimeoutMin {
		return fmt.Errorf("%w: commit_heartbeat_timeout is %d ms; R9 requires at least %d ms",
			ErrConfig, c.CommitHeartbeatTimeout, CommitHeartbeatTimeoutMin)
	}
	return checkRelations(uint64(c.CommitBroadcastInterval), uint64(c.CommitHeartbeatTimeout),
		uint64(c.CommitIdleHeartbeatInterval), uint64(c.IdleTimeoutEffective()), "ms")
}

// checkRelations holds the rules that relate the options to each other, the same in ms and in ticks.
func checkRelations(broadcast, heartbeatTimeout, idleInterval, idleTimeout uint64, unit string) error {
	if heartbeatTimeout < 4*broadcast {
		return fmt.Errorf("%w: commit_heartbeat_timeout is %d %s; R9 requires at least 4 x "+
			"commit_broadcast_interval = %d %s", ErrConfig, heartbeatTimeout, unit, 4*broadcast, unit)
	}
	if idleInterval%broadcast != 0 {
		return fmt.Errorf("%w: commit_idle_heartbeat_interval is %d %s; R23 requires a whole multiple of "+
			"commit_broadcast_interval (%d %s)", ErrConfig, idleInterval, unit, broadcast, unit)
	}
	if idleTimeout < 4*idleInterval {
		return fmt.Errorf("%w: commit_idle_heartbeat_timeout is %d %s (the longer of it and "+
			"commit_heartbeat_timeout); R23 requires at least 4 x commit_idle_heartbeat_interval = %d %s",
			ErrConfig, idleTimeout, unit, 4*idleInterval, unit)
	}
	return nil
}

// warnRelations holds the advice that R9 and R23 do not require: a configuration that breaks it is
// allowed, and only warned about.
func warnRelations(heartbeatTimeout, idleInterval uint64, unit string) []string {
	var w []string
	if heartbeatTimeout < 2*idleInterval {
		w = append(w, fmt.Sprintf("heartbeat: commit_heartbeat_timeout is %d %s, below 2 x "+
			"commit_idle_heartbeat_interval = %d %s: the quorum window (R24) spans fewer than two idle "+
			"heartbeats, so one lost idle heartbeat or reply can make an idle primary step down",
			heartbeatTimeout, unit, 2*idleInterval, unit))
	}
	return w
}

// Warnings lists what Validate allows but advises against (each a sentence naming the options).
func (c Config) Warnings() []string {
	return warnRelations(uint64(c.CommitHeartbeatTimeout), uint64(c.CommitIdleHeartbeatInterval), "ms")
}

// Ticks converts the options to ticks of tickMs milliseconds, once, at load. It validates first, and
// each option must be a whole multiple of tick_ms.
func (c Config) Ticks(tickMs uint64) (Ticks, error) {
	if tickMs == 0 {
		return Ticks{}, fmt.Errorf("%w: tick_ms must be greater than 0", ErrConfig)
	}
	if err := c.Validate(); err != nil {
		return Ticks{}, err
	}
	named := [...]struct {
		name  string
		value Millis
	}{
		{"commit_broadcast_interval", c.CommitBroadcastInterval},
		{"commit_heartbeat_timeout", c.CommitHeartbeatTimeout},
		{"commit_idle_heartbeat_interval", c.CommitIdleHeartbeatInterval},
		{"commit_idle_heartbeat_timeout", c.CommitIdleHeartbeatTimeout},
	}
	for _, o := range named {
		if uint64(o.value)%tickMs != 0 {
			return Ticks{}, fmt.Errorf("%w: %s is %d ms, not a whole multiple of tick_ms (%d ms)",
				ErrConfig, o.name, o.value, tickMs)
		}
	}
	t := Ticks{
		BroadcastIntervalTicks:     uint64(c.CommitBroadcastInterval) / tickMs,
		HeartbeatTimeoutTicks:      uint64(c.CommitHeartbeatTimeout) / tickMs,
		IdleHeartbeatIntervalTicks: uint64(c.CommitIdleHeartbeatInterval) / tickMs,
		IdleHeartbeatTimeoutTicks:  uint64(c.IdleTimeoutEffective()) / tickMs,
	}
	if err := t.Validate(); err != nil {
		return Ticks{}, err
	}
	return t, nil
}

// Ticks is the schedule in ticks, as Schedule, Primary and Backup use it.
type Ticks struct {
	BroadcastIntervalTicks     uint64 // P
	HeartbeatTimeoutTicks      uint64 // busy backups' wait, idle switch, quorum window
	IdleHeartbeatIntervalTicks uint64 // idle heartbeat gap, a multiple of P
	IdleHeartbeatTimeoutTicks  uint64 // idle backups' wait, already at least HeartbeatTimeoutTicks
}

// Validate checks the relations of R9 and R23 in ticks. It has no wall-clock floor (R9's 2 s is checked
// on Config), so tests and the simulator may run short schedules.
func (t Ticks) Validate() error {
	if t.BroadcastIntervalTicks == 0 {
		return fmt.Errorf("%w: commit_broadcast_interval must be at least one tick", ErrConfig)
	}
	if t.IdleHeartbeatIntervalTicks == 0 {
		return fmt.Errorf("%w: commit_idle_heartbeat_interval must be at least one tick", ErrConfig)
	}
	if t.IdleHeartbeatTimeoutTicks < t.HeartbeatTimeoutTicks {
		return fmt.Errorf("%w: commit_idle_heartbeat_timeout (%d ticks) is below commit_heartbeat_timeout "+
			"(%d ticks); R23: a backup never waits less than commit_heartbeat_timeout",
			ErrConfig, t.IdleHeartbeatTimeoutTicks, t.HeartbeatTimeoutTicks)
	}
	return checkRelations(t.BroadcastIntervalTicks, t.HeartbeatTimeoutTicks, t.IdleHeartbeatIntervalTicks,
		t.IdleHeartbeatTimeoutTicks, "ticks")
}

// Warnings lists what Validate allows but advises against, in ticks.
func (t Ticks) Warnings() []string {
	return warnRelations(t.HeartbeatTimeoutTicks, t.IdleHeartbeatIntervalTicks, "ticks")
}
