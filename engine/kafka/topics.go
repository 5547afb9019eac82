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
