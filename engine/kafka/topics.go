package kafka

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

func serveCreateTopics(h *Handler, s *shard.Shard, st *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.CreateTopicsRequest)
	resp := kmsg.NewPtrCreateTopicsResponse()
	resp.SetVersion(req.Version)
	r.resp = resp
	resp.Topics = make([]kmsg.CreateTopicsResponseTopic, len(req.Topics))
	for i := range req.Topics {
		t := &req.Topics[i]
		rt := &resp.Topics[i]
		*rt = kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = t.Topic
		parts, copies, code, msg := h.validateCreate(t)
		rt.NumPartitions, rt.ReplicationFactor = parts, int16(copies)
		if code != errNone || req.ValidateOnly {
			h.setCreateError(req.Version, rt, code, msg)
			continue
		}
		wait := time.Duration(min(max(req.TimeoutMillis, 1000), 30000)) * time.Millisecond
		h.createTopic(s, st, r, t.Topic, parts, copies, wait, func(p int32, code int16, msg string) {
			if code != errNone && rt.ErrorCode == errNone {
				h.setCreateError(req.Version, rt, code, fmt.Sprintf("partition %d: %s", p, msg))
			}
		})
	}
}

func (h *Handler) setCreateError(version int16, rt *kmsg.CreateTopicsResponseTopic, code int16, msg string) {
	rt.ErrorCode = code
	h.metrics.errorCode(createTopicsKey, code)
	if version >= 1 && msg != "" {
		rt.ErrorMessage = &msg
	}
}

// validateCreate checks one topic of a CreateTopics request: its name (TopicRule), its partition
// count (1..PartitionsMax, -1 for 1), its replication factor (1..7 and at most the cluster's nodes,
// -1 for the default, the smaller of 3 and the nodes) and no manual assignment. The validation of
// a topic to create; it returns the partitions and copies to create.
func (h *Handler) validateCreate(t *kmsg.CreateTopicsRequestTopic) (int32, uint8, int16, string) {
	parts, rf := t.NumPartitions, int(t.ReplicationFactor)
	if parts == -1 {
		parts = 1
	}
	if rf == -1 {
		rf = int(h.copies)
	}
	if err := validateTopic(t.Topic); err != nil {
		return parts, 0, errInvalidTopic, err.Error()
	}
	if parts < 1 || parts > PartitionsMax {
		return parts, 0, errInvalidPartitions, fmt.Sprintf("%d partitions: a topic has 1 to %d", parts, PartitionsMax)
	}
	if rf < 1 || rf > int(wire.CopiesMax) || rf > len(h.cfg.Node.Nodes) {
		return parts, 0, errInvalidReplication, fmt.Sprintf("replication factor %d: %s, here %d nodes", rf, wire.CopiesRule,
			len(h.cfg.Node.Nodes))
	}
	if len(t.ReplicaAssignment) > 0 {
		return parts, uint8(rf), errInvalidRequest, "manual replica assignment is not supported: the cluster places copies"
	}
	return parts, uint8(rf), errNone, ""
}

func serveDeleteTopics(h *Handler, s *shard.Shard, st *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.DeleteTopicsRequest)
	resp := kmsg.NewPtrDeleteTopicsResponse()
	resp.SetVersion(req.Version)
	r.resp = resp
	resp.Topics = make([]kmsg.DeleteTopicsResponseTopic, len(req.TopicNames))
	wait := time.Duration(min(max(req.TimeoutMillis, 1000), 30000)) * time.Millisecond
	for i, name := range req.TopicNames {
		rt := &resp.Topics[i]
		*rt = kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic = &req.TopicNames[i]
		fail := func(code int16, msg string) {
			rt.ErrorCode = code
			h.metrics.errorCode(deleteTopicsKey, code)
			if req.Version >= 5 && msg != "" {
				rt.ErrorMessage = &msg
			}
		}
		if err := validateTopic(name); err != nil {
			fail(errInvalidTopic, err.Error())
			continue
		}
		h.deletePartition(s, st, r, name, 0, time.Now().Add(wait), 0, fail)
	}
}

// deletePartition deletes the streams of topic from partition p on, one after the other, until the
// node answers that the next one does not exist: a topic's partitions are 0..N-1 (createTopic), and
// asking the metadata service instead of this node's replica finds a topic created a moment ago.
// No partition 0: the topic is unknown. Passing states are tried again, as createPartition does.
func (h *Handler) deletePartition(s *shard.Shard, st *shardState, r *request, topic string, p int32,
	deadline time.Time, attempt int, fail func(code int16, msg string)) {
	rid := st.nextRequestID()
	st.name = appendStreamName(st.name[:0], topic, p)
	name := string(st.name)
	b := wire.AppendDeleteStream(st.takeBuf(), h.from, &wire.StreamNameRequest{RequestID: rid, Name: st.name})
	h.submit(s, st, r, rid, 0, b, func(s *shard.Shard, st *shardState, rep *reply) {
		code, msg := rep.errorCode()
		switch {
		case code == errNone:
			delete(st.ids, name)
			if p+1 < PartitionsMax {
				h.deletePartition(s, st, r, topic, p+1, deadline, 0, fail)
			}
		case code == errUnknownTopicOrPart:
			delete(st.ids, name)
			if p == 0 {
				fail(code, fmt.Sprintf("no topic %q", topic))
			}
		case (code == errLeaderNotAvailable || code == errRequestTimedOut) && time.Now().Before(deadline):
			h.later(s, r, min(100*time.Millisecond<<min(attempt, 4), createBackoffMax), func(s *shard.Shard, st *shardState) {
				h.deletePartition(s, st, r, topic, p, deadline, attempt+1, fail)
			})
		default:
			fail(code, fmt.Sprintf("partition %d: %s", p, msg))
		}
	})
	st.giveBuf(b)
}
