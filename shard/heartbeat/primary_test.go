package heartbeat

import (
	"fmt"
	"slices"
	"testing"
)

// testTicks is a short schedule: P = 5, busy timeout 20, idle interval 10, idle timeout 40.
var testTicks = Ticks{BroadcastIntervalTicks: 5, HeartbeatTimeoutTicks: 20, IdleHeartbeatIntervalTicks: 10,
	IdleHeartbeatTimeoutTicks: 40}

// sendAll sends every entry p owes at tick t, the way a shard whose links all work would, and returns
// what it sent.
func sendAll(p *Primary, t Tick) (Members, State) {
	p.Plan(t)
	owed, state := p.Owed()
	if owed != 0 {
		p.Sent(owed, p.Timestamp(t.Number))
	}
	return owed, state
}

// trace drives a started primary through ticks 1..n, calling commitAt before planning each tick, and
// returns "tick:state" for every tick on which it sent.
func trace(p *Primary, s *Schedule, n int, commitAt func(tick uint64) (uint64, Members)) []string {
	var out []string
	for range n {
		t := s.Advance()
		if commitAt != nil {
			if c, holders := commitAt(t.Number); c > p.Commit() {
				p.Committed(t.Number, c, holders)
			}
		}
		if owed, state := sendAll(p, t); owed != 0 {
			out = append(out, fmt.Sprintf("%d:%s", t.Number, state))
		}
	}
	return out
}

// R1: a shard has one send tick every P ticks.
func TestR1_SendTickEveryPTicks(t *testing.T) {
	s := NewSchedule(testTicks)
	var send, idle []uint64
	for range 30 {
		tk := s.Advance()
		if tk.Send {
			send = append(send, tk.Number)
		}
		if tk.IdleSend {
			idle = append(idle, tk.Number)
		}
	}
	if !slices.Equal(send, []uint64{5, 10, 15, 20, 25, 30}) {
		t.Fatalf("send ticks %v", send)
	}
	if !slices.Equal(idle, []uint64{10, 20, 30}) {
		t.Fatalf("idle send ticks %v", idle)
	}
}

// R1 and R3: heartbeats leave only on send ticks, and a busy group sends on every one.
func TestR3_BusyGroupHeartbeatsEverySendTick(t *testing.T) {
	s := NewSchedule(testTicks)
	var p Primary
	p.Start(testTicks, 0, 1, 0, 0, 0b110, 2)
	// The commit moves every 3 ticks, so the group stays busy; holders are empty so no eager entries.
	got := trace(&p, &s, 20, func(tick uint64) (uint64, Members) { return tick / 3, 0 })
	want := []string{"5:busy", "10:busy", "15:busy", "20:busy"}
	if !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
}

// R2: the first heartbeat after coming online or becoming primary goes on the next send tick, whatever
// the idle alignment.
func TestR2_FirstHeartbeatOnNextSendTick(t *testing.T) {
	cases := []struct {
		startAfter int    // ticks advanced before Start
		first      string // first send
	}{
		{0, "5:busy"},
		{4, "5:busy"},
		{5, "10:busy"},
		{11, "15:busy"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("start after tick %d", c.startAfter), func(t *testing.T) {
			s := NewSchedule(testTicks)
			for range c.startAfter {
				s.Advance()
			}
			var p Primary
			p.Start(testTicks, s.Now().Number, 3, 10, 1, 0b101, 2)
			got := trace(&p, &s, 10, nil)
			if len(got) == 0 || got[0] != c.first {
				t.Fatalf("sent %v, want first %s", got, c.first)
			}
		})
	}
}

// R20: after commit_heartbeat_timeout without a new view or commit, the group turns idle on a send tick
// and sends its first idle heartbeat on that same tick; after that only on idle send ticks.
func TestR20_IdleSwitchOnSendTick(t *testing.T) {
	s := NewSchedule(testTicks)
	var p Primary
	p.Start(testTicks, 0, 1, 7, 0, 0b10, 2)
	// Commit moves at tick 3 only. Quiet from tick 3: 20 ticks later is tick 23, so the first send tick
	// at or after it (25) turns the group idle, even though 25 is not an idle send tick.
	got := trace(&p, &s, 50, func(tick uint64) (uint64, Members) {
		if tick >= 3 {
			return 8, 0
		}
		return 7, 0
	})
	want := []string{"5:busy", "10:busy", "15:busy", "20:busy", "25:idle", "30:idle", "40:idle", "50:idle"}
	if !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	if p.Busy() {
		t.Fatal("group still busy")
	}
}

