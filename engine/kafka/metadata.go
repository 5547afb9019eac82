package kafka

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// partitionInfo is one partition as the metadata replica holds it.
type partitionInfo struct {
	partition int32
	stream    uint64
	owner     uint16 // 0: no owner (a recovery is under way)
	followers []uint16
}

// metaView is what a Metadata response needs from the applied metadata state, read on shard 0.
type metaView struct {
	topics map[string][]partitionInfo // partitions in partition order
	ok     bool                       // false: this node holds no metadata replica
	reach  map[uint16]bool            // this node and the peers its shard 0 link reaches: the ISR's nodes
}

// reachable is this node and every peer whose shard 0 link is up.
func (h *Handler) reachable() map[uint16]bool {
	reach := map[uint16]bool{h.node: true}
	for _, l := range h.cfg.Shards.Status() {
		if l.Shard == 0 && l.Up {
			reach[l.Peer] = true
		}
	}
	return reach
}

// inSync appends to dst the replicas whose node reach holds: a partition's ISR as this broker can
// tell it. A follower's replication progress is known on its owner's shard only; what every broker
// knows is which nodes its links reach, and a copy on a node no link reaches is not keeping up.
func inSync(dst, replicas []int32, reach map[uint16]bool) []int32 {
	for _, r := range replicas {
		if reach[uint16(r)] {
			dst = append(dst, r)
		}
	}
	return dst
}

// readMeta reads the topics of the applied metadata state (shard 0's goroutine): every stream whose
// name is a partition's (SplitStreamName), with its assignment. want limits it to those topics (nil:
// all of them).
func (h *Handler) readMeta(want map[string]bool) metaView {
	v := metaView{topics: make(map[string][]partitionInfo), reach: h.reachable()}
	if h.cfg.Meta == nil {
		return v
	}
	v.ok = true
	state := h.cfg.Meta.State()
	for _, st := range state.Streams() {
		topic, p, ok := SplitStreamName(st.Name)
		if !ok || (want != nil && !want[topic]) {
			continue
		}
		pi := partitionInfo{partition: p, stream: st.ID}
		if a, ok := state.Assignment(st.ID); ok {
			pi.owner, pi.followers = a.Owner, slices.Clone(a.Followers)
		}
		v.topics[topic] = append(v.topics[topic], pi)
	}
	for _, parts := range v.topics {
		slices.SortFunc(parts, func(a, b partitionInfo) int { return int(a.partition) - int(b.partition) })
	}
	return v
}

func serveMetadata(h *Handler, s *shard.Shard, st *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.MetadataRequest)
	resp := kmsg.NewPtrMetadataResponse()
	resp.SetVersion(req.Version)
	r.resp = resp
	for _, b := range h.brokers {
		kb := kmsg.NewMetadataResponseBroker()
		kb.NodeID, kb.Host, kb.Port = int32(b.Node), b.Addr.Addr().String(), int32(b.Addr.Port())
		resp.Brokers = append(resp.Brokers, kb)
	}
	resp.ControllerID = int32(h.node) // no controller API is served: any broker stands for it
	cluster := clusterName(h.from.Cluster)
	resp.ClusterID = &cluster
	if req.Version == 0 && len(req.Topics) == 0 {
		req.Topics = nil // version 0 has no null list: an empty one asks for every topic
	}
	var want map[string]bool
	if req.Topics != nil {
		want = make(map[string]bool, len(req.Topics))
		for _, t := range req.Topics {
			if t.Topic != nil {
				want[*t.Topic] = true
			}
		}
	}
	// Kafka's Metadata at versions 0 to 3 always allows auto-creation.
	autoCreate := req.Version < 4 || req.AllowAutoTopicCreation
	r.waiting++
	err := h.cfg.Shards.Run(0, func(*shard.Shard) {
		v := h.readMeta(want)
		_ = h.cfg.Shards.Run(s.Index(), func(s *shard.Shard) {
			st := &h.shards[s.Index()]
			r.waiting--
			if !r.finished {
				h.fillMetadata(s, st, r, req, resp, v, autoCreate)
			}
			h.settle(s, st, r)
		})
	})
	if err != nil {
		r.waiting-- // the node stops: answered with brokers only
	}
}

