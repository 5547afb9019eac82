package kafka

import (
	"slices"
	"testing"
	"time"
)

// groupLog records what a group reported.
type groupLog struct {
	added, removed []string
	reasons        []string
	rebalances     int
	stables        []groupRecord // the group records written
}

func (l *groupLog) memberAdded(_ *group, id string) { l.added = append(l.added, id) }
func (l *groupLog) rebalanced(*group)               { l.rebalances++ }
func (l *groupLog) stable(g *group)                 { l.stables = append(l.stables, g.record()) }
func (l *groupLog) emptied(g *group)                { l.stables = append(l.stables, g.record()) }
func (l *groupLog) memberRemoved(_ *group, id, reason string) {
	l.removed = append(l.removed, id)
	l.reasons = append(l.reasons, reason)
}

// joinWait is a JoinGroup's answer, once it came.
type joinWait struct {
	res  joinResult
	done int
}

func (w *joinWait) f(r joinResult) { w.res, w.done = r, w.done+1 }

type syncWait struct {
	res  syncResult
	done int
}

func (w *syncWait) f(r syncResult) { w.res, w.done = r, w.done+1 }

var t0 = time.Unix(1_000_000, 0)

func args(id string, protocols ...string) joinArgs {
	a := joinArgs{memberID: id, clientID: "c", protocolType: "consumer", session: 10 * time.Second,
		rebalance: 20 * time.Second, requireID: true}
	for _, p := range protocols {
		a.protocols = append(a.protocols, groupProtocol{name: p, metadata: []byte("md-" + p)})
	}
	if len(protocols) == 0 {
		a.protocols = []groupProtocol{{name: "range", metadata: []byte("md")}}
	}
	return a
}

// newMember joins a new member the v4 way (MEMBER_ID_REQUIRED, then the join with the id handed
// out) and returns its id and the pending join.
func newMember(t *testing.T, g *group, now time.Time) (string, *joinWait) {
	t.Helper()
	var first joinWait
	g.join(now, args(""), first.f)
	if first.done != 1 || first.res.code != errMemberIDRequired || first.res.memberID == "" {
		t.Fatalf("join without an id: %+v, want MEMBER_ID_REQUIRED with an id", first)
	}
	w := &joinWait{}
	g.join(now, args(first.res.memberID), w.f)
	return first.res.memberID, w
}

// stableGroup is a group of one member, synced at generation 1.
func stableGroup(t *testing.T) (*group, *groupLog, string) {
	t.Helper()
	log := &groupLog{}
	g := newGroup("g", &memberIDs{nonce: "n"}, log)
	a, ja := newMember(t, g, t0)
	if ja.done != 1 || ja.res.code != errNone || ja.res.generation != 1 || ja.res.leader != a || len(ja.res.members) != 1 {
		t.Fatalf("first member's join: %+v", ja)
	}
	var sa syncWait
	g.sync(t0, a, 1, nil, nil, map[string][]byte{a: []byte("all")}, sa.f)
	if sa.done != 1 || sa.res.code != errNone || string(sa.res.assignment) != "all" || g.phase != phaseStable {
		t.Fatalf("leader's sync: %+v, phase %v", sa, g.phase)
	}
	return g, log, a
}

func TestGroup_JoinSyncHeartbeat(t *testing.T) {
	g, log, a := stableGroup(t)
	if code := g.heartbeat(t0.Add(time.Second), a, 1); code != errNone {
		t.Fatalf("heartbeat: %d", code)
	}
	if code := g.heartbeat(t0, a, 0); code != errIllegalGeneration {
		t.Fatalf("heartbeat at a stale generation: %d, want ILLEGAL_GENERATION", code)
	}
	if code := g.heartbeat(t0, "nobody", 1); code != errUnknownMemberID {
		t.Fatalf("heartbeat of an unknown member: %d, want UNKNOWN_MEMBER_ID", code)
	}
	var w joinWait
	g.join(t0, args("nobody"), w.f)
	if w.done != 1 || w.res.code != errUnknownMemberID {
		t.Fatalf("join with an id never handed out: %+v", w)
	}
	if log.rebalances != 1 || len(log.added) != 1 {
		t.Fatalf("events: %+v", log)
	}
}

