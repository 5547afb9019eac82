package vsr

import (
	"encoding/binary"
	"sort"

	"github.com/cespare/xxhash/v2"
)

// session is one client's latest committed request and its result. A retried request gets this
// result back instead of being applied again.
type session struct {
	client  uint64
	request uint64
	op      uint64 // the op that committed request
	result  []byte
}

// clientTable holds sessions sorted by client id, at most max of them. It is part of the replicated
// state: every replica updates it in op order, and checkpoints carry it, so it is the same on every
// replica at one commit.
type clientTable struct {
	sessions []session
	max      int
}

func (t *clientTable) find(client uint64) (int, bool) {
	i := sort.Search(len(t.sessions), func(i int) bool { return t.sessions[i].client >= client })
	return i, i < len(t.sessions) && t.sessions[i].client == client
}

// lookup returns the session of client, if any.
func (t *clientTable) lookup(client uint64) (*session, bool) {
	i, ok := t.find(client)
	if !ok {
		return nil, false
	}
	return &t.sessions[i], true
}

// commit records that op committed request of client with result. Past max sessions it evicts the one
// whose last op is oldest (ties cannot happen: ops are unique), the same choice on every replica.
func (t *clientTable) commit(client, request, op uint64, result []byte) {
	i, ok := t.find(client)
	if ok {
		s := &t.sessions[i]
		s.request, s.op = request, op
		s.result = append(s.result[:0], result...)
		return
	}
	t.sessions = append(t.sessions, session{})
	copy(t.sessions[i+1:], t.sessions[i:])
	t.sessions[i] = session{client: client, request: request, op: op, result: append([]byte(nil), result...)}
	if len(t.sessions) > t.max {
		oldest := 0
		for j := range t.sessions {
			if t.sessions[j].op < t.sessions[oldest].op {
				oldest = j
			}
		}
		t.sessions = append(t.sessions[:oldest], t.sessions[oldest+1:]...)
	}
}

// digest hashes seed and every session (client, request, op, result length, result) in client order.
func (t *clientTable) digest(seed uint64) uint64 {
	var h xxhash.Digest
	h.Reset()
	var b [32]byte
	_, _ = h.Write(binary.LittleEndian.AppendUint64(b[:0], seed))
	for i := range t.sessions {
		s := &t.sessions[i]
		e := binary.LittleEndian.AppendUint64(b[:0], s.client)
		e = binary.LittleEndian.AppendUint64(e, s.request)
		e = binary.LittleEndian.AppendUint64(e, s.op)
		_, _ = h.Write(binary.LittleEndian.AppendUint64(e, uint64(len(s.result))))
		_, _ = h.Write(s.result)
	}
	return h.Sum64()
}
