package kafka

import (
	"slices"
	"strconv"
	"time"
)

// The classic consumer group protocol's state machine, pure: it takes requests and the time, and
// answers through the callbacks each request left (a JoinGroup or SyncGroup may be answered later,
// when the rebalance completes or times out). It never reads the clock, does I/O or starts
// goroutines; the coordinator (group_coord.go) runs it on its home shard and calls tick.

// groupPhase is where a group is in the classic protocol.
type groupPhase uint8

const (
	phaseEmpty      groupPhase = iota // no members (offsets may be committed with generation -1)
	phasePreparing                    // a rebalance: JoinGroups are gathered until every member rejoined or the rebalance timeout
	phaseCompleting                   // joins answered: waiting for the leader's SyncGroup
	phaseStable                       // assignment handed out: members heartbeat
)

func (p groupPhase) String() string {
	switch p {
	case phasePreparing:
		return "PreparingRebalance"
	case phaseCompleting:
		return "CompletingRebalance"
	case phaseStable:
		return "Stable"
	}
	return "Empty"
}

// Bounds of a member's session timeout (Kafka's group.min/max.session.timeout.ms defaults) and of
// a group's size.
const (
	sessionTimeoutMin = 6 * time.Second
	sessionTimeoutMax = 30 * time.Minute
	groupMembersMax   = 1000
	memberMetadataMax = 64 << 10 // one member's protocol metadata or assignment
)

// groupProtocol is one assignment protocol a member offers in JoinGroup, and its metadata.
type groupProtocol struct {
	name     string
	metadata []byte
}

// joinArgs is a JoinGroup as the state machine takes it.
type joinArgs struct {
	memberID     string
	clientID     string
	clientHost   string
	protocolType string
	protocols    []groupProtocol
	session      time.Duration
	rebalance    time.Duration
	// requireID: JoinGroup v4+, where a member without an id is first answered MEMBER_ID_REQUIRED
	// with one, and joins with it.
	requireID bool
}

// joinMember is one member in the leader's JoinGroup answer.
type joinMember struct {
	id       string
	metadata []byte
}

// joinResult answers a JoinGroup.
type joinResult struct {
	code         int16
	generation   int32
	protocolType string
	protocol     string
	leader       string
	memberID     string
	members      []joinMember // the leader's answer only
}

// syncResult answers a SyncGroup.
type syncResult struct {
	code         int16
	assignment   []byte
	protocolType string
	protocol     string
}

// member is one group member as its coordinator knows it.
type member struct {
	id         string
	clientID   string
	clientHost string
	protocols  []groupProtocol
	session    time.Duration
	rebalance  time.Duration
	deadline   time.Time // the session ends here without a heartbeat (not counted while a join waits)
	assignment []byte
	synced     bool             // sent its SyncGroup in this generation
	join       func(joinResult) // a JoinGroup waiting for the rebalance
	sync       func(syncResult) // a SyncGroup waiting for the leader's
}

// groupEvents are what a group reports to its coordinator's metrics and log.
type groupEvents interface {
	memberAdded(g *group, id string)           // a member joined
	rebalanced(g *group)                       // a generation completed its join
	stable(g *group)                           // the leader's assignment was handed out
	emptied(g *group)                          // the last member went
	memberRemoved(g *group, id, reason string) // a member left, expired or missed a rebalance
}

// group is one consumer group's membership: its phase, generation, members and chosen protocol.
// Owned by its coordinator, on its home shard.
type group struct {
	id           string
	phase        groupPhase
	generation   int32
	protocolType string
	protocol     string
	leader       string
	members      map[string]*member
	pending      map[string]time.Time // member ids handed out with MEMBER_ID_REQUIRED, until they join
	deadline     time.Time            // phasePreparing, phaseCompleting: the phase ends here at the latest
	ids          *memberIDs
	events       groupEvents
}

// memberIDs makes member ids, unique within a coordinator (seq, shared by its groups, so a group
// dropped and made again never hands out an id a former member had) and across coordinators
// (nonce, random per coordinator).
type memberIDs struct {
	nonce string
	seq   uint64
}

