package kafka

import (
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Ids carry the node in their top bits, grow by one within a millisecond, follow the wall clock,
// never run more than producerIDLead ahead of it, and a restarted node's first id is above
// anything its previous run could have handed out.
func TestProducerIDs(t *testing.T) {
	now := int64(5000)
	clock := func() int64 { return now }
	p := newProducerIDs(7, clock)
	first, ok := p.next()
	if !ok || first>>producerIDNodeShift != 7 || first&(1<<producerIDNodeShift-1) != now+producerIDLead {
		t.Fatalf("first id %#x ok %v", first, ok)
	}
	// The run ahead is bounded: the first id is producerIDLead ahead already.
	if _, ok := p.next(); ok {
		t.Fatal("an id past the lead was handed out")
	}
	now++
	if id, _ := p.next(); id != first+1 {
		t.Fatalf("second id %#x, want %#x", id, first+1)
	}
	now += 2 * producerIDLead
	id, ok := p.next()
	if !ok || id&(1<<producerIDNodeShift-1) != now {
		t.Fatalf("id after the clock moved: %#x ok %v, want clock %d", id, ok, now)
	}
	// Hand out every id allowed, as a stopping node could; a restart a millisecond later starts above.
	var last int64
	n := 0
	for {
		v, ok := p.next()
		if !ok {
			break
		}
		last, n = v, n+1
	}
	if n != producerIDLead {
		t.Fatalf("%d ids within the lead, want %d", n, producerIDLead)
	}
	now++
	q := newProducerIDs(7, clock)
	if v, ok := q.next(); !ok || v <= last {
		t.Fatalf("restarted node's first id %#x, the previous run's last %#x", v, last)
	}
	if v, _ := newProducerIDs(65535, clock).next(); v < 0 {
		t.Fatalf("node 65535's id %#x is negative", v)
	}
}

// InitProducerId: a transactional id is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a
// previous id without its epoch (or the other way) with INVALID_REQUEST.
func TestValidateInitProducerID(t *testing.T) {
	txn := "t"
	for _, c := range []struct {
		name  string
		txn   *string
		id    int64
		epoch int16
		want  int16
	}{
		{"fresh", nil, -1, -1, errNone},
		{"previous id and epoch", nil, 77, 3, errNone},
		{"transactional", &txn, -1, -1, errTransactionalIDAuthz},
		{"id without epoch", nil, 77, -1, errInvalidRequest},
		{"epoch without id", nil, -1, 0, errInvalidRequest},
		{"id below -1", nil, -5, 0, errInvalidRequest},
	} {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch = c.txn, c.id, c.epoch
		if got, msg := validateInitProducerID(req); got != c.want {
			t.Errorf("%s: code %d (%s), want %d", c.name, got, msg, c.want)
		}
	}
}

// The shards allocate at once: every id handed out is unique, and the lead bounds them together.
func TestProducerIDsConcurrent(t *testing.T) {
	clock := func() int64 { return 10_000 }
	p := newProducerIDs(3, clock)
	p.last.Store(clock() - 1) // start at the wall clock: producerIDLead+1 ids are allowed
	ids := make(chan int64, 4*producerIDLead)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range producerIDLead {
				if id, ok := p.next(); ok {
					ids <- id
				}
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := map[int64]bool{}
	for id := range ids {
		if seen[id] {
			t.Fatalf("id %#x handed out twice", id)
		}
		seen[id] = true
	}
	if len(seen) != producerIDLead+1 {
		t.Fatalf("%d ids handed out, want %d", len(seen), producerIDLead+1)
	}
}
