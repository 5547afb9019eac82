package stream_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

func batch(base uint64, count uint32, epoch uint32, size int) []byte {
	return encode(stream.BatchHeader{BaseOffset: base, Count: count, Epoch: epoch}, payload(int(base), size))
}

// followerAt opens node 2 following node 1 at epoch 2, holding [0,4) and [4,8) from epoch 1 and
// [8,10) from epoch 2.
func followerAt(t *testing.T) *node {
	rec := [][]byte{batch(0, 4, 1, 30), batch(4, 4, 1, 30), batch(8, 2, 2, 30)}
	epochs := []wire.LogEpoch{{Epoch: 1}, {Epoch: 2, RecordStart: 8}}
	return newNode(t, testConfig(2), assignment(2, 1, 2), rec, nil, epochs)
}

func prepareMsg(base uint64, prev uint32, count uint32, batches ...[]byte) stream.Message {
	m := stream.Message{Kind: stream.KindPrepare, From: 1}
	m.Prepare = wire.StreamPrepare{Stream: testStream, Incarnation: testIncarnation, Epoch: 2, PrevEpoch: prev,
		Log: wire.LogRecords, BaseOffset: base, Count: count, Batches: slices.Concat(batches...)}
	return m
}

// TestLogMatching_Refusals: a follower refuses a prepare that does not extend its log, names the
// reason, appends nothing, and answers the refusals the owner can act on with its tails and epochs.
func TestLogMatching_Refusals(t *testing.T) {
	corrupt := batch(10, 2, 2, 30)
	corrupt[len(corrupt)-1] ^= 0xff // payload checksum no longer matches
	for _, tc := range []struct {
		name   string
		msg    stream.Message
		reason stream.Refusal
		answer bool
	}{
		{"wrong predecessor epoch", prepareMsg(10, 1, 2, batch(10, 2, 2, 30)), stream.RefuseWrongPrevEpoch, true},
		{"predecessor epoch from the future", prepareMsg(8, 2, 2, batch(8, 2, 2, 30)), stream.RefuseWrongPrevEpoch, true},
		{"gap past the tail", prepareMsg(12, 2, 2, batch(12, 2, 2, 30)), stream.RefuseGap, true},
		{"bad checksum", prepareMsg(10, 2, 2, corrupt), stream.RefuseBadBatch, false},
		{"truncated batch", prepareMsg(10, 2, 2, batch(10, 2, 2, 30)[:50]), stream.RefuseBadBatch, false},
		{"oversize batch", prepareMsg(10, 2, 1, batch(10, 1, 2, 64<<10+1)), stream.RefuseOversize, false},
		{"count disagrees", prepareMsg(10, 2, 3, batch(10, 2, 2, 30)), stream.RefuseBadBatch, false},
		{"batch not at the prepare's base", prepareMsg(10, 2, 2, batch(11, 2, 2, 30)), stream.RefuseBadBatch, false},
		{"batches not contiguous", prepareMsg(10, 2, 4, batch(10, 2, 2, 30), batch(13, 2, 2, 30)), stream.RefuseBadBatch, false},
		{"batch epoch past the prepare's", prepareMsg(10, 2, 2, batch(10, 2, 3, 30)), stream.RefuseBadBatch, false},
		{"batch epoch below its predecessor", prepareMsg(10, 2, 2, batch(10, 2, 1, 30)), stream.RefuseBadBatch, false},
		{"held record with another epoch", prepareMsg(8, 1, 4, batch(8, 2, 1, 30), batch(10, 2, 1, 30)), stream.RefuseDivergent, true},
		{"held records of another epoch across the tail", prepareMsg(8, 1, 4, batch(8, 4, 1, 30)), stream.RefuseDivergent, true},
		{"held batch with another boundary", prepareMsg(8, 1, 3, batch(8, 3, 2, 30)), stream.RefuseBadBatch, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := followerAt(t)
			before := slices.Clone(f.rec)
			f.c.Step(&tc.msg)
			fx := f.c.Ready()
			st := f.c.Stats()
			if st.LastRefusal != tc.reason || st.Refused[tc.reason] != 1 {
				t.Fatalf("refusal %v (counts %v), want %v", st.LastRefusal, st.Refused, tc.reason)
			}
			if len(fx.Appends) != 0 {
				t.Fatalf("refused prepare appended %d batches", len(fx.Appends))
			}
			if app, dur := f.c.Tails(); app != 10 || dur != 10 {
				t.Fatalf("tails %d/%d after a refusal, want 10/10", app, dur)
			}
			if (len(fx.PrepareOKs) == 1) != tc.answer {
				t.Fatalf("answers %+v, want one: %v", fx.PrepareOKs, tc.answer)
			}
			if tc.answer {
				ok := fx.PrepareOKs[0]
				if ok.Msg.Status != wire.PrepareMismatch || ok.Msg.RecordTail != 10 || ok.Msg.BaseOffset != tc.msg.Prepare.BaseOffset || len(ok.Epochs) != 2 {
					t.Fatalf("answer %+v", ok)
				}
			}
			f.apply(t, fx)
			for i := range before {
				if !bytes.Equal(before[i], f.rec[i]) || len(f.rec) != len(before) {
					t.Fatal("log changed by a refused prepare")
				}
			}
		})
	}
}

