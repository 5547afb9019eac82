package meta

import (
	"errors"
	"fmt"
	"testing"
)

// Spec 000, "One rule for W": local_durable (and an assignment with no policy) means every copy, a
// count above the set is capped at the set, and an accepted count is read as a durable one. The
// cluster default majority_durable is a majority. Spec 000, "Safety argument": R = E - W + 1.
func TestStreamConfirmPolicy_AndSealThreshold_OverEveryPolicyAndE(t *testing.T) {
	count := func(k PolicyKind, n uint8) Policy { return Policy{Kind: k, Count: n} }
	cases := []struct {
		policy Policy
		w      [5]int // W for E = 1..5
	}{
		{Policy{Kind: PolicyUnset}, [5]int{1, 2, 3, 4, 5}},
		{Policy{Kind: PolicyLocalDurable}, [5]int{1, 2, 3, 4, 5}},
		{Policy{Kind: PolicyMajorityDurable}, [5]int{1, 2, 2, 3, 3}},
		{count(PolicyCountDurable, 1), [5]int{1, 1, 1, 1, 1}},
		{count(PolicyCountDurable, 2), [5]int{1, 2, 2, 2, 2}},
		{count(PolicyCountDurable, 3), [5]int{1, 2, 3, 3, 3}},
		{count(PolicyCountDurable, 9), [5]int{1, 2, 3, 4, 5}},
		{count(PolicyCountAccepted, 2), [5]int{1, 2, 2, 2, 2}},
		{count(PolicyCountAccepted, 200), [5]int{1, 2, 3, 4, 5}},
	}
	for _, c := range cases {
		for e := 1; e <= 5; e++ {
			t.Run(fmt.Sprintf("%s/E=%d", c.policy, e), func(t *testing.T) {
				w := StreamConfirmPolicy(c.policy, e)
				if w != c.w[e-1] {
					t.Fatalf("W = %d, want %d", w, c.w[e-1])
				}
				r := SealThreshold(c.policy, e)
				if r != e-w+1 {
					t.Fatalf("R = %d, want E - W + 1 = %d", r, e-w+1)
				}
			})
		}
	}
}

// Spec 000, "Safety argument": with W = E, R = 1; with 3 copies and W = 2, R = 2.
func TestSealThreshold_SpecExamples(t *testing.T) {
	cases := []struct {
		name   string
		policy Policy
		copies int
		r      int
	}{
		{"every copy, 3 copies: any one copy", Policy{Kind: PolicyLocalDurable}, 3, 1},
		{"majority, 3 copies: both followers", Policy{Kind: PolicyMajorityDurable}, 3, 2},
		{"majority, 5 copies", Policy{Kind: PolicyMajorityDurable}, 5, 3},
		{"single copy", Policy{Kind: PolicyMajorityDurable}, 1, 1},
		{"unset policy is every copy", Policy{}, 4, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if r := SealThreshold(c.policy, c.copies); r != c.r {
				t.Fatalf("R = %d, want %d", r, c.r)
			}
		})
	}
}

// Spec 000, "Safety argument": any W copies and any R copies share one, for every policy and E.
func TestSealThreshold_EveryWSetMeetsEveryRSet(t *testing.T) {
	policies := []Policy{{Kind: PolicyUnset}, {Kind: PolicyLocalDurable}, {Kind: PolicyMajorityDurable},
		{Kind: PolicyCountDurable, Count: 2}, {Kind: PolicyCountAccepted, Count: 4}}
	for _, p := range policies {
		for e := 1; e <= CopiesMax; e++ {
			w, r := StreamConfirmPolicy(p, e), SealThreshold(p, e)
			// The smallest overlap of a W-set and an R-set out of E is W + R - E.
			if w+r-e < 1 {
				t.Fatalf("%s E=%d: W=%d and R=%d can miss each other", p, e, w, r)
			}
			if w < 1 || w > e || r < 1 || r > e {
				t.Fatalf("%s E=%d: W=%d R=%d outside 1..E", p, e, w, r)
			}
		}
	}
}

func TestPolicyValidate(t *testing.T) {
	cases := []struct {
		policy Policy
		ok     bool
	}{
		{Policy{Kind: PolicyUnset}, true},
		{Policy{Kind: PolicyLocalDurable}, true},
		{Policy{Kind: PolicyMajorityDurable}, true},
		{Policy{Kind: PolicyCountDurable, Count: 1}, true},
		{Policy{Kind: PolicyCountAccepted, Count: 255}, true},
		{Policy{Kind: PolicyMajorityDurable, Count: 2}, false},
		{Policy{Kind: PolicyCountDurable}, false},
		{Policy{Kind: policyKindMax + 1}, false},
	}
	for _, c := range cases {
		err := c.policy.Validate()
		if (err == nil) != c.ok {
			t.Fatalf("%s: Validate = %v, want ok %v", c.policy, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrPolicy) {
			t.Fatalf("%s: error %v does not wrap ErrPolicy", c.policy, err)
		}
	}
}