// R20 and R6: the next new commit point makes an idle group busy again; the eager Commit goes at once.
func TestR20_NewCommitMakesIdleGroupBusy(t *testing.T) {
	s := NewSchedule(testTicks)
	var p Primary
	p.Start(testTicks, 0, 1, 0, 0, 0b110, 2)
	got := trace(&p, &s, 44, func(tick uint64) (uint64, Members) {
		if tick >= 32 {
			return 1, 0b100 // only member 2 holds op 1
		}
		return 0, 0
	})
	want := []string{"5:busy", "10:busy", "15:busy", "20:idle", "30:idle", "32:eager", "35:busy", "40:busy"}
	if !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
}

// R6: eager Commits leave on any tick, to the backups that hold the newly committed op only, and a
// heartbeat on the same tick stands for them (one entry per member per tick).
func TestR6_EagerCommitToHoldersOnAnyTick(t *testing.T) {
	cases := []struct {
		name    string
		tick    uint64
		holders Members
		owed    Members
		state   State
	}{
		{"between send ticks, one holder", 7, 0b0100, 0b0100, StateEager},
		{"between send ticks, two holders", 8, 0b1100, 0b1100, StateEager},
		{"holder that is not a backup is ignored", 7, 0b10001, 0b00000, StateNone},
		{"on a send tick the heartbeat covers it", 10, 0b0100, 0b1110, StateBusy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewSchedule(testTicks)
			var p Primary
			p.Start(testTicks, 0, 1, 0, 0, 0b1110, 3)
			for {
				tk := s.Advance()
				if tk.Number == c.tick {
					p.Committed(tk.Number, 1, c.holders)
					p.Plan(tk)
					owed, state := p.Owed()
					if owed != c.owed || state != c.state {
						t.Fatalf("owed %b %s, want %b %s", owed, state, c.owed, c.state)
					}
					return
				}
				sendAll(&p, tk)
			}
		})
	}
}

// R12: entries a shard could not send (the group's superblock save failed) stay owed and go in a later
// batch; a member that was sent is not owed twice.
func TestR12_UnsentEntriesStayOwedForLaterBatch(t *testing.T) {
	s := NewSchedule(testTicks)
	var p Primary
	p.Start(testTicks, 0, 1, 0, 0, 0b110, 2)
	for range 4 {
		sendAll(&p, s.Advance())
	}
	tk := s.Advance() // tick 5, send tick: the save failed, nothing goes.
	p.Plan(tk)
	if owed, state := p.Owed(); owed != 0b110 || state != StateBusy {
		t.Fatalf("owed %b %s", owed, state)
	}
	tk = s.Advance() // tick 6, not a send tick: the save worked, the held entries go now.
	p.Plan(tk)
	owed, state := p.Owed()
	if owed != 0b110 || state != StateBusy {
		t.Fatalf("tick 6 owed %b %s, want the held heartbeat", owed, state)
	}
	p.Sent(0b010, p.Timestamp(6)) // only member 1 fit
	if owed, _ := p.Owed(); owed != 0b100 {
		t.Fatalf("after partial send owed %b, want 0b100", owed)
	}
	p.Plan(s.Advance())
	if owed, state := p.Owed(); owed != 0b100 || state != StateBusy {
		t.Fatalf("tick 7 owed %b %s", owed, state)
	}
}

// R14: timestamp_monotonic grows strictly per group, also when the caller's clock stalls or steps back,
// and across a stop and a new start.
func TestR14_TimestampsGrowPerGroup(t *testing.T) {
	var p Primary
	p.Start(testTicks, 0, 1, 0, 0, 0b10, 2)
	clock := []uint64{100, 100, 90, 250, 250}
	var stamps []uint64
	for i, now := range clock {
		p.Plan(Tick{Number: uint64(i+1) * 5, Send: true})
		owed, _ := p.Owed()
		ts := p.Timestamp(now)
		p.Sent(owed, ts)
		stamps = append(stamps, ts)
		if i == 2 {
			p.Stop()
			p.Start(testTicks, 15, 2, 0, 0, 0b10, 2)
		}
	}
	if !slices.Equal(stamps, []uint64{100, 101, 102, 250, 251}) {
		t.Fatalf("timestamps %v", stamps)
	}
}