// clusterName is the cluster id as Kafka's cluster id string.
func clusterName(id uint64) string {
	return "ringstream-" + uintString(id)
}

func uintString(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return string(b[i:])
}

// fillMetadata answers a Metadata request from v: every topic asked for (or every topic), each
// partition's leader the stream's owner and its replicas the assignment's copies. A topic asked
// for that does not exist is created with one partition when the request allows it, and answered
// LEADER_NOT_AVAILABLE meanwhile (the client asks again), as Kafka does.
func (h *Handler) fillMetadata(s *shard.Shard, st *shardState, r *request, req *kmsg.MetadataRequest,
	resp *kmsg.MetadataResponse, v metaView, autoCreate bool) {
	names := make([]string, 0, len(v.topics))
	if req.Topics == nil {
		for t := range v.topics {
			names = append(names, t)
		}
		slices.Sort(names)
	} else {
		for _, t := range req.Topics {
			if t.Topic != nil {
				names = append(names, *t.Topic)
			}
		}
	}
	for _, name := range names {
		kt := kmsg.NewMetadataResponseTopic()
		kt.Topic = &name
		parts, found := v.topics[name]
		switch {
		case !v.ok:
			kt.ErrorCode = errLeaderNotAvailable // no replica here to read: ask another broker
		case validateTopic(name) != nil:
			kt.ErrorCode = errInvalidTopic
		case !found && autoCreate:
			kt.ErrorCode = errLeaderNotAvailable
			h.autoCreate(s, st, r.conn, name)
		case !found:
			kt.ErrorCode = errUnknownTopicOrPart
		}
		for _, p := range parts {
			st.ids[StreamName(name, p.partition)] = p.stream
			kp := kmsg.NewMetadataResponseTopicPartition()
			kp.Partition = p.partition
			kp.Leader = -1
			kp.LeaderEpoch = -1 // no leader epochs: clients skip epoch validation (no OffsetForLeaderEpoch)
			if p.owner != 0 && h.isBroker(p.owner) {
				kp.Leader = int32(p.owner)
			} else {
				kp.ErrorCode = errLeaderNotAvailable
			}
			if p.owner != 0 {
				kp.Replicas = append(kp.Replicas, int32(p.owner))
			}
			for _, f := range p.followers {
				kp.Replicas = append(kp.Replicas, int32(f))
			}
			kp.ISR = inSync(kp.ISR, kp.Replicas, v.reach)
			kt.Partitions = append(kt.Partitions, kp)
		}
		resp.Topics = append(resp.Topics, kt)
	}
}

// autoCreateWait bounds how long an auto-created topic's create is tried again.
const autoCreateWait = 10 * time.Second

// autoCreate creates topic with one partition, detached from the Metadata request that asked (it is
// answered LEADER_NOT_AVAILABLE at once). One create per topic at a time per shard.
func (h *Handler) autoCreate(s *shard.Shard, st *shardState, connID uint64, topic string) {
	if st.creating[topic] {
		return
	}
	st.creating[topic] = true
	bg := &request{conn: connID, silent: true} // never queued on the connection: nothing is sent for it
	h.createTopic(s, st, bg, topic, 1, h.copies, autoCreateWait, func(int32, int16, string) {
		delete(st.creating, topic)
	})
}

func (h *Handler) isBroker(node uint16) bool {
	for _, b := range h.brokers {
		if b.Node == node {
			return true
		}
	}
	return false
}

// createTopic creates the streams of partitions 0..n-1 of topic with copies copies (majority
// durable) in batched creates (wire.CreateStreams: up to wire.StreamsPerRequestMax partitions a
// request, committed as one metadata op per hundred), calling done once per partition with its
// outcome. A partition refused with a code that clears by itself (no metadata primary, the pipeline
// full) is asked again with the others of its kind after a backoff, until wait has passed.
func (h *Handler) createTopic(s *shard.Shard, st *shardState, r *request, topic string, n int32, copies uint8,
	wait time.Duration, done func(p int32, code int16, msg string)) {
	deadline := time.Now().Add(wait)
	parts := make([]int32, n)
	for p := range n {
		parts[p] = p
	}
	for len(parts) > 0 {
		k := min(len(parts), wire.StreamsPerRequestMax)
		h.createPartitions(s, st, r, topic, parts[:k], copies, deadline, 0, done)
		parts = parts[k:]
	}
}