// A prepare the log has no room for (PendingBytesMax not yet durable) is dropped, the log unchanged,
// and taken when it comes again after the log synced.
func TestFollower_NoRoomDropsPrepare(t *testing.T) {
	f := followerAt(t)
	f.autoSync = false
	cfg := testConfig(2)
	var batches [][]byte
	var size int
	base := uint64(10)
	for size < cfg.PendingBytesMax-(64<<10) {
		b := batch(base, 1, 2, 60<<10)
		batches, size, base = append(batches, b), size+len(b), base+1
	}
	m := prepareMsg(10, 2, uint32(len(batches)), batches...)
	f.c.Step(&m)
	f.ready(t)
	big := prepareMsg(base, 2, 1, batch(base, 1, 2, 64<<10))
	f.c.Step(&big)
	fx := f.c.Ready()
	if len(fx.Appends) != 0 || f.c.Stats().LastRefusal != stream.RefuseBusy || len(fx.PrepareOKs) != 0 {
		t.Fatalf("appends %d refusal %v answers %d", len(fx.Appends), f.c.Stats().LastRefusal, len(fx.PrepareOKs))
	}
	f.sync(t)
	f.ready(t)
	f.c.Step(&big)
	if fx := f.c.Ready(); len(fx.Appends) != 1 {
		t.Fatalf("after the sync: appends %d", len(fx.Appends))
	}
}

// A prepare that extends the log is appended, and acknowledged only once durable.
func TestLogMatching_AppendsAndAcksOnlyDurable(t *testing.T) {
	f := followerAt(t)
	f.autoSync = false
	m := prepareMsg(10, 2, 5, batch(10, 2, 2, 30), batch(12, 3, 2, 30))
	f.c.Step(&m)
	fx := f.c.Ready()
	if len(fx.Appends) != 2 || len(fx.PrepareOKs) != 0 {
		t.Fatalf("appends %d answers %d, want 2 and none before durable", len(fx.Appends), len(fx.PrepareOKs))
	}
	if !bytes.Equal(fx.Appends[0].Encoded, m.Prepare.Batches[:len(batch(10, 2, 2, 30))]) {
		t.Fatal("the follower's append is not the owner's bytes")
	}
	f.apply(t, fx)
	f.c.Tick()
	if fx := f.c.Ready(); len(fx.PrepareOKs) != 0 {
		t.Fatalf("acknowledged before durable: %+v", fx.PrepareOKs)
	}
	// A probe is answered at once, with the durable tail, not what is only queued.
	probe := prepareMsg(15, 2, 0)
	f.c.Step(&probe)
	if fx := f.c.Ready(); len(fx.PrepareOKs) != 1 || fx.PrepareOKs[0].Msg.RecordTail != 10 || fx.PrepareOKs[0].Msg.BaseOffset != 15 {
		t.Fatalf("probe answered %+v", fx.PrepareOKs)
	}
	f.sync(t)
	fx = f.c.Ready()
	if len(fx.PrepareOKs) != 1 || fx.PrepareOKs[0].Msg.Status != wire.PrepareAppended || fx.PrepareOKs[0].Msg.RecordTail != 15 {
		t.Fatalf("answers %+v", fx.PrepareOKs)
	}
	// A repeat of what the follower holds is answered at once and appends nothing.
	f.c.Step(&m)
	fx = f.c.Ready()
	if len(fx.Appends) != 0 || len(fx.PrepareOKs) != 1 || fx.PrepareOKs[0].Msg.RecordTail != 15 {
		t.Fatalf("repeat: appends %d answers %+v", len(fx.Appends), fx.PrepareOKs)
	}
}