// TestGroup_SecondMemberRebalances: a second member's join waits until the first rejoins (it learns
// of the rebalance from its heartbeat); the leader gets both members, the follower's sync waits for
// the leader's, and each gets its own assignment.
func TestGroup_SecondMemberRebalances(t *testing.T) {
	g, _, a := stableGroup(t)
	now := t0.Add(time.Second)
	b, jb := newMember(t, g, now)
	if jb.done != 0 || g.phase != phasePreparing {
		t.Fatalf("B's join answered before A rejoined: %+v, phase %v", jb, g.phase)
	}
	if code := g.heartbeat(now, a, 1); code != errRebalanceInProgress {
		t.Fatalf("A's heartbeat during the rebalance: %d, want REBALANCE_IN_PROGRESS", code)
	}
	var ss syncWait
	g.sync(now, a, 1, nil, nil, nil, ss.f)
	if ss.res.code != errRebalanceInProgress {
		t.Fatalf("sync during the join phase: %+v", ss)
	}
	var ja joinWait
	g.join(now, args(a), ja.f)
	if ja.done != 1 || jb.done != 1 || ja.res.generation != 2 || jb.res.generation != 2 {
		t.Fatalf("joins after A rejoined: A %+v, B %+v", ja, jb)
	}
	if ja.res.leader != a || len(ja.res.members) != 2 || len(jb.res.members) != 0 || jb.res.leader != a {
		t.Fatalf("leader's answer %+v, follower's %+v", ja.res, jb.res)
	}
	var sb, sa syncWait
	g.sync(now, b, 2, nil, nil, nil, sb.f)
	if sb.done != 0 {
		t.Fatalf("follower's sync answered before the leader's: %+v", sb)
	}
	if code := g.heartbeat(now, b, 2); code != errNone {
		t.Fatalf("heartbeat while the assignment is awaited: %d", code)
	}
	g.sync(now, a, 2, nil, nil, map[string][]byte{a: []byte("p0p1"), b: []byte("p2p3")}, sa.f)
	if sa.done != 1 || sb.done != 1 || string(sa.res.assignment) != "p0p1" || string(sb.res.assignment) != "p2p3" {
		t.Fatalf("syncs: A %+v, B %+v", sa, sb)
	}
	if code := g.heartbeat(now, b, 1); code != errIllegalGeneration {
		t.Fatalf("heartbeat of generation 1 in generation 2: %d", code)
	}
	// A repeated sync in the stable phase gets the same assignment.
	var again syncWait
	g.sync(now, b, 2, nil, nil, nil, again.f)
	if string(again.res.assignment) != "p2p3" {
		t.Fatalf("repeated sync: %+v", again)
	}
}

// TestGroup_RebalanceTimeout: a member that does not rejoin within the rebalance timeout is removed,
// and the joins that waited are answered then, not later.
func TestGroup_RebalanceTimeout(t *testing.T) {
	g, log, a := stableGroup(t)
	now := t0.Add(time.Second)
	b, jb := newMember(t, g, now) // A never rejoins
	// A keeps heartbeating (it is told REBALANCE_IN_PROGRESS) but does not rejoin.
	for i := range 19 {
		tick := now.Add(time.Duration(i+1) * time.Second)
		g.heartbeat(tick, a, 1)
		g.tick(tick)
		if jb.done != 0 {
			t.Fatalf("B's join answered at %v, before the rebalance timeout", tick.Sub(now))
		}
	}
	end := now.Add(20 * time.Second)
	g.tick(end)
	if jb.done != 1 || jb.res.code != errNone || jb.res.generation != 2 || jb.res.leader != b || len(jb.res.members) != 1 {
		t.Fatalf("B's join at the rebalance timeout: %+v", jb)
	}
	if !slices.Contains(log.removed, a) || g.members[a] != nil {
		t.Fatalf("A not removed: %+v", log)
	}
	if code := g.heartbeat(end, a, 1); code != errUnknownMemberID {
		t.Fatalf("A's heartbeat after its removal: %d, want UNKNOWN_MEMBER_ID", code)
	}
}