// createBackoffMax bounds the wait between two tries of a create.
const createBackoffMax = time.Second

// createRetryable says whether a create refused with code is asked again.
func createRetryable(code int16) bool {
	return code == errLeaderNotAvailable || code == errRequestTimedOut
}

// createPartitions sends one batched create of parts (at most wire.StreamsPerRequestMax) of topic.
func (h *Handler) createPartitions(s *shard.Shard, st *shardState, r *request, topic string, parts []int32, copies uint8,
	deadline time.Time, attempt int, done func(p int32, code int16, msg string)) {
	type partName struct {
		name []byte
		p    int32
	}
	named := make([]partName, len(parts))
	for i, p := range parts {
		named[i] = partName{appendStreamName(nil, topic, p), p}
	}
	slices.SortFunc(named, func(a, b partName) int { return bytes.Compare(a.name, b.name) }) // the request's order
	names := make([][]byte, len(named))
	for i := range named {
		names[i] = named[i].name
	}
	finish := func(p int32, code int16, msg string) {
		if code != errNone {
			h.log.Info("kafka: topic partition not created", "topic", topic, "partition", p, "code", code, "err", msg)
		}
		if done != nil {
			done(p, code, msg)
		}
	}
	list, err := wire.StreamNamesOf(names)
	if err != nil { // validateCreate checked the topic: a name here breaking the rule is a bug of ours
		for _, n := range named {
			finish(n.p, errInvalidTopic, err.Error())
		}
		return
	}
	rid := st.nextRequestID()
	b := wire.AppendCreateStreams(st.takeBuf(), h.from, &wire.CreateStreams{RequestID: rid, Copies: copies,
		Policy: wire.PolicyMajority, Names: list})
	h.submit(s, st, r, rid, 0, b, func(s *shard.Shard, st *shardState, rep *reply) {
		var again []int32
		var lastCode int16
		var lastMsg string
		code, msg := rep.errorCode()
		var outcomes []wire.StreamOutcome
		if code == errNone {
			var err error
			if _, outcomes, err = wire.DecodeCreateStreamsReply(&rep.h, rep.body); err == nil && len(outcomes) != len(named) {
				err = fmt.Errorf("%d outcomes for %d partitions", len(outcomes), len(named))
			}
			if err != nil {
				code, msg = errUnknownServer, err.Error()
			}
		}
		for i, n := range named {
			c, m := code, msg
			if code == errNone {
				if o := outcomes[i]; !o.OK() {
					c, m = codeOf(o.Code), string(o.Message)
				}
			}
			if createRetryable(c) {
				again, lastCode, lastMsg = append(again, n.p), c, m
				continue
			}
			finish(n.p, c, m)
		}
		if len(again) == 0 {
			return
		}
		backoff := min(100*time.Millisecond<<min(attempt, 4), createBackoffMax)
		if !time.Now().Add(backoff).Before(deadline) {
			for _, p := range again {
				finish(p, lastCode, lastMsg) // as a single create would end: its last refusal
			}
			return
		}
		h.later(s, r, backoff, func(s *shard.Shard, st *shardState) {
			h.createPartitions(s, st, r, topic, again, copies, deadline, attempt+1, done)
		})
	})
	st.giveBuf(b)
}

// later runs f on s's goroutine after d, as part of r (r waits for it).
func (h *Handler) later(s *shard.Shard, r *request, d time.Duration, f func(s *shard.Shard, st *shardState)) {
	r.waiting++
	i := s.Index()
	time.AfterFunc(d, func() {
		_ = h.cfg.Shards.Run(i, func(s *shard.Shard) { // an error: the node stops, and r with it
			st := &h.shards[i]
			r.waiting--
			if !r.finished || r.silent {
				f(s, st)
			}
			h.settle(s, st, r)
		})
	})
}
