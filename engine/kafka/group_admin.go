package kafka

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringstream/ringstream/shard"
)

// ListGroups and DescribeGroups: what the group coordinators of this node hold, for tools
// (kafka-consumer-groups.sh --list and --describe, kadm).

const (
	describeGroupsKey int16 = 15
	listGroupsKey     int16 = 16
)

// describeGroup fills d from g (nil: a group this coordinator does not hold, "Dead" as Kafka answers
// it, or "Empty" when it has committed offsets here).
func describeGroup(d *kmsg.DescribeGroupsResponseGroup, g *group, hasOffsets bool) {
	switch {
	case g == nil && hasOffsets:
		d.State = phaseEmpty.String()
		return
	case g == nil:
		d.State = "Dead"
		return
	}
	d.State, d.ProtocolType, d.Protocol = g.phase.String(), g.protocolType, g.protocol
	for _, m := range g.sortedMembers() {
		km := kmsg.NewDescribeGroupsResponseGroupMember()
		km.MemberID, km.ClientID, km.ClientHost = m.id, m.clientID, m.clientHost
		km.ProtocolMetadata, km.MemberAssignment = metadataOf(m.protocols, g.protocol), m.assignment
		d.Members = append(d.Members, km)
	}
}

func serveDescribeGroups(h *Handler, s *shard.Shard, st *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.DescribeGroupsRequest)
	resp := kmsg.NewPtrDescribeGroupsResponse()
	resp.SetVersion(req.Version)
	r.resp = resp
	resp.Groups = make([]kmsg.DescribeGroupsResponseGroup, len(req.Groups))
	for i, id := range req.Groups {
		d := &resp.Groups[i]
		*d = kmsg.NewDescribeGroupsResponseGroup()
		d.Group, d.AuthorizedOperations = id, -2147483648 // operations not asked for, or not known
		if d.ErrorCode = validateGroupID(id); d.ErrorCode != errNone {
			h.groupError(describeGroupsKey, d.ErrorCode)
			continue
		}
		h.atCoordinator(s, st, r, id, func(_ *shard.Shard, _ *shardState, c *coordinator, code int16, back func()) {
			d.ErrorCode = code
			h.groupError(describeGroupsKey, code)
			if code == errNone {
				_, has := c.offsets[id]
				describeGroup(d, c.group(id, false), has)
			}
			back()
		})
	}
}

func serveListGroups(h *Handler, s *shard.Shard, st *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.ListGroupsRequest)
	resp := kmsg.NewPtrListGroupsResponse()
	resp.SetVersion(req.Version)
	r.resp = resp
	want := func(state string) bool { return len(req.StatesFilter) == 0 || slices.Contains(req.StatesFilter, state) }
	connShard := s.Index()
	// Each shard holding coordinators adds its groups in turn, then hands the request back.
	var visit func(i int)
	visit = func(i int) {
		for i < len(h.groupShards) && !h.groupShards[i].Load() {
			i++
		}
		if i == len(h.groupShards) {
			_ = h.cfg.Shards.Run(connShard, func(s *shard.Shard) { // an error: the node stops, and r with it
				r.waiting--
				h.settle(s, &h.shards[connShard], r)
			})
			return
		}
		if err := h.cfg.Shards.Run(i, func(s *shard.Shard) {
			for _, c := range h.shards[i].coords {
				if c.state != coordLoaded {
					continue
				}
				for id, g := range c.groups {
					if want(g.phase.String()) {
						resp.Groups = append(resp.Groups, kmsg.ListGroupsResponseGroup{Group: id, ProtocolType: g.protocolType,
							GroupState: g.phase.String()})
					}
				}
				for id := range c.offsets {
					if c.groups[id] == nil && want(phaseEmpty.String()) {
						resp.Groups = append(resp.Groups, kmsg.ListGroupsResponseGroup{Group: id, ProtocolType: "consumer",
							GroupState: phaseEmpty.String()})
					}
				}
			}
			visit(i + 1)
		}); err != nil {
			resp.ErrorCode = errCoordinatorNotAvailable
			_ = h.cfg.Shards.Run(connShard, func(s *shard.Shard) {
				r.waiting--
				h.settle(s, &h.shards[connShard], r)
			})
		}
	}
	r.waiting++
	visit(0)
}
