package control

import (
	"reflect"
	"slices"
	"testing"

	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/wire"
)

func assignedTo(fx *Effects) []uint16 {
	var out []uint16
	for _, a := range fx.Assignments {
		out = append(out, a.To)
	}
	slices.Sort(out)
	return out
}

// Issue 12 item 4: assignments reach the brokers with the history starts. A committed recovery's
// assignment goes to every member at once, carrying the start it appended and the stamped policy.
func TestAssignments_SentToEveryMemberWithTheStarts(t *testing.T) {
	f := newFixture(t, testConfig(), 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeatAll(1, 2, 3)
	if got := assignedTo(f.ready()); !reflect.DeepEqual(got, []uint16{1, 2, 3}) {
		t.Fatalf("first assignment sent to %v", got)
	}
	if fx := f.ready(); len(fx.Assignments) != 0 {
		t.Fatalf("sent again with nothing changed: %+v", fx.Assignments)
	}
	f.failOwner(st, 1)
	_, seal := sealsTo(t, f.ready())
	f.reply(2, seal, 30, 2)
	f.reply(3, seal, 20, 0)
	onlyProposal[meta.CommitRecovery](t, f.ready())
	f.mustCommit()
	fx := f.ready()
	if got := assignedTo(fx); !reflect.DeepEqual(got, []uint16{2, 3}) {
		t.Fatalf("recovered assignment sent to %v", got)
	}
	want := wire.StreamAssignment{Stream: st.ID, Incarnation: 1, Epoch: 2, Owner: 2,
		PolicyKind: uint8(meta.PolicyMajorityDurable), StartsVersion: 1, FollowerCount: 1,
		Followers: [wire.AssignmentFollowersMax]uint16{3}}
	starts := []wire.HistoryStart{{Epoch: 2, Node: 2, RecordStart: 30, CursorStart: 2}}
	for _, a := range fx.Assignments {
		if a.Assignment != want || !reflect.DeepEqual(a.Starts, starts) {
			t.Fatalf("to %d: %+v with %+v\nwant %+v with %+v", a.To, a.Assignment, a.Starts, want, starts)
		}
	}
}

// A member whose heartbeats do not show the copy at the assignment's epoch is sent the assignment
// again every SealRetryTimeoutTicks; one that shows it is not.
func TestAssignments_ResentToLaggingMembers(t *testing.T) {
	cfg := testConfig()
	f := newFixture(t, cfg, 3)
	st := f.createStream("s", 3, majority, 1, 2, 3)
	f.heartbeat(1, 0, tail(st, 1, wire.RoleOwner, 5, 0))
	f.heartbeat(2, 0, tail(st, 1, wire.RoleFollower, 5, 0))
	f.heartbeat(3, 0)
	f.ready()
	f.ticks(int(cfg.SealRetryTimeoutTicks)-1, 1, 2, 3)
	if fx := f.ready(); len(fx.Assignments) != 0 {
		t.Fatalf("resent early: %+v", fx.Assignments)
	}
	f.ticks(1, 1, 2, 3)
	if got := assignedTo(f.ready()); !reflect.DeepEqual(got, []uint16{3}) {
		t.Fatalf("resent to %v, want [3]", got)
	}
}