// TestGroup_SessionTimeout: a member that stops heartbeating is removed after its session timeout,
// and the group rebalances; one that heartbeats stays.
func TestGroup_SessionTimeout(t *testing.T) {
	g, log, a := stableGroup(t)
	now := t0.Add(time.Second)
	b, jb := newMember(t, g, now)
	var ja joinWait
	g.join(now, args(a), ja.f)
	var sa, sb syncWait
	g.sync(now, b, 2, nil, nil, nil, sb.f)
	g.sync(now, a, 2, nil, nil, map[string][]byte{a: []byte("x"), b: []byte("y")}, sa.f)
	if jb.done != 1 || sb.res.code != errNone {
		t.Fatalf("setup: %+v %+v", jb, sb)
	}
	// B falls silent; A heartbeats every second.
	for i := 1; i <= 10; i++ {
		tick := now.Add(time.Duration(i) * time.Second)
		if code := g.heartbeat(tick, a, 2); code != errNone {
			t.Fatalf("A's heartbeat at %ds: %d", i, code)
		}
		g.tick(tick)
		if g.members[b] == nil {
			t.Fatalf("B removed at %ds, within its 10 s session", i)
		}
	}
	late := now.Add(10*time.Second + time.Millisecond)
	g.tick(late)
	if g.members[b] != nil || !slices.Contains(log.reasons, "session timeout") {
		t.Fatalf("B still a member after its session timeout: %+v", log)
	}
	if g.members[a] == nil || g.phase != phasePreparing {
		t.Fatalf("A removed or no rebalance: phase %v", g.phase)
	}
	if code := g.heartbeat(late, a, 2); code != errRebalanceInProgress {
		t.Fatalf("A's heartbeat after B expired: %d, want REBALANCE_IN_PROGRESS", code)
	}
	var again joinWait
	g.join(late, args(a), again.f)
	if again.done != 1 || again.res.generation != 3 || len(again.res.members) != 1 {
		t.Fatalf("A's rejoin: %+v", again)
	}
}

// TestGroup_LeaderSilentAfterJoin: a follower's sync waits for the leader's, but not forever: the
// leader's session timeout removes it, and the waiting sync is answered REBALANCE_IN_PROGRESS.
func TestGroup_LeaderSilentAfterJoin(t *testing.T) {
	g, _, a := stableGroup(t)
	now := t0.Add(time.Second)
	b, _ := newMember(t, g, now)
	var ja joinWait
	g.join(now, args(a), ja.f)
	var sb syncWait
	g.sync(now, b, 2, nil, nil, nil, sb.f)
	for i := 1; i <= 10; i++ {
		g.tick(now.Add(time.Duration(i) * time.Second))
	}
	if sb.done != 0 {
		t.Fatalf("sync answered within the leader's session: %+v", sb)
	}
	g.tick(now.Add(11 * time.Second))
	if sb.done != 1 || sb.res.code != errRebalanceInProgress {
		t.Fatalf("follower's sync after the leader expired: %+v, want REBALANCE_IN_PROGRESS", sb)
	}
}

// TestGroup_Leave: a leave rebalances the others; the last one's leaves the group empty; an unknown
// member's leave is UNKNOWN_MEMBER_ID; a member id handed out and never used expires.
func TestGroup_Leave(t *testing.T) {
	g, _, a := stableGroup(t)
	now := t0.Add(time.Second)
	b, jb := newMember(t, g, now)
	var ja joinWait
	g.join(now, args(a), ja.f)
	if code := g.leave(now, a); code != errNone {
		t.Fatalf("leave: %d", code)
	}
	if g.phase != phasePreparing {
		t.Fatalf("after the leader left: phase %v", g.phase)
	}
	var jb2 joinWait
	g.join(now, args(b), jb2.f)
	if jb2.done != 1 || jb2.res.leader != b || jb2.res.generation != 3 || jb.done != 1 {
		t.Fatalf("B's rejoin after A left: %+v", jb2)
	}
	if code := g.leave(now, "nobody"); code != errUnknownMemberID {
		t.Fatalf("leave of an unknown member: %d", code)
	}
	if code := g.leave(now, b); code != errNone || g.phase != phaseEmpty || !g.idle() {
		t.Fatalf("last leave: %d, phase %v, idle %v", code, g.phase, g.idle())
	}
	var first joinWait
	g.join(now, args(""), first.f)
	if g.idle() {
		t.Fatal("a member id handed out is not kept")
	}
	g.tick(now.Add(10 * time.Second))
	if !g.idle() {
		t.Fatal("a member id never used did not expire with its session timeout")
	}
	var late joinWait
	g.join(now.Add(10*time.Second), args(first.res.memberID), late.f)
	if late.res.code != errUnknownMemberID {
		t.Fatalf("join with an expired member id: %+v", late)
	}
}