// R24: the quorum window is commit_heartbeat_timeout in both states; fresh replies from a quorum keep
// the primary in office, and it reports once when they are missing.
func TestR24_QuorumWindowOnBusyTimeoutInBothStates(t *testing.T) {
	cases := []struct {
		name      string
		replying  Members // backups that reply to every entry
		quorum    int
		lostAt    uint64 // 0: never within the run
		idleAfter bool   // the group is idle for most of the run
	}{
		{"busy, all reply", 0b110, 2, 0, false},
		{"busy, one of two replies, quorum 2", 0b010, 2, 0, false},
		{"busy, none reply", 0, 2, 20, false},
		{"idle, all reply", 0b110, 2, 0, true},
		{"idle, none reply: window stays 20 ticks", 0, 2, 20, true},
		{"five members, one replies, quorum 3", 0b00010, 3, 20, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewSchedule(testTicks)
			var p Primary
			backups := Members(0b110)
			if c.quorum == 3 {
				backups = 0b11110
			}
			p.Start(testTicks, 0, 4, 0, 0, backups, c.quorum)
			var lostAt uint64
			for range 80 {
				tk := s.Advance()
				if !c.idleAfter {
					p.Committed(tk.Number, tk.Number, 0)
				}
				p.Plan(tk)
				owed, _ := p.Owed()
				if owed != 0 {
					ts := p.Timestamp(tk.Number)
					p.Sent(owed, ts)
					for i := uint8(0); i < MembersMax; i++ {
						if (owed & c.replying).Has(i) {
							// After the loss, one reply of three members is counted but short.
							if v := p.OnReply(tk.Number, 4, ts, i); v != ReplyFresh && (lostAt == 0 || v != ReplyShort) {
								t.Fatalf("reply verdict %d", v)
							}
						}
					}
				}
				if p.QuorumLost(tk.Number) {
					if lostAt != 0 {
						t.Fatal("quorum loss reported twice")
					}
					lostAt = tk.Number
				}
			}
			if lostAt != c.lostAt {
				t.Fatalf("quorum lost at %d, want %d (busy %v)", lostAt, c.lostAt, p.Busy())
			}
			if c.idleAfter && c.lostAt == 0 && p.Busy() {
				t.Fatal("group never turned idle")
			}
		})
	}
}

// R24 and R29: a reply counts only for the current view, from a backup, echoing a timestamp the primary
// stamped, and newer than that member's previous reply.
func TestR24_ReplyValidation(t *testing.T) {
	var p Primary
	p.Start(testTicks, 0, 4, 0, 0, 0b110, 2)
	p.Plan(Tick{Number: 5, Send: true})
	p.Sent(0b110, p.Timestamp(500))
	cases := []struct {
		name    string
		view    uint32
		ts      uint64
		replica uint8
		want    ReplyVerdict
	}{
		{"fresh", 4, 500, 1, ReplyFresh},
		{"duplicate", 4, 500, 1, ReplyStale},
		{"other view", 3, 500, 2, ReplyOtherView},
		{"not a backup", 4, 500, 0, ReplyNotBackup},
		{"outside the group", 4, 500, 9, ReplyNotBackup},
		{"timestamp never stamped", 4, 501, 2, ReplyFuture},
		{"second member fresh", 4, 500, 2, ReplyFresh},
	}
	for _, c := range cases {
		if got := p.OnReply(6, c.view, c.ts, c.replica); got != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, got, c.want)
		}
	}
	p.Stop()
	if got := p.OnReply(7, 4, 500, 1); got != ReplyNotPrimary {
		t.Errorf("stopped: verdict %d", got)
	}
}

// R25: after a send the group records per member whether the link was connected.
func TestR25_RecordsLinkStatePerMember(t *testing.T) {
	var p Primary
	p.Start(testTicks, 0, 1, 0, 0, 0b110, 2)
	p.RecordLink(1, true)
	p.RecordLink(2, false)
	if !p.LinkConnected(1) || p.LinkConnected(2) {
		t.Fatalf("link state %b", p.linkUp)
	}
	p.RecordLink(1, false)
	p.RecordLink(2, true)
	if p.LinkConnected(1) || !p.LinkConnected(2) {
		t.Fatalf("link state after flip %b", p.linkUp)
	}
}

// R5: the schedule is a function of the ticks alone: the same inputs replay to the same sends.
func TestR5_ScheduleReplaysFromTicksAlone(t *testing.T) {
	run := func() []string {
		s := NewSchedule(testTicks)
		var p Primary
		p.Start(testTicks, 0, 1, 0, 0, 0b110, 2)
		return trace(&p, &s, 120, func(tick uint64) (uint64, Members) {
			return (tick / 37) * (tick % 2), 0b100
		})
	}
	a, b := run(), run()
	if !slices.Equal(a, b) || len(a) == 0 {
		t.Fatalf("runs differ:\n%v\n%v", a, b)
	}
}