// Prepares from the wrong place are dropped and counted; one from an older epoch is told so.
func TestFollower_IgnoresAndStaleEpoch(t *testing.T) {
	f := followerAt(t)
	m := prepareMsg(10, 2, 2, batch(10, 2, 2, 30))
	m.From = 3
	f.c.Step(&m)
	m = prepareMsg(10, 2, 2, batch(10, 2, 2, 30))
	m.Prepare.Incarnation = testIncarnation + 1
	f.c.Step(&m)
	m = prepareMsg(10, 2, 2, batch(10, 2, 2, 30))
	m.Prepare.Epoch = 3
	f.c.Step(&m)
	m = prepareMsg(10, 1, 2, batch(10, 2, 1, 30))
	m.Prepare.Epoch = 1
	f.c.Step(&m)
	fx := f.c.Ready()
	st := f.c.Stats()
	if st.Ignored[stream.IgnoreNotFromOwner] != 1 || st.Ignored[stream.IgnoreWrongStream] != 1 || st.Ignored[stream.IgnoreNewerEpoch] != 1 {
		t.Fatalf("ignored %v", st.Ignored)
	}
	if len(fx.Appends) != 0 || len(fx.PrepareOKs) != 1 || fx.PrepareOKs[0].Msg.Status != wire.PrepareStaleEpoch {
		t.Fatalf("appends %d answers %+v", len(fx.Appends), fx.PrepareOKs)
	}
}

// Answers the owner cannot use are counted and dropped: from a node that is no follower, for another
// stream, of an older epoch, or to a copy that is not the owner.
func TestOwner_IgnoresAnswers(t *testing.T) {
	owner := newNode(t, testConfig(1), assignment(2, 1, 2), nil, nil, []wire.LogEpoch{{Epoch: 1}})
	for _, mod := range []func(m *stream.Message){
		func(m *stream.Message) { m.From = 3 },
		func(m *stream.Message) { m.PrepareOK.Stream = 8 },
		func(m *stream.Message) { m.PrepareOK.Epoch = 1 },
	} {
		m := okMsg(2, 5, 0)
		m.PrepareOK.Epoch = 2
		mod(&m)
		owner.c.Step(&m)
	}
	owner.ready(t)
	st := owner.c.Stats()
	if st.Ignored[stream.IgnoreNotFromFollower] != 1 || st.Ignored[stream.IgnoreWrongStream] != 1 || st.Ignored[stream.IgnoreOlderEpoch] != 1 {
		t.Fatalf("ignored %v", st.Ignored)
	}
	if owner.c.FollowerMatch(2) != 0 {
		t.Fatal("an ignored answer moved the follower's tail")
	}
	f := followerAt(t)
	m := okMsg(1, 5, 0)
	f.c.Step(&m)
	if f.c.Stats().Ignored[stream.IgnoreRole] != 1 {
		t.Fatalf("follower ignored %v", f.c.Stats().Ignored)
	}
}