// TestGroup_Refusals: the join rules (session bounds, a protocol type, one protocol in common) and
// the commit rules (a generation-less commit only to an empty group; none while the assignment is
// awaited).
func TestGroup_Refusals(t *testing.T) {
	g := newGroup("g", &memberIDs{nonce: "n"}, &groupLog{})
	short := args("")
	short.session = time.Second
	var w joinWait
	g.join(t0, short, w.f)
	if w.res.code != errInvalidSessionTimeout {
		t.Fatalf("1 s session: %+v", w)
	}
	if code := g.checkCommit(t0, "", -1); code != errNone {
		t.Fatalf("generation-less commit to an empty group: %d", code)
	}
	a, _ := newMember(t, g, t0)
	if code := g.checkCommit(t0, "", -1); code != errRebalanceInProgress {
		t.Fatalf("commit while the assignment is awaited: %d", code)
	}
	var s syncWait
	g.sync(t0, a, 1, nil, nil, nil, s.f)
	if code := g.checkCommit(t0, "", -1); code != errUnknownMemberID {
		t.Fatalf("generation-less commit to a group with members: %d, want UNKNOWN_MEMBER_ID", code)
	}
	if code := g.checkCommit(t0, a, 0); code != errIllegalGeneration {
		t.Fatalf("commit at a stale generation: %d", code)
	}
	if code := g.checkCommit(t0, a, 1); code != errNone {
		t.Fatalf("commit of the current generation: %d", code)
	}
	other := args("", "roundrobin")
	var wo joinWait
	g.join(t0, other, wo.f)
	if wo.res.code != errInconsistentGroupProtocol {
		t.Fatalf("join with no protocol in common: %+v", wo)
	}
	other = args("")
	other.protocolType = "connect"
	g.join(t0, other, wo.f)
	if wo.res.code != errInconsistentGroupProtocol {
		t.Fatalf("join with another protocol type: %+v", wo)
	}
	var ws syncWait
	pt := "connect"
	g.sync(t0, a, 1, &pt, nil, nil, ws.f)
	if ws.res.code != errInconsistentGroupProtocol {
		t.Fatalf("sync naming another protocol type: %+v", ws)
	}
}

// TestGroup_ProtocolVotes: the protocol is the one every member offers that most prefer.
func TestGroup_ProtocolVotes(t *testing.T) {
	g := newGroup("g", &memberIDs{nonce: "n"}, &groupLog{})
	var w1, w2, w3 joinWait
	a := args("", "range", "sticky")
	a.requireID = false
	g.join(t0, a, w1.f)
	if w1.res.protocol != "range" {
		t.Fatalf("one member: %q", w1.res.protocol)
	}
	b := args("", "sticky", "range")
	b.requireID = false
	c := args("", "sticky", "range", "roundrobin")
	c.requireID = false
	g.join(t0, b, w2.f)
	g.join(t0, c, w3.f)
	var again joinWait
	a.memberID = w1.res.memberID
	g.join(t0, a, again.f)
	if again.done != 1 || again.res.protocol != "sticky" || w3.res.protocol != "sticky" {
		t.Fatalf("votes: A %+v, C %+v", again.res, w3.res)
	}
}

