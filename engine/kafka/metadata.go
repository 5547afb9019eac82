package kafka

import (
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
// policy); done, when set, gets each partition's Kafka error. A create refused for a passing state
// (no metadata primary yet, too few registered nodes reachable, a full queue) is tried again after
// a backoff until wait has passed, as Kafka's CreateTopics waits out its timeout.
func (h *Handler) createTopic(s *shard.Shard, st *shardState, r *request, topic string, n int32, copies uint8,
	wait time.Duration, done func(p int32, code int16, msg string)) {
	deadline := time.Now().Add(wait)
	for p := range n {
		h.createPartition(s, st, r, topic, p, copies, deadline, 0, done)
	}
}

// createBackoffMax bounds the wait between two tries of a create.
const createBackoffMax = time.Second

func (h *Handler) createPartition(s *shard.Shard, st *shardState, r *request, topic string, p int32, copies uint8,
	deadline time.Time, attempt int, done func(p int32, code int16, msg string)) {
	rid := st.nextRequestID()
	st.name = appendStreamName(st.name[:0], topic, p)
	b := wire.AppendCreateStream(st.takeBuf(), h.from, &wire.CreateStream{RequestID: rid, Name: st.name,
		Copies: copies, Policy: wire.PolicyMajority})
	h.submit(s, st, r, rid, 0, b, func(s *shard.Shard, st *shardState, rep *reply) {
		code, msg := rep.errorCode()
		backoff := min(100*time.Millisecond<<min(attempt, 4), createBackoffMax)
		if (code == errLeaderNotAvailable || code == errRequestTimedOut) && time.Now().Add(backoff).Before(deadline) {
			h.later(s, r, backoff, func(s *shard.Shard, st *shardState) {
				h.createPartition(s, st, r, topic, p, copies, deadline, attempt+1, done)
			})
			return
		}
		if code != errNone {
			h.log.Info("kafka: topic partition not created", "topic", topic, "partition", p, "code", code, "err", msg)
		}
		if done != nil {
			done(p, code, msg)
		}
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
