package heartbeat

import "testing"

// R8: only a Commit from the primary of the backup's current view restarts its timeout.
func TestR8_OnlyCurrentPrimaryRestartsTimeout(t *testing.T) {
	cases := []struct {
		name    string
		view    uint32
		ts      uint64
		state   State
		replica uint8
		want    CommitVerdict
	}{
		{"current primary, newer", 5, 200, StateBusy, 2, CommitRestarted},
		{"older view", 4, 900, StateBusy, 2, CommitOldView},
		{"newer view", 6, 900, StateBusy, 0, CommitViewAhead},
		{"another member in the current view", 5, 900, StateBusy, 1, CommitNotPrimary},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b Backup
			b.Follow(testTicks, 0, 5, 2)
			if got := b.OnCommit(10, c.view, c.ts, c.state, c.replica); got != c.want {
				t.Fatalf("verdict %d, want %d", got, c.want)
			}
			// The timer restarted only when accepted: silent at 20 from start, or at 30 from tick 10.
			silentAt := uint64(20)
			if c.want.Accepted() {
				silentAt = 30
			}
			for tick := uint64(11); tick <= 40; tick++ {
				if b.Silent(tick) {
					if tick != silentAt {
						t.Fatalf("silent at %d, want %d", tick, silentAt)
					}
					return
				}
			}
			t.Fatal("never silent")
		})
	}
}

// R22: a newer Commit (same view, higher timestamp) restarts the timeout; Idle waits the idle timeout,
// Busy and Eager the busy one; a Commit that is not newer restarts nothing.
func TestR22_NewerCommitRestartsWithStateTimeout(t *testing.T) {
	cases := []struct {
		name     string
		ts       uint64
		state    State
		want     CommitVerdict
		timeout  uint64
		silentAt uint64
	}{
		{"busy", 101, StateBusy, CommitRestarted, 20, 30},
		{"eager", 101, StateEager, CommitRestarted, 20, 30},
		{"idle", 101, StateIdle, CommitRestarted, 40, 50},
		{"same timestamp", 100, StateIdle, CommitNotNewer, 20, 25},
		{"older timestamp", 99, StateIdle, CommitNotNewer, 20, 25},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b Backup
			b.Follow(testTicks, 0, 1, 0)
			if v := b.OnCommit(5, 1, 100, StateBusy, 0); v != CommitRestarted {
				t.Fatalf("first commit %d", v)
			}
			if got := b.OnCommit(10, 1, c.ts, c.state, 0); got != c.want {
				t.Fatalf("verdict %d, want %d", got, c.want)
			}
			if b.TimeoutTicks() != c.timeout {
				t.Fatalf("timeout %d, want %d", b.TimeoutTicks(), c.timeout)
			}
			var silentAt uint64
			for tick := uint64(11); tick <= 60; tick++ {
				if b.Silent(tick) {
					if silentAt != 0 {
						t.Fatal("silent reported twice")
					}
					silentAt = tick
				}
			}
			if silentAt != c.silentAt {
				t.Fatalf("silent at %d, want %d", silentAt, c.silentAt)
			}
		})
	}
}

// R21 and R17: an entry with a heartbeat_state other than Busy, Idle or Eager is a bad entry; it
// restarts nothing.
func TestR21_BadHeartbeatStateRejected(t *testing.T) {
	for _, s := range []State{0, 4, 255} {
		var b Backup
		b.Follow(testTicks, 0, 1, 0)
		if v := b.OnCommit(1, 1, 10, s, 0); v != CommitBadState {
			t.Errorf("state %d: verdict %d", s, v)
		}
	}
	for _, s := range []State{StateBusy, StateIdle, StateEager} {
		if !s.Valid() {
			t.Errorf("state %s not valid", s)
		}
	}
}

// R21 end to end: every entry a primary owes carries a valid state, and a backup fed those entries
// never goes silent while the primary keeps sending, busy or idle.
func TestR21_BackupFollowsPrimaryThroughBothStates(t *testing.T) {
	s := NewSchedule(testTicks)
	var p Primary
	var b Backup
	p.Start(testTicks, 0, 3, 0, 0, 0b10, 2)
	b.Follow(testTicks, 0, 3, 0)
	for range 200 {
		tk := s.Advance()
		if tk.Number < 30 || (tk.Number > 120 && tk.Number < 130) {
			p.Committed(tk.Number, tk.Number, 0b10)
		}
		p.Plan(tk)
		owed, state := p.Owed()
		if owed != 0 {
			if !state.Valid() {
				t.Fatalf("tick %d: owed with state %d", tk.Number, state)
			}
			ts := p.Timestamp(tk.Number)
			p.Sent(owed, ts)
			if v := b.OnCommit(tk.Number, 3, ts, state, 0); v != CommitRestarted {
				t.Fatalf("tick %d: verdict %d", tk.Number, v)
			}
		}
		if b.Silent(tk.Number) {
			t.Fatalf("backup silent at tick %d", tk.Number)
		}
	}
}

// R7 at the schedule level: nothing but a Commit restarts the timeout, so a backup that only sees
// prepares (which never reach Backup) goes silent on time.
func TestR7_OnlyCommitsKeepBackupAlive(t *testing.T) {
	var b Backup
	b.Follow(testTicks, 100, 2, 1)
	for tick := uint64(101); tick < 120; tick++ {
		if b.Silent(tick) {
			t.Fatalf("silent early at %d", tick)
		}
	}
	if !b.Silent(120) {
		t.Fatal("not silent after commit_heartbeat_timeout")
	}
}

func TestBackupOnCommitAllocatesNothing(t *testing.T) {
	var b Backup
	b.Follow(testTicks, 0, 1, 0)
	ts := uint64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		ts++
		b.OnCommit(ts, 1, ts, StateIdle, 0)
		b.Silent(ts)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations", allocs)
	}
}