// TestGroup_RecordRestore: the group record written when the assignment is handed out brings the
// group back on another coordinator (encoded and decoded as the internal stream holds it): its
// members heartbeat and commit at their generation and get their assignment again; the record of
// an emptied group brings back no member.
func TestGroup_RecordRestore(t *testing.T) {
	g, log, a := stableGroup(t)
	now := t0.Add(time.Second)
	b, _ := newMember(t, g, now)
	var ja joinWait
	g.join(now, args(a), ja.f)
	var sa, sb syncWait
	g.sync(now, b, 2, nil, nil, nil, sb.f)
	g.sync(now, a, 2, nil, nil, map[string][]byte{a: []byte("x"), b: []byte("y")}, sa.f)
	if len(log.stables) != 2 {
		t.Fatalf("group records written: %d, want one per stable generation (2)", len(log.stables))
	}
	value := appendGroupRecord(nil, &log.stables[1])
	rec, err := decodeGroupRecord(value)
	if err != nil {
		t.Fatal(err)
	}
	for i := range value {
		if _, err := decodeGroupRecord(value[:i]); err == nil {
			t.Fatalf("group record cut at %d of %d bytes decoded", i, len(value))
		}
	}
	later := now.Add(time.Minute) // past every session of the old coordinator's clock
	log2 := &groupLog{}
	r := restoreGroup(&rec, &memberIDs{nonce: "m"}, log2, later)
	if r.phase != phaseStable || r.generation != 2 || r.leader != a || len(log2.added) != 2 {
		t.Fatalf("restored: phase %v, generation %d, leader %q, added %v", r.phase, r.generation, r.leader, log2.added)
	}
	for _, id := range []string{a, b} {
		if code := r.heartbeat(later, id, 2); code != errNone {
			t.Fatalf("restored member %s heartbeat: %d", id, code)
		}
		if code := r.checkCommit(later, id, 2); code != errNone {
			t.Fatalf("restored member %s commit: %d", id, code)
		}
	}
	var again syncWait
	r.sync(later, b, 2, nil, nil, nil, again.f)
	if string(again.res.assignment) != "y" {
		t.Fatalf("restored follower's assignment: %+v", again)
	}
	var jc joinWait
	r.join(later, args(""), jc.f)
	r.join(later, args(jc.res.memberID), jc.f)
	if r.phase != phasePreparing {
		t.Fatalf("a new member on the restored group: phase %v", r.phase)
	}
	r.leave(later, a)
	r.leave(later, b)
	r.leave(later, jc.res.memberID)
	last := log2.stables[len(log2.stables)-1]
	if len(last.members) != 0 || r.phase != phaseEmpty {
		t.Fatalf("emptied group's record: %+v", last)
	}
	if e := restoreGroup(&last, &memberIDs{nonce: "z"}, &groupLog{}, later); !e.idle() || e.generation != last.generation {
		t.Fatalf("restored empty group: %+v", e)
	}
}

// TestGroup_MemberIDsNeverRepeat: a group dropped from memory (empty) and made again by the same
// coordinator never hands out an id a former member had, so a former member's requests stay
// UNKNOWN_MEMBER_ID.
func TestGroup_MemberIDsNeverRepeat(t *testing.T) {
	ids := &memberIDs{nonce: "n"}
	g := newGroup("g", ids, &groupLog{})
	a, _ := newMember(t, g, t0)
	g.leave(t0, a)
	g2 := newGroup("g", ids, &groupLog{})
	b, _ := newMember(t, g2, t0)
	if a == b {
		t.Fatalf("the group made again handed out %q twice", a)
	}
	if code := g2.heartbeat(t0, a, 1); code != errUnknownMemberID {
		t.Fatalf("former member's heartbeat: %d, want UNKNOWN_MEMBER_ID", code)
	}
}

// TestGroup_LeaderNeverSyncs: a leader that heartbeats but never sends its SyncGroup does not hold
// the follower's SyncGroup past the rebalance timeout: the leader is removed, the follower's sync is
// answered REBALANCE_IN_PROGRESS, and it rejoins as the only member.
func TestGroup_LeaderNeverSyncs(t *testing.T) {
	g, log, a := stableGroup(t)
	now := t0.Add(time.Second)
	b, _ := newMember(t, g, now)
	var ja joinWait
	g.join(now, args(a), ja.f)
	var sb syncWait
	g.sync(now, b, 2, nil, nil, nil, sb.f)
	for i := 1; i < 20; i++ {
		tick := now.Add(time.Duration(i) * time.Second)
		if code := g.heartbeat(tick, a, 2); code != errNone {
			t.Fatalf("leader's heartbeat at %ds: %d", i, code)
		}
		g.tick(tick)
		if sb.done != 0 {
			t.Fatalf("follower's sync answered at %ds, within the rebalance timeout: %+v", i, sb)
		}
	}
	g.tick(now.Add(20 * time.Second))
	if sb.done != 1 || sb.res.code != errRebalanceInProgress || g.members[a] != nil || g.members[b] == nil {
		t.Fatalf("after the rebalance timeout: follower's sync %+v, leader still a member %v", sb, g.members[a] != nil)
	}
	if !slices.Contains(log.reasons, "no SyncGroup within the rebalance timeout") {
		t.Fatalf("removal reasons: %v", log.reasons)
	}
	var jb joinWait
	g.join(now.Add(20*time.Second), args(b), jb.f)
	if jb.done != 1 || jb.res.leader != b || jb.res.generation != 3 {
		t.Fatalf("follower's rejoin: %+v", jb)
	}
}
