package stream_test

import (
	"testing"

	"github.com/ringstream/ringstream/engine/stream"
	"github.com/ringstream/ringstream/wire"
)

// kseq is a Kafka producer's batch Sequence (epoch, base sequence).
func kseq(epoch uint16, base uint32) uint64 { return stream.KafkaSequence(epoch, base) }

// oneReply is the single reply the owner sent since the last take.
func oneReply(t *testing.T, n *node) stream.Reply {
	t.Helper()
	r := n.takeReplies()
	if len(r) != 1 {
		t.Fatalf("%d replies: %+v", len(r), r)
	}
	return r[0]
}

// Kafka producers step their base sequence by the batch's record count: the next batch is
// appended, a retry of any of the last 5 batches is answered with its first offset and not appended
// again, a skipped or repeated-but-shifted sequence is refused with CodeSequenceGap.
func TestProducersKafka_StepByCount(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2, 3))
	owner := cl.nodes[1]
	const pid = 7 << 47
	counts := []uint32{3, 1, 4, 1, 5, 9}
	var bases []uint64
	var seqs []uint32
	seq := uint32(0)
	for i, c := range counts {
		cl.produce(1, 9, pid, kseq(0, seq), c, payload(i, 20))
		cl.settle()
		r := oneReply(t, owner)
		if r.Kind != stream.ReplyProduce || r.Produce.Duplicate {
			t.Fatalf("batch %d answered %+v", i, r)
		}
		bases, seqs = append(bases, r.Produce.BaseOffset), append(seqs, seq)
		seq += c
	}
	tail := owner.recTail()
	for i := len(counts) - 5; i < len(counts); i++ { // each of the last 5 batches, retried
		cl.produce(1, 9, pid, kseq(0, seqs[i]), counts[i], payload(i, 20))
		cl.settle()
		r := oneReply(t, owner)
		if r.Kind != stream.ReplyProduce || !r.Produce.Duplicate || r.Produce.BaseOffset != bases[i] || r.Produce.Count != counts[i] {
			t.Fatalf("retry of batch %d (seq %d) answered %+v, want base %d", i, seqs[i], r, bases[i])
		}
	}
	if owner.recTail() != tail || cl.nodes[2].recTail() != tail {
		t.Fatal("a retry was appended again")
	}
	for _, c := range []struct {
		name  string
		seq   uint32
		count uint32
	}{
		{"the first batch, out of the window", seqs[0], counts[0]},
		{"one past the next", seq + 1, 1},
		{"our rule's next (last + 1)", seqs[len(seqs)-1] + 1, 1},
		{"a remembered base with another count", seqs[len(seqs)-1], counts[len(counts)-1] + 1},
	} {
		cl.produce(1, 9, pid, kseq(0, c.seq), c.count, payload(0, 20))
		if r := oneReply(t, owner); r.Kind != stream.ReplyError || r.Error.Code != wire.CodeSequenceGap {
			t.Fatalf("%s: answered %+v", c.name, r)
		}
	}
	cl.produce(1, 9, pid, kseq(0, seq), 2, payload(50, 20))
	cl.settle()
	if r := oneReply(t, owner); r.Kind != stream.ReplyProduce || r.Produce.Duplicate || r.Produce.BaseOffset != tail {
		t.Fatalf("next batch answered %+v, want base %d", r, tail)
	}
}

// Kafka's base sequence wraps past 2^31-1 to 0: a batch ending at the wrap is followed by base 0,
// and its retry is still a duplicate.
func TestProducersKafka_Wrap(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2))
	owner := cl.nodes[1]
	const pid = 3<<47 | 11
	first := uint32(1<<31 - 3)
	cl.produce(1, 9, pid, kseq(2, first), 3, payload(1, 20)) // unknown producer: any sequence starts it
	cl.settle()
	if r := oneReply(t, owner); r.Kind != stream.ReplyProduce || r.Produce.Duplicate {
		t.Fatalf("first batch answered %+v", r)
	}
	cl.produce(1, 9, pid, kseq(2, 1<<31), 2, payload(2, 20)) // not wrapped: out of order
	if r := oneReply(t, owner); r.Kind != stream.ReplyError || r.Error.Code != wire.CodeSequenceGap {
		t.Fatalf("unwrapped next answered %+v", r)
	}
	cl.produce(1, 9, pid, kseq(2, 0), 2, payload(2, 20))
	cl.settle()
	if r := oneReply(t, owner); r.Kind != stream.ReplyProduce || r.Produce.Duplicate || r.Produce.BaseOffset != 3 {
		t.Fatalf("wrapped next answered %+v", r)
	}
	cl.produce(1, 9, pid, kseq(2, first), 3, payload(1, 20))
	cl.settle()
	if r := oneReply(t, owner); !r.Produce.Duplicate || r.Produce.BaseOffset != 0 {
		t.Fatalf("retry across the wrap answered %+v", r)
	}
	cl.produce(1, 9, pid, kseq(2, 2), 1, payload(3, 20))
	cl.settle()
	if r := oneReply(t, owner); r.Kind != stream.ReplyProduce || r.Produce.Duplicate || r.Produce.BaseOffset != 5 {
		t.Fatalf("batch after the wrap answered %+v", r)
	}
}