// The per-tick path allocates nothing.
func TestPrimaryTickAllocatesNothing(t *testing.T) {
	s := NewSchedule(testTicks)
	var p Primary
	p.Start(testTicks, 0, 1, 0, 0, 0b110, 2)
	allocs := testing.AllocsPerRun(1000, func() {
		tk := s.Advance()
		p.Committed(tk.Number, tk.Number/7, 0b10)
		sendAll(&p, tk)
		p.OnReply(tk.Number, 1, p.timestamp, 1)
		p.QuorumLost(tk.Number)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per tick", allocs)
	}
}

// quorumRun drives a busy primary of view 4 (self 0, backups 1 and 2, quorum 2) for n ticks. Each
// entry sent to member 1 at tick s is answered, arriving at the tick arrive(s) returns (0: never);
// member 2 never answers. A reply arriving at its send tick is handled after the send. It returns the ticks QuorumLost reported and each reply's verdict by
// arrival tick.
func quorumRun(t *testing.T, n uint64, arrive func(sent uint64) uint64) (lost []uint64, verdicts map[uint64]ReplyVerdict) {
	t.Helper()
	s := NewSchedule(testTicks)
	var p Primary
	p.Start(testTicks, 0, 4, 0, 0, 0b110, 2)
	pending := map[uint64][]uint64{} // arrival tick -> timestamps
	verdicts = map[uint64]ReplyVerdict{}
	for range n {
		tk := s.Advance()
		p.Committed(tk.Number, tk.Number, 0)
		for _, ts := range pending[tk.Number] {
			verdicts[tk.Number] = p.OnReply(tk.Number, 4, ts, 1)
		}
		if p.QuorumLost(tk.Number) {
			lost = append(lost, tk.Number)
		}
		p.Plan(tk)
		if owed, _ := p.Owed(); owed != 0 {
			ts := p.Timestamp(1000 + tk.Number)
			p.Sent(owed, ts)
			switch at := arrive(tk.Number); {
			case at == tk.Number:
				verdicts[at] = p.OnReply(at, 4, ts, 1)
			case at != 0:
				pending[at] = append(pending[at], ts)
			}
		}
	}
	return lost, verdicts
}

// R24: a primary that heard its quorum again after a loss and then loses it a second time in the
// same view is told again (issue 22, finding 8; the stream simulator's QuorumOncePerEpoch).
func TestR24_SecondLossInTheSameViewIsReported(t *testing.T) {
	// Member 1 answers at once on ticks up to 30 and from 60 to 90: silent from 30 (lost at 50,
	// window 20), heard at 60 by a Commit sent after the loss, silent from 90 (lost again at 110).
	lost, verdicts := quorumRun(t, 130, func(sent uint64) uint64 {
		if sent <= 30 || (sent >= 60 && sent <= 90) {
			return sent
		}
		return 0
	})
	if !slices.Equal(lost, []uint64{50, 110}) {
		t.Fatalf("quorum lost at %v, want [50 110]", lost)
	}
	if v := verdicts[60]; v != ReplyFresh {
		t.Fatalf("the reply that brought the quorum back: verdict %d, want fresh", v)
	}
}

// R24 and R14: a reply hears its member as of the tick the Commit it answers was sent. Replies held
// past the window (queued for a paused primary, or in the network) neither keep the quorum nor bring
// it back (issue 22; the stream simulator's QuorumReplyAtArrival).
func TestR24_ReplyToCommitOlderThanWindowDoesNotRestoreQuorum(t *testing.T) {
	// Member 1 answers at once up to tick 30; the answers to the Commits of 35 to 45 are held and
	// all arrive at tick 70, 25 ticks after the newest of them was sent.
	lost, verdicts := quorumRun(t, 100, func(sent uint64) uint64 {
		switch {
		case sent <= 30:
			return sent
		case sent <= 45:
			return 70
		}
		return 0
	})
	if !slices.Equal(lost, []uint64{50}) {
		t.Fatalf("quorum lost at %v, want [50] only", lost)
	}
	if v := verdicts[70]; v != ReplyExpired {
		t.Fatalf("a reply to a Commit sent 25 ticks before: verdict %d, want expired", v)
	}
	// Replies delayed past the window keep no quorum either: a primary heard only that late loses
	// it 20 ticks after the newest Commit it knows was answered in time.
	lost, _ = quorumRun(t, 60, func(sent uint64) uint64 { return sent + 21 })
	if !slices.Equal(lost, []uint64{20}) {
		t.Fatalf("replies 21 ticks late: quorum lost at %v, want [20]", lost)
	}
}

// R24: while the quorum is lost, a reply to a Commit sent before the loss, though inside the window,
// is counted but does not bring the quorum back: only Commits sent since the loss do.
func TestR24_ReplyToCommitBeforeTheLossIsShort(t *testing.T) {
	// Member 1's answers to the Commits of 35 to 45 arrive at 52 (inside the window, sent before
	// the loss at 50), those of 50 and later 3 ticks after their send.
	lost, verdicts := quorumRun(t, 80, func(sent uint64) uint64 {
		switch {
		case sent <= 30:
			return sent
		case sent <= 45:
			return 52
		}
		return sent + 3
	})
	if !slices.Equal(lost, []uint64{50}) {
		t.Fatalf("quorum lost at %v, want [50]", lost)
	}
	if v := verdicts[52]; v != ReplyShort {
		t.Fatalf("a reply to a Commit from before the loss: verdict %d, want short", v)
	}
	if v := verdicts[53]; v != ReplyFresh {
		t.Fatalf("the first reply to a Commit since the loss: verdict %d, want fresh", v)
	}
}

// The send marks span the window whatever the spacing: with a window of 500 ticks and a Commit on
// every tick, a reply to a Commit sent 480 ticks before is counted, and one sent 500 before is not.
func TestR24_SendMarksSpanTheWindow(t *testing.T) {
	long := Ticks{BroadcastIntervalTicks: 50, HeartbeatTimeoutTicks: 500, IdleHeartbeatIntervalTicks: 200,
		IdleHeartbeatTimeoutTicks: 1200}
	var p Primary
	p.Start(long, 0, 1, 0, 0, 0b10, 2)
	stamps := map[uint64]uint64{}
	for tick := uint64(1); tick <= 600; tick++ {
		p.Committed(tick, tick, 0b10)
		p.Plan(Tick{Number: tick, Send: tick%50 == 0})
		owed, _ := p.Owed()
		stamps[tick] = p.Timestamp(tick)
		p.Sent(owed, stamps[tick])
	}
	if v := p.OnReply(600, 1, stamps[100], 1); v != ReplyExpired {
		t.Fatalf("reply to tick 100 at 600: verdict %d, want expired", v)
	}
	if v := p.OnReply(600, 1, stamps[120], 1); v != ReplyFresh {
		t.Fatalf("reply to tick 120 at 600: verdict %d, want fresh", v)
	}
	if p.QuorumLost(619) {
		t.Fatal("quorum lost at 619: the reply counted as sent before 119")
	}
	if !p.QuorumLost(640) {
		t.Fatal("quorum not lost at 640: the reply counted as sent after 140")
	}
}

// A primary rests (its shard may skip it until the next send tick) only off the schedule, or idle
// with nothing owed: a busy primary, or an idle one whose heartbeat is owed and not yet sent, does
// not.
func TestPrimary_RestingOnlyIdleWithNothingOwed(t *testing.T) {
	var p Primary
	if !p.Resting() {
		t.Fatal("a stopped primary does not rest")
	}
	s := NewSchedule(testTicks)
	p.Start(testTicks, 0, 1, 0, 0, MemberOf(1), 1)
	for range 20 {
		if p.Resting() {
			t.Fatalf("busy at tick %d, yet resting", s.Now().Number)
		}
		sendAll(&p, s.Advance())
	}
	if p.Busy() || !p.Resting() { // tick 20: idle, its first idle heartbeat sent
		t.Fatalf("after tick 20: busy %v, resting %v", p.Busy(), p.Resting())
	}
	for range 10 {
		p.Plan(s.Advance()) // tick 30, an idle send tick: the heartbeat is owed, not sent
	}
	if owed, _ := p.Owed(); owed == 0 || p.Resting() {
		t.Fatalf("idle with a heartbeat owed (%v): resting %v", owed, p.Resting())
	}
	p.Sent(MemberOf(1), p.Timestamp(30))
	if !p.Resting() {
		t.Fatal("idle with nothing owed, yet not resting")
	}
	p.Committed(31, 1, MemberOf(1))
	if p.Resting() {
		t.Fatal("a new commit point makes the primary busy, yet it rests")
	}
	p.Stop()
	if !p.Resting() {
		t.Fatal("stopped, yet not resting")
	}
}