func newGroup(id string, ids *memberIDs, events groupEvents) *group {
	return &group{id: id, members: make(map[string]*member), pending: make(map[string]time.Time), ids: ids,
		events: events}
}

// idle reports a group with nothing to keep in memory: no members, none pending.
func (g *group) idle() bool {
	return g.phase == phaseEmpty && len(g.members) == 0 && len(g.pending) == 0
}

// validateJoin checks a JoinGroup's fields against the rules of a join: a session timeout within
// bounds, a protocol type and at least one protocol, metadata within memberMetadataMax. The
// validation of a JoinGroup; it returns the Kafka error.
func validateJoin(a *joinArgs) int16 {
	switch {
	case a.session < sessionTimeoutMin || a.session > sessionTimeoutMax:
		return errInvalidSessionTimeout
	case a.protocolType == "" || len(a.protocols) == 0:
		return errInconsistentGroupProtocol
	}
	for _, p := range a.protocols {
		if len(p.metadata) > memberMetadataMax {
			return errInvalidRequest
		}
	}
	return errNone
}

// join takes a JoinGroup; done is called once with its answer, now or when the rebalance completes.
func (g *group) join(now time.Time, a joinArgs, done func(joinResult)) {
	if code := validateJoin(&a); code != errNone {
		done(joinResult{code: code, memberID: a.memberID, generation: -1})
		return
	}
	if len(g.members) > 0 && (a.protocolType != g.protocolType || !g.supportsAll(a.protocols)) {
		done(joinResult{code: errInconsistentGroupProtocol, memberID: a.memberID, generation: -1})
		return
	}
	if a.memberID == "" {
		if len(g.members)+len(g.pending) >= groupMembersMax {
			done(joinResult{code: errGroupMaxSize, generation: -1})
			return
		}
		id := g.newMemberID(a.clientID)
		if a.requireID {
			g.pending[id] = now.Add(a.session)
			done(joinResult{code: errMemberIDRequired, memberID: id, generation: -1})
			return
		}
		a.memberID = id
	} else if _, ok := g.pending[a.memberID]; ok {
		delete(g.pending, a.memberID)
	} else if g.members[a.memberID] == nil {
		done(joinResult{code: errUnknownMemberID, memberID: a.memberID, generation: -1})
		return
	}
	m := g.members[a.memberID]
	isNew := m == nil
	if isNew {
		m = &member{id: a.memberID}
		g.members[m.id] = m
		g.events.memberAdded(g, m.id)
		if len(g.members) == 1 {
			g.protocolType = a.protocolType
		}
	}
	changed := isNew || !sameProtocols(m.protocols, a.protocols)
	m.clientID, m.clientHost, m.protocols, m.session, m.rebalance = a.clientID, a.clientHost, a.protocols, a.session, a.rebalance
	m.deadline = now.Add(m.session)
	if m.join != nil { // a second join of the same member replaces the first, which learns it lost
		m.join(joinResult{code: errUnknownMemberID, memberID: m.id, generation: -1})
	}
	m.join = done
	switch g.phase {
	case phaseStable:
		if !changed && m.id != g.leader {
			// A follower asking again with nothing new: the current generation, as it is.
			m.join = nil
			done(g.joinResultFor(m))
			return
		}
		g.prepare(now)
	case phaseCompleting, phaseEmpty:
		g.prepare(now)
	}
	g.tryCompleteJoin(now, false)
}