// A Kafka producer's older epoch is fenced; a newer epoch starts at base sequence 0 and nowhere else.
func TestProducersKafka_Epochs(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2))
	owner := cl.nodes[1]
	const pid = 5 << 47
	cl.produce(1, 9, pid, kseq(4, 0), 2, payload(1, 20))
	cl.settle()
	oneReply(t, owner)
	cl.produce(1, 9, pid, kseq(3, 2), 1, payload(2, 20))
	if r := oneReply(t, owner); r.Kind != stream.ReplyError || r.Error.Code != wire.CodeProducerFenced {
		t.Fatalf("older epoch answered %+v", r)
	}
	cl.produce(1, 9, pid, kseq(5, 2), 1, payload(2, 20))
	if r := oneReply(t, owner); r.Kind != stream.ReplyError || r.Error.Code != wire.CodeSequenceGap {
		t.Fatalf("newer epoch not at 0 answered %+v", r)
	}
	cl.produce(1, 9, pid, kseq(5, 0), 1, payload(2, 20))
	cl.settle()
	if r := oneReply(t, owner); r.Kind != stream.ReplyProduce || r.Produce.Duplicate || r.Produce.BaseOffset != 2 {
		t.Fatalf("newer epoch at 0 answered %+v", r)
	}
	cl.produce(1, 9, pid, kseq(4, 2), 1, payload(2, 20)) // the old epoch is fenced from now on
	if r := oneReply(t, owner); r.Kind != stream.ReplyError || r.Error.Code != wire.CodeProducerFenced {
		t.Fatalf("old epoch after the bump answered %+v", r)
	}
}

// After a failover the new owner's table, rebuilt from the batch headers of its log, answers a
// Kafka producer's retry of each of its last 5 batches with the old owner's offsets and takes the
// next base sequence.
func TestProducersKafka_RetryAfterFailover(t *testing.T) {
	cl := newCluster(t, assignment(1, 1, 2))
	const pid = 9 << 47
	var bases, seqs []uint64
	seq := uint32(0)
	for i := range 6 {
		c := uint32(i%3 + 1)
		cl.produce(1, 9, pid, kseq(0, seq), c, payload(i, 20))
		cl.settle()
		r := oneReply(t, cl.nodes[1])
		bases, seqs = append(bases, r.Produce.BaseOffset), append(seqs, uint64(seq)<<8|uint64(c))
		seq += c
	}
	a2 := assignment(2, 2, 1)
	n2 := newNode(t, testConfig(2), a2, cl.nodes[2].rec, nil, cl.nodes[2].epochs)
	n1 := newNode(t, testConfig(1), a2, cl.nodes[1].rec, nil, cl.nodes[1].epochs)
	cl2 := &cluster{t: t, nodes: map[uint16]*node{1: n1, 2: n2}, ids: []uint16{1, 2}}
	cl2.settle()
	tail := n2.recTail()
	for i := 1; i < 6; i++ {
		s, c := uint32(seqs[i]>>8), uint32(seqs[i]&0xff)
		cl2.produce(2, 9, pid, kseq(0, s), c, payload(i, 20))
		cl2.settle()
		if r := oneReply(t, n2); !r.Produce.Duplicate || r.Produce.BaseOffset != bases[i] || r.Produce.Epoch != 2 {
			t.Fatalf("retry %d after failover answered %+v, want base %d", i, r, bases[i])
		}
	}
	cl2.produce(2, 9, pid, kseq(0, seq), 1, payload(9, 20))
	cl2.settle()
	if r := oneReply(t, n2); r.Produce.Duplicate || r.Produce.BaseOffset != tail {
		t.Fatalf("next batch after failover answered %+v", r)
	}
}

// Our own producers keep their rule (each sequence the last plus 1) whatever their batches' counts.
func TestProducersKafka_OwnRuleUnchanged(t *testing.T) {
	cl := newCluster(t, assignment(1, 1))
	owner := cl.nodes[1]
	cl.produce(1, 9, 42, 0, 5, payload(0, 20))
	cl.settle()
	oneReply(t, owner)
	cl.produce(1, 9, 42, 5, 1, payload(1, 20)) // Kafka's next would be 5: ours is 1
	if r := oneReply(t, owner); r.Kind != stream.ReplyError || r.Error.Code != wire.CodeSequenceGap {
		t.Fatalf("count-stepped sequence answered %+v", r)
	}
	cl.produce(1, 9, 42, 1, 1, payload(1, 20))
	cl.settle()
	if r := oneReply(t, owner); r.Kind != stream.ReplyProduce || r.Produce.BaseOffset != 5 {
		t.Fatalf("next sequence answered %+v", r)
	}
}

// A producer id whose last batch followed the other rule is taken as unknown: its batch under the
// new rule starts it at any sequence. (Our clients draw random 64-bit ids, so one meets a Kafka
// producer's id only by a vanishing chance; the table still never reads one rule's sequence by the
// other's.)
func TestProducersKafka_RuleSwitchIsANewProducer(t *testing.T) {
	cl := newCluster(t, assignment(1, 1))
	owner := cl.nodes[1]
	cl.produce(1, 9, 42, 0, 3, payload(0, 20)) // our rule
	cl.settle()
	oneReply(t, owner)
	cl.produce(1, 9, 42, kseq(0, 5), 1, payload(1, 20)) // Kafka's, at a sequence of its own
	cl.settle()
	if r := oneReply(t, owner); r.Kind != stream.ReplyProduce || r.Produce.Duplicate || r.Produce.BaseOffset != 3 {
		t.Fatalf("Kafka batch after our rule answered %+v", r)
	}
	cl.produce(1, 9, 42, 0, 1, payload(2, 20)) // our rule again, from 0
	cl.settle()
	if r := oneReply(t, owner); r.Kind != stream.ReplyProduce || r.Produce.Duplicate || r.Produce.BaseOffset != 4 {
		t.Fatalf("our batch after Kafka's answered %+v", r)
	}
}
