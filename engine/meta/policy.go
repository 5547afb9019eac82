package meta

import (
	"fmt"

	"github.com/ringstream/ringstream/internal/assert"
)

// PolicyKind names a confirm policy: how many copies of a stream must hold a record durably before the
// owner confirms it.
type PolicyKind uint8

const (
	// PolicyUnset is what an assignment placed before streams had a policy carries. It confirms on
	// every copy, as PolicyLocalDurable does.
	PolicyUnset PolicyKind = 0
	// PolicyLocalDurable confirms on every copy: a replicated stream has no owner-only mode.
	PolicyLocalDurable PolicyKind = 1
	// PolicyMajorityDurable confirms on a majority of the copies. It is the cluster default.
	PolicyMajorityDurable PolicyKind = 2
	// PolicyCountDurable confirms on Count copies, capped at the whole set.
	PolicyCountDurable PolicyKind = 3
	// PolicyCountAccepted is a count of copies that accepted a record. It is read as a durable count.
	PolicyCountAccepted PolicyKind = 4

	policyKindMax = PolicyCountAccepted
)

// Policy is a confirm policy as a stream carries it and as the controller stamps it on an assignment.
// Count is used only by the two count kinds and is zero for the others.
type Policy struct {
	Kind  PolicyKind
	Count uint8
}

// Validate reports whether p is a policy an op may carry.
func (p Policy) Validate() error {
	switch p.Kind {
	case PolicyUnset, PolicyLocalDurable, PolicyMajorityDurable:
		if p.Count != 0 {
			return fmt.Errorf("%w: kind %d carries a count %d", ErrPolicy, p.Kind, p.Count)
		}
		return nil
	case PolicyCountDurable, PolicyCountAccepted:
		if p.Count == 0 {
			return fmt.Errorf("%w: kind %d needs a count of at least 1", ErrPolicy, p.Kind)
		}
		return nil
	default:
		return fmt.Errorf("%w: unknown kind %d", ErrPolicy, p.Kind)
	}
}

// String names the policy the way the operator writes it.
func (p Policy) String() string {
	switch p.Kind {
	case PolicyUnset:
		return "unset"
	case PolicyLocalDurable:
		return "local_durable"
	case PolicyMajorityDurable:
		return "majority_durable"
	case PolicyCountDurable:
		return fmt.Sprintf("count_durable(%d)", p.Count)
	case PolicyCountAccepted:
		return fmt.Sprintf("count_accepted(%d)", p.Count)
	default:
		return fmt.Sprintf("policy(%d)", p.Kind)
	}
}

// StreamConfirmPolicy is the one rule for W: it turns the policy stamped on an assignment of copies
// copies into the number of copies, the owner included, that must hold a record durably before it is
// confirmed. The stream owner confirms by it and the controller takes the seal threshold from it, so
// the two cannot disagree (stream-failover spec, "One rule for W").
//
// Unset and local_durable mean every copy; majority_durable means copies/2 + 1; a count above the set
// is capped at the whole set, and an accepted count is read as a durable one. The result is never
// below 1. copies must be at least 1.
func StreamConfirmPolicy(policy Policy, copies int) (w int) {
	assert.True(copies >= 1, "meta: confirm policy over an empty copy set")
	switch policy.Kind {
	case PolicyMajorityDurable:
		w = copies/2 + 1
	case PolicyCountDurable, PolicyCountAccepted:
		w = int(policy.Count)
	default:
		// Unset, local_durable, and (defensively) any kind Validate refuses: every copy is the
		// strictest choice, so an unknown policy can never confirm too early.
		w = copies
	}
	w = min(w, copies)
	w = max(w, 1)
	return w
}

// SealThreshold is R = E - W + 1: how many copies of an assignment a recovery must seal so that at
// least one of them holds every record confirmed under it (stream-failover spec, "Safety argument":
// any W copies and any R copies share one since W + R = E + 1).
func SealThreshold(policy Policy, copies int) (r int) {
	w := StreamConfirmPolicy(policy, copies)
	r = copies - w + 1
	assert.True(r >= 1, "meta: seal threshold below one")
	assert.True(r <= copies, "meta: seal threshold above the copy set")
	return r
}