// supportsAll reports whether protocols name at least one protocol every member offers.
func (g *group) supportsAll(protocols []groupProtocol) bool {
	for _, p := range protocols {
		ok := true
		for _, m := range g.members {
			if !offers(m.protocols, p.name) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func offers(ps []groupProtocol, name string) bool {
	for _, p := range ps {
		if p.name == name {
			return true
		}
	}
	return false
}

func sameProtocols(a, b []groupProtocol) bool {
	return slices.EqualFunc(a, b, func(x, y groupProtocol) bool {
		return x.name == y.name && string(x.metadata) == string(y.metadata)
	})
}

func (g *group) newMemberID(clientID string) string {
	g.ids.seq++
	if len(clientID) > 100 {
		clientID = clientID[:100]
	}
	return clientID + "-" + g.ids.nonce + "-" + strconv.FormatUint(g.ids.seq, 10)
}

// prepare starts a rebalance: syncs waiting in the previous generation learn it (REBALANCE_IN_PROGRESS),
// and the join gathers until every member rejoined or the largest rebalance timeout passed.
func (g *group) prepare(now time.Time) {
	if g.phase == phaseCompleting {
		for _, m := range g.sortedMembers() {
			if m.sync != nil {
				f := m.sync
				m.sync = nil
				f(syncResult{code: errRebalanceInProgress})
			}
		}
	}
	for _, m := range g.members {
		m.assignment = nil
	}
	if g.phase != phasePreparing {
		g.deadline = now.Add(g.longestRebalance())
	}
	g.phase = phasePreparing
}

// longestRebalance is the largest rebalance timeout of the members: how long a join phase, and then
// the wait for the assignment, may last.
func (g *group) longestRebalance() time.Duration {
	var longest time.Duration
	for _, m := range g.members {
		longest = max(longest, m.rebalance)
	}
	return longest
}

// tryCompleteJoin ends the join phase once every member has a JoinGroup waiting, or at the deadline
// (force): members that did not rejoin are removed, the generation moves on, the protocol is
// chosen, and every waiting join is answered (the leader with every member's metadata).
func (g *group) tryCompleteJoin(now time.Time, force bool) {
	if g.phase != phasePreparing {
		return
	}
	for _, m := range g.members {
		if m.join == nil && !force {
			return
		}
	}
	for _, m := range g.sortedMembers() {
		if m.join == nil {
			g.remove(m, "did not rejoin within the rebalance timeout")
		}
	}
	g.generation++
	if len(g.members) == 0 {
		g.phase, g.protocol, g.leader, g.protocolType = phaseEmpty, "", "", ""
		g.events.emptied(g)
		return
	}
	g.phase = phaseCompleting
	g.deadline = now.Add(g.longestRebalance())
	g.protocol = g.chooseProtocol()
	if g.members[g.leader] == nil {
		g.leader = g.sortedMembers()[0].id
	}
	g.events.rebalanced(g)
	for _, m := range g.sortedMembers() {
		f := m.join
		m.join, m.synced = nil, false
		m.deadline = now.Add(m.session)
		f(g.joinResultFor(m))
	}
}

// joinResultFor is m's answer for the current generation; the leader's lists every member.
func (g *group) joinResultFor(m *member) joinResult {
	res := joinResult{generation: g.generation, protocolType: g.protocolType, protocol: g.protocol, leader: g.leader,
		memberID: m.id}
	if m.id == g.leader {
		for _, o := range g.sortedMembers() {
			res.members = append(res.members, joinMember{id: o.id, metadata: metadataOf(o.protocols, g.protocol)})
		}
	}
	return res
}

func metadataOf(ps []groupProtocol, name string) []byte {
	for _, p := range ps {
		if p.name == name {
			return p.metadata
		}
	}
	return nil
}

// chooseProtocol picks the protocol every member offers that most members prefer (each votes for
// the first one in its own list that all offer), as Kafka does; ties go to the name first in order.
func (g *group) chooseProtocol() string {
	votes := make(map[string]int)
	for _, m := range g.members {
		for _, p := range m.protocols {
			if g.allOffer(p.name) {
				votes[p.name]++
				break
			}
		}
	}
	best, bestVotes := "", -1
	for name, n := range votes {
		if n > bestVotes || (n == bestVotes && name < best) {
			best, bestVotes = name, n
		}
	}
	return best
}

func (g *group) allOffer(name string) bool {
	for _, m := range g.members {
		if !offers(m.protocols, name) {
			return false
		}
	}
	return true
}

// sortedMembers is the members in id order (answers and removals in a stable order).
func (g *group) sortedMembers() []*member {
	ms := make([]*member, 0, len(g.members))
	for _, m := range g.members {
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(a, b *member) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	return ms
}

// remove drops m, answering what it had waiting (UNKNOWN_MEMBER_ID: it is no member any more).
func (g *group) remove(m *member, reason string) {
	delete(g.members, m.id)
	if m.join != nil {
		f := m.join
		m.join = nil
		f(joinResult{code: errUnknownMemberID, memberID: m.id, generation: -1})
	}
	if m.sync != nil {
		f := m.sync
		m.sync = nil
		f(syncResult{code: errUnknownMemberID})
	}
	if g.leader == m.id {
		g.leader = ""
	}
	g.events.memberRemoved(g, m.id, reason)
}

// checkMember is the error of a request naming member id at generation gen: UNKNOWN_MEMBER_ID before
// ILLEGAL_GENERATION, as Kafka checks them.
func (g *group) checkMember(id string, gen int32) (*member, int16) {
	m := g.members[id]
	switch {
	case m == nil:
		return nil, errUnknownMemberID
	case gen != g.generation:
		return m, errIllegalGeneration
	}
	return m, errNone
}

// sync takes a SyncGroup; done is called once, now or when the leader's SyncGroup comes.
// assignments is the leader's (member id -> assignment), ignored from any other member.
func (g *group) sync(now time.Time, id string, gen int32, protocolType, protocol *string,
	assignments map[string][]byte, done func(syncResult)) {
	m, code := g.checkMember(id, gen)
	if code != errNone {
		done(syncResult{code: code})
		return
	}
	if (protocolType != nil && *protocolType != g.protocolType) || (protocol != nil && *protocol != g.protocol) {
		done(syncResult{code: errInconsistentGroupProtocol})
		return
	}
	m.deadline = now.Add(m.session)
	switch g.phase {
	case phasePreparing:
		done(syncResult{code: errRebalanceInProgress})
	case phaseStable:
		done(g.syncResultFor(m))
	case phaseCompleting:
		m.synced = true
		if m.sync != nil {
			m.sync(syncResult{code: errRebalanceInProgress})
		}
		m.sync = done
		if id != g.leader {
			return
		}
		for _, o := range g.members {
			o.assignment = assignments[o.id]
		}
		g.phase = phaseStable
		g.events.stable(g)
		for _, o := range g.sortedMembers() {
			if o.sync != nil {
				f := o.sync
				o.sync = nil
				o.deadline = now.Add(o.session)
				f(g.syncResultFor(o))
			}
		}
	}
}

func (g *group) syncResultFor(m *member) syncResult {
	a := m.assignment
	if a == nil {
		a = []byte{}
	}
	return syncResult{assignment: a, protocolType: g.protocolType, protocol: g.protocol}
}

// heartbeat takes a Heartbeat: it renews the member's session and says whether a rebalance is under
// way (REBALANCE_IN_PROGRESS: the member rejoins).
func (g *group) heartbeat(now time.Time, id string, gen int32) int16 {
	m, code := g.checkMember(id, gen)
	if code != errNone {
		return code
	}
	m.deadline = now.Add(m.session)
	if g.phase == phasePreparing {
		return errRebalanceInProgress
	}
	return errNone
}

// leave takes one member's LeaveGroup: it is removed and the others rebalance.
func (g *group) leave(now time.Time, id string) int16 {
	m := g.members[id]
	if m == nil {
		if _, ok := g.pending[id]; ok {
			delete(g.pending, id)
			return errNone
		}
		return errUnknownMemberID
	}
	g.remove(m, "left the group")
	g.rebalanceAfterRemoval(now)
	return errNone
}

func (g *group) rebalanceAfterRemoval(now time.Time) {
	switch g.phase {
	case phaseStable, phaseCompleting:
		g.prepare(now)
	}
	g.tryCompleteJoin(now, false)
}

// checkCommit is the error of an OffsetCommit at generation gen by member id, as Kafka checks it:
// a commit without a generation (-1) is taken by an empty group (an admin's or a consumer without a
// group protocol); otherwise only from a member of the current generation, and not while the
// leader's assignment is awaited.
func (g *group) checkCommit(now time.Time, id string, gen int32) int16 {
	if gen < 0 && len(g.members) == 0 {
		return errNone
	}
	if g.phase == phaseCompleting {
		return errRebalanceInProgress
	}
	m, code := g.checkMember(id, gen)
	if code == errNone {
		m.deadline = now.Add(m.session)
	}
	return code
}

// tick ends what timed out by now: members whose session passed without a heartbeat (a member whose
// join or sync waits is not counted: it waits on the coordinator, and the rebalance timeout bounds
// that wait), member ids handed out and never used, a join phase whose rebalance timeout passed,
// and a wait for the leader's assignment that lasted the rebalance timeout (Kafka's pending sync
// timeout: the members that sent no SyncGroup are removed).
func (g *group) tick(now time.Time) {
	for id, until := range g.pending {
		if !now.Before(until) {
			delete(g.pending, id)
		}
	}
	removed := false
	for _, m := range g.sortedMembers() {
		if m.join == nil && m.sync == nil && now.After(m.deadline) {
			g.remove(m, "session timeout")
			removed = true
		}
	}
	if removed {
		g.rebalanceAfterRemoval(now)
	}
	if g.phase == phasePreparing && !now.Before(g.deadline) {
		g.tryCompleteJoin(now, true)
	}
	if g.phase == phaseCompleting && !now.Before(g.deadline) {
		// The assignment did not come within the rebalance timeout: the members that sent no
		// SyncGroup (the leader among them) go, and the others rebalance.
		for _, m := range g.sortedMembers() {
			if !m.synced {
				g.remove(m, "no SyncGroup within the rebalance timeout")
			}
		}
		g.rebalanceAfterRemoval(now)
	}
}

// abandon answers everything waiting with code (the coordinator moved: NOT_COORDINATOR) and drops
// every member.
func (g *group) abandon(code int16) {
	for _, m := range g.sortedMembers() {
		if m.join != nil {
			f := m.join
			m.join = nil
			f(joinResult{code: code, memberID: m.id, generation: -1})
		}
		if m.sync != nil {
			f := m.sync
			m.sync = nil
			f(syncResult{code: code})
		}
	}
	clear(g.members)
	clear(g.pending)
	g.phase = phaseEmpty
}

// record is the group as a group record stores it: its generation, protocol, leader and members
// with their chosen protocol's metadata and assignment.
func (g *group) record() groupRecord {
	rec := groupRecord{group: g.id, generation: g.generation, protocolType: g.protocolType, protocol: g.protocol,
		leader: g.leader}
	for _, m := range g.sortedMembers() {
		rec.members = append(rec.members, groupRecordMember{id: m.id, clientID: m.clientID, clientHost: m.clientHost,
			sessionMs: int32(m.session / time.Millisecond), rebalanceMs: int32(m.rebalance / time.Millisecond),
			metadata: metadataOf(m.protocols, g.protocol), assignment: m.assignment})
	}
	return rec
}

// restoreGroup is the group a group record stores, as a coordinator that took over starts it: stable
// at the record's generation, each member's session starting now. A record without members gives
// an empty group that keeps the generation.
func restoreGroup(rec *groupRecord, ids *memberIDs, events groupEvents, now time.Time) *group {
	g := newGroup(rec.group, ids, events)
	g.generation = rec.generation
	if len(rec.members) == 0 {
		return g
	}
	g.phase, g.protocolType, g.protocol, g.leader = phaseStable, rec.protocolType, rec.protocol, rec.leader
	for _, rm := range rec.members {
		m := &member{id: rm.id, clientID: rm.clientID, clientHost: rm.clientHost,
			protocols: []groupProtocol{{name: rec.protocol, metadata: rm.metadata}},
			session:   time.Duration(rm.sessionMs) * time.Millisecond, rebalance: time.Duration(rm.rebalanceMs) * time.Millisecond,
			assignment: rm.assignment}
		m.deadline = now.Add(m.session)
		g.members[m.id] = m
		events.memberAdded(g, m.id)
	}
	return g
}
