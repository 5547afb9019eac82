package control

import (
	"errors"
	"fmt"

	"github.com/ringstream/ringstream/engine/meta"
)

// ErrConfig: a Config breaks one of the rules Validate checks; the error names the option and the rule.
var ErrConfig = errors.New("control: invalid configuration")

// Config is the controller's setup. Every duration is counted in ticks; the node turns the
// configured milliseconds into ticks once, at load.
type Config struct {
	// NodeLivenessTimeoutTicks: a node with no heartbeat for this long is lost (node_liveness_timeout).
	NodeLivenessTimeoutTicks uint32
	// EagerFailoverGraceTicks: a node whose links are closed and not back for this long is lost at
	// once, without waiting out liveness (eager_failover_grace).
	EagerFailoverGraceTicks uint32
	// SealTimeoutTicks: how long the recovery worker waits for every live copy to answer its seal
	// before it decides with the answers it has (at least R). Copies that answer later are kept.
	SealTimeoutTicks uint32
	// SealRetryTimeoutTicks: copies that have not answered are sealed again this often while the
	// worker waits.
	SealRetryTimeoutTicks uint32
	// ProposalTimeoutTicks: a proposal whose outcome the host never reported is forgotten after this
	// long and the stream is looked at again. A refused proposal waits SealRetryTimeoutTicks.
	ProposalTimeoutTicks uint32
	// AssignmentPolicy is [cluster] assignment_policy: the confirm policy stamped on every replicated
	// assignment the controller proposes.
	AssignmentPolicy meta.Policy
}

// DefaultConfig returns the defaults for the default tick of 10 ms: liveness 3 s, eager failover
// grace 200 ms, seal timeout 500 ms with a reseal every 100 ms, proposals forgotten after 2 s, and
// majority_durable.
func DefaultConfig() Config {
	return Config{
		NodeLivenessTimeoutTicks: 300,
		EagerFailoverGraceTicks:  20,
		SealTimeoutTicks:         50,
		SealRetryTimeoutTicks:    10,
		ProposalTimeoutTicks:     200,
		AssignmentPolicy:         meta.Policy{Kind: meta.PolicyMajorityDurable},
	}
}

// Validate checks the relations the controller relies on.
func (c Config) Validate() error {
	switch {
	case c.NodeLivenessTimeoutTicks == 0:
		return fmt.Errorf("%w: node_liveness_timeout must be at least one tick", ErrConfig)
	case c.EagerFailoverGraceTicks == 0:
		return fmt.Errorf("%w: eager_failover_grace must be at least one tick", ErrConfig)
	case c.EagerFailoverGraceTicks >= c.NodeLivenessTimeoutTicks:
		// Eager failover exists to act before liveness expires.
		return fmt.Errorf("%w: eager_failover_grace (%d ticks) must be below node_liveness_timeout (%d ticks)",
			ErrConfig, c.EagerFailoverGraceTicks, c.NodeLivenessTimeoutTicks)
	case c.SealRetryTimeoutTicks == 0:
		return fmt.Errorf("%w: seal_retry_timeout must be at least one tick", ErrConfig)
	case c.SealTimeoutTicks < c.SealRetryTimeoutTicks:
		return fmt.Errorf("%w: seal_timeout (%d ticks) must be at least seal_retry_timeout (%d ticks)",
			ErrConfig, c.SealTimeoutTicks, c.SealRetryTimeoutTicks)
	case c.ProposalTimeoutTicks == 0:
		return fmt.Errorf("%w: proposal_timeout must be at least one tick", ErrConfig)
	}
	if err := c.AssignmentPolicy.Validate(); err != nil {
		return fmt.Errorf("%w: assignment_policy: %w", ErrConfig, err)
	}
	if c.AssignmentPolicy.Kind == meta.PolicyUnset {
		return fmt.Errorf("%w: assignment_policy must be set (majority_durable is the default)", ErrConfig)
	}
	return nil
}
