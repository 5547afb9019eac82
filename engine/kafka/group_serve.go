package kafka

import (
	"bytes"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// Api keys of the group coordinator.
const (
	offsetCommitKey    int16 = 8
	offsetFetchKey     int16 = 9
	findCoordinatorKey int16 = 10
	joinGroupKey       int16 = 11
	heartbeatKey       int16 = 12
	leaveGroupKey      int16 = 13
	syncGroupKey       int16 = 14
)

// groupAPIs are the group coordinator's APIs and versions (apis lists them). Lower bounds: OffsetFetch
// 0 reads offsets Kafka kept in ZooKeeper. Upper bounds: kmsg's newest that need nothing more than the
// classic protocol (FindCoordinator 5 and 6 add transaction and share-group errors, OffsetFetch 8
// batches groups, OffsetCommit 9 is the new consumer protocol's, DescribeGroups 6 adds error
// messages, ListGroups 5 group types); KafkaJS 2 asks at most
// FindCoordinator 2, JoinGroup 5, SyncGroup 3, Heartbeat 3, LeaveGroup 3, OffsetCommit 5, OffsetFetch 4.
var groupAPIs = [...]api{
	{offsetCommitKey, 0, 8},
	{offsetFetchKey, 1, 7},
	{findCoordinatorKey, 0, 4},
	{joinGroupKey, 0, 9},
	{heartbeatKey, 0, 4},
	{leaveGroupKey, 0, 5},
	{syncGroupKey, 0, 5},
	{describeGroupsKey, 0, 5},
	{listGroupsKey, 0, 4},
}

// serveGroup serves a request of the group coordinator; false: key is none of its APIs.
func (h *Handler) serveGroup(s *shard.Shard, st *shardState, r *request, req kmsg.Request) bool {
	switch r.hdr.Key {
	case findCoordinatorKey:
		serveFindCoordinator(h, s, st, r, req)
	case joinGroupKey:
		serveJoinGroup(h, s, st, r, req)
	case syncGroupKey:
		serveSyncGroup(h, s, st, r, req)
	case heartbeatKey:
		serveHeartbeat(h, s, st, r, req)
	case leaveGroupKey:
		serveLeaveGroup(h, s, st, r, req)
	case offsetCommitKey:
		serveOffsetCommit(h, s, st, r, req)
	case offsetFetchKey:
		serveOffsetFetch(h, s, st, r, req)
	case describeGroupsKey:
		serveDescribeGroups(h, s, st, r, req)
	case listGroupsKey:
		serveListGroups(h, s, st, r, req)
	default:
		return false
	}
	return true
}

// validateGroupID checks a group id: 1 to groupIDMax bytes. The validation of a group id; it
// returns INVALID_GROUP_ID.
func validateGroupID(id string) int16 {
	if id == "" || len(id) > groupIDMax {
		return errInvalidGroupID
	}
	return errNone
}

// atCoordinator runs f on the home shard of groupID's coordinator once it is loaded (code errNone),
// or with the error a group client acts on (NOT_COORDINATOR when this node does not own the group's
// stream). f writes its answer into r.resp and calls back exactly once, at once or later; r is
// settled on its own shard after that. With code other than errNone, f may run on r's shard with
// hs and c nil.
func (h *Handler) atCoordinator(s *shard.Shard, st *shardState, r *request, groupID string,
	f func(hs *shard.Shard, hst *shardState, c *coordinator, code int16, back func())) {
	name := groupStreamName(groupID)
	nop := func() {}
	h.resolve(s, st, r, []byte(name), func(s *shard.Shard, st *shardState, id uint64, code int16, _ string) {
		if code != errNone {
			f(nil, nil, nil, groupCodeOf(code), nop)
			return
		}
		home, connShard := shard.ShardOf(id, len(h.shards)), s.Index()
		r.waiting++
		back := func() {
			_ = h.cfg.Shards.Run(connShard, func(s *shard.Shard) { // an error: the node stops, and r with it
				st := &h.shards[connShard]
				r.waiting--
				h.settle(s, st, r)
			})
		}
		err := h.cfg.Shards.Run(home, func(hs *shard.Shard) {
			hst := &h.shards[home]
			c := h.coordinatorFor(hs, hst, id, name)
			c.whenLoaded(func(code int16) {
				if code != errNone {
					f(hs, hst, nil, code, back)
					return
				}
				f(hs, hst, c, errNone, back)
			})
		})
		if err != nil {
			r.waiting--
			f(nil, nil, nil, errCoordinatorNotAvailable, nop)
		}
	})
}

func (h *Handler) groupError(key, code int16) {
	if code != errNone {
		h.metrics.errorCode(key, code)
	}
}

func serveJoinGroup(h *Handler, s *shard.Shard, st *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.JoinGroupRequest)
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.SetVersion(req.Version)
	r.resp = resp
	resp.Generation, resp.MemberID = -1, req.MemberID
	if code := validateGroupID(req.Group); code != errNone {
		resp.ErrorCode = code
		h.groupError(joinGroupKey, code)
		return
	}
	a := joinArgs{memberID: req.MemberID, clientID: string(r.hdr.ClientID), protocolType: req.ProtocolType,
		session: time.Duration(req.SessionTimeoutMillis) * time.Millisecond, requireID: req.Version >= 4}
	a.rebalance = a.session // version 0 has none: Kafka takes the session timeout
	if req.Version >= 1 {
		a.rebalance = time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond
	}
	for _, p := range req.Protocols {
		a.protocols = append(a.protocols, groupProtocol{name: p.Name, metadata: bytes.Clone(p.Metadata)})
	}
	h.atCoordinator(s, st, r, req.Group, func(_ *shard.Shard, _ *shardState, c *coordinator, code int16, back func()) {
		if code != errNone {
			resp.ErrorCode = code
			h.groupError(joinGroupKey, code)
			back()
			return
		}
		c.group(req.Group, true).join(time.Now(), a, func(res joinResult) {
			resp.ErrorCode, resp.Generation, resp.LeaderID, resp.MemberID = res.code, res.generation, res.leader, res.memberID
			if res.code == errNone {
				resp.Protocol = &res.protocol
				if req.Version >= 7 {
					resp.ProtocolType = &res.protocolType
				}
			}
			for _, m := range res.members {
				km := kmsg.NewJoinGroupResponseMember()
				km.MemberID, km.ProtocolMetadata = m.id, m.metadata
				resp.Members = append(resp.Members, km)
			}
			h.groupError(joinGroupKey, res.code)
			back()
		})
	})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func serveSyncGroup(h *Handler, s *shard.Shard, st *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.SyncGroupRequest)
	resp := kmsg.NewPtrSyncGroupResponse()
	resp.SetVersion(req.Version)
	r.resp = resp
	if code := validateGroupID(req.Group); code != errNone {
		resp.ErrorCode = code
		h.groupError(syncGroupKey, code)
		return
	}
	assignments := make(map[string][]byte, len(req.GroupAssignment))
	for _, ga := range req.GroupAssignment {
		if len(ga.MemberAssignment) > memberMetadataMax {
			resp.ErrorCode = errInvalidRequest
			h.groupError(syncGroupKey, errInvalidRequest)
			return
		}
		assignments[ga.MemberID] = bytes.Clone(ga.MemberAssignment)
	}
	h.atCoordinator(s, st, r, req.Group, func(_ *shard.Shard, _ *shardState, c *coordinator, code int16, back func()) {
		if code != errNone {
			resp.ErrorCode = code
			h.groupError(syncGroupKey, code)
			back()
			return
		}
		g := c.group(req.Group, false)
		if g == nil {
			resp.ErrorCode = errUnknownMemberID
			h.groupError(syncGroupKey, errUnknownMemberID)
			back()
			return
		}
		g.sync(time.Now(), req.MemberID, req.Generation, req.ProtocolType, req.Protocol, assignments, func(res syncResult) {
			resp.ErrorCode, resp.MemberAssignment = res.code, res.assignment
			if res.code == errNone && req.Version >= 5 {
				resp.ProtocolType, resp.Protocol = &res.protocolType, &res.protocol
			}
			h.groupError(syncGroupKey, res.code)
			back()
		})
	})
}

func serveHeartbeat(h *Handler, s *shard.Shard, st *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.HeartbeatRequest)
	resp := kmsg.NewPtrHeartbeatResponse()
	resp.SetVersion(req.Version)
	r.resp = resp
	if resp.ErrorCode = validateGroupID(req.Group); resp.ErrorCode != errNone {
		h.groupError(heartbeatKey, resp.ErrorCode)
		return
	}
	h.atCoordinator(s, st, r, req.Group, func(_ *shard.Shard, _ *shardState, c *coordinator, code int16, back func()) {
		if code == errNone {
			code = errUnknownMemberID
			if g := c.group(req.Group, false); g != nil {
				code = g.heartbeat(time.Now(), req.MemberID, req.Generation)
			}
		}
		resp.ErrorCode = code
		h.groupError(heartbeatKey, code)
		back()
	})
}

func serveLeaveGroup(h *Handler, s *shard.Shard, st *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.LeaveGroupRequest)
	resp := kmsg.NewPtrLeaveGroupResponse()
	resp.SetVersion(req.Version)
	r.resp = resp
	if resp.ErrorCode = validateGroupID(req.Group); resp.ErrorCode != errNone {
		h.groupError(leaveGroupKey, resp.ErrorCode)
		return
	}
	ids := []string{req.MemberID}
	if req.Version >= 3 {
		ids = ids[:0]
		for _, m := range req.Members {
			ids = append(ids, m.MemberID)
			km := kmsg.NewLeaveGroupResponseMember()
			km.MemberID, km.InstanceID = m.MemberID, m.InstanceID
			resp.Members = append(resp.Members, km)
		}
	}
	h.atCoordinator(s, st, r, req.Group, func(_ *shard.Shard, _ *shardState, c *coordinator, code int16, back func()) {
		if code != errNone {
			resp.ErrorCode = code
			h.groupError(leaveGroupKey, code)
			back()
			return
		}
		g := c.group(req.Group, false)
		now := time.Now()
		for i, id := range ids {
			code := errUnknownMemberID
			if g != nil {
				code = g.leave(now, id)
			}
			h.groupError(leaveGroupKey, code)
			if req.Version >= 3 {
				resp.Members[i].ErrorCode = code
			} else {
				resp.ErrorCode = code
			}
		}
		back()
	})
}

// validateCommitPartition checks one partition of an OffsetCommit: a valid topic name and
// partition (TopicRule, 0..PartitionsMax-1; the topic need not exist) and metadata of at most
// offsetMetadataMax bytes. The validation of a committed offset; it returns the Kafka error.
func validateCommitPartition(topic string, partition int32, metadata string) int16 {
	switch {
	case validateTopic(topic) != nil || partition < 0 || partition >= PartitionsMax:
		return errUnknownTopicOrPart
	case len(metadata) > offsetMetadataMax:
		return errOffsetMetadataTooLarge
	}
	return errNone
}

func serveOffsetCommit(h *Handler, s *shard.Shard, st *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.OffsetCommitRequest)
	resp := kmsg.NewPtrOffsetCommitResponse()
	resp.SetVersion(req.Version)
	r.resp = resp
	gen := req.Generation
	if req.Version == 0 {
		gen = -1
	}
	now := time.Now().UnixMilli()
	var entries []commitEntry
	setAll := func(code int16) {
		for ti := range resp.Topics {
			for pi := range resp.Topics[ti].Partitions {
				if resp.Topics[ti].Partitions[pi].ErrorCode == errNone {
					resp.Topics[ti].Partitions[pi].ErrorCode = code
				}
			}
		}
		h.groupError(offsetCommitKey, code)
	}
	resp.Topics = make([]kmsg.OffsetCommitResponseTopic, len(req.Topics))
	for ti := range req.Topics {
		t := &req.Topics[ti]
		rt := &resp.Topics[ti]
		*rt = kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		rt.Partitions = make([]kmsg.OffsetCommitResponseTopicPartition, len(t.Partitions))
		for pi := range t.Partitions {
			p := &t.Partitions[pi]
			rp := &rt.Partitions[pi]
			*rp = kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			md := deref(p.Metadata)
			if rp.ErrorCode = validateCommitPartition(t.Topic, p.Partition, md); rp.ErrorCode == errNone {
				epoch := int32(-1)
				if req.Version >= 6 {
					epoch = p.LeaderEpoch
				}
				entries = append(entries, commitEntry{rec: offsetRecord{group: req.Group, topic: t.Topic,
					partition: p.Partition, offset: p.Offset, leaderEpoch: epoch, metadata: md, commitMs: now},
					code: &rp.ErrorCode})
				continue
			}
			h.groupError(offsetCommitKey, rp.ErrorCode)
		}
	}
	if code := validateGroupID(req.Group); code != errNone {
		setAll(code)
		return
	}
	if len(entries) == 0 {
		return
	}
	h.atCoordinator(s, st, r, req.Group, func(_ *shard.Shard, _ *shardState, c *coordinator, code int16, back func()) {
		if code == errNone {
			if g := c.group(req.Group, false); g != nil {
				code = g.checkCommit(time.Now(), req.MemberID, gen)
			} else if gen >= 0 {
				code = errUnknownMemberID // no such group here (it may have lived on the previous coordinator): rejoin
			}
		}
		if code != errNone {
			setAll(code)
			back()
			return
		}
		c.commit(entries, back)
	})
}

func serveOffsetFetch(h *Handler, s *shard.Shard, st *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.OffsetFetchRequest)
	resp := kmsg.NewPtrOffsetFetchResponse()
	resp.SetVersion(req.Version)
	r.resp = resp
	fail := func(code int16) {
		resp.ErrorCode = code // versions 2+
		for ti := range resp.Topics {
			for pi := range resp.Topics[ti].Partitions {
				resp.Topics[ti].Partitions[pi].ErrorCode = code // versions below 2 have it here only
			}
		}
		h.groupError(offsetFetchKey, code)
	}
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if code := validateGroupID(req.Group); code != errNone {
		fail(code)
		return
	}
	h.atCoordinator(s, st, r, req.Group, func(_ *shard.Shard, _ *shardState, c *coordinator, code int16, back func()) {
		if code != errNone {
			fail(code)
			back()
			return
		}
		offs := c.offsets[req.Group]
		if req.Topics == nil { // every committed offset of the group (version 2+)
			resp.Topics = appendAllOffsets(resp.Topics, offs)
		}
		for ti := range resp.Topics {
			rt := &resp.Topics[ti]
			for pi := range rt.Partitions {
				rp := &rt.Partitions[pi]
				if o, ok := offs[partKey{rt.Topic, rp.Partition}]; ok {
					md := o.metadata
					rp.Offset, rp.LeaderEpoch, rp.Metadata = o.offset, o.leaderEpoch, &md
				}
			}
		}
		back()
	})
}

// appendAllOffsets appends every partition of offs, by topic.
func appendAllOffsets(dst []kmsg.OffsetFetchResponseTopic, offs map[partKey]committed) []kmsg.OffsetFetchResponseTopic {
	byTopic := make(map[string]int)
	for k := range offs {
		i, ok := byTopic[k.topic]
		if !ok {
			i = len(dst)
			byTopic[k.topic] = i
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = k.topic
			dst = append(dst, rt)
		}
		rp := kmsg.NewOffsetFetchResponseTopicPartition()
		rp.Partition = k.partition
		dst[i].Partitions = append(dst[i].Partitions, rp)
	}
	return dst
}

func serveFindCoordinator(h *Handler, s *shard.Shard, st *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.FindCoordinatorRequest)
	resp := kmsg.NewPtrFindCoordinatorResponse()
	resp.SetVersion(req.Version)
	r.resp = resp
	keys := req.CoordinatorKeys
	if req.Version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	resp.Coordinators = make([]kmsg.FindCoordinatorResponseCoordinator, len(keys))
	names := make([]string, len(keys))
	for i, k := range keys {
		c := &resp.Coordinators[i]
		*c = kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.NodeID, c.Port = k, -1, -1
		switch {
		case req.CoordinatorType != 0:
			c.ErrorCode = errInvalidRequest
			msg := "transaction coordinators are not served (no transactions)"
			c.ErrorMessage = &msg
		case validateGroupID(k) != errNone:
			c.ErrorCode = errInvalidGroupID
		default:
			names[i] = groupStreamName(k)
		}
	}
	finish := func(s *shard.Shard, st *shardState, owners []uint16, found []bool) {
		for i := range resp.Coordinators {
			c := &resp.Coordinators[i]
			switch {
			case names[i] == "":
			case !found[i]:
				c.ErrorCode = errCoordinatorNotAvailable
				h.createGroupStream(s, st, r.conn, names[i])
			case owners[i] == 0 || !h.isBroker(owners[i]):
				c.ErrorCode = errCoordinatorNotAvailable
			default:
				for _, b := range h.brokers {
					if b.Node == owners[i] {
						c.NodeID, c.Host, c.Port = int32(b.Node), b.Addr.Addr().String(), int32(b.Addr.Port())
					}
				}
			}
			h.groupError(findCoordinatorKey, c.ErrorCode)
		}
		if req.Version < 4 {
			c := resp.Coordinators[0]
			resp.Coordinators = nil
			resp.ErrorCode, resp.NodeID, resp.Host, resp.Port = c.ErrorCode, c.NodeID, c.Host, c.Port
			if req.Version >= 1 {
				resp.ErrorMessage = c.ErrorMessage
			}
		}
	}
	// Each stream's owner from the metadata service (served on the metadata primary, forwarded from
	// any other node), so every node answers, not only those holding a metadata replica.
	owners, found := make([]uint16, len(keys)), make([]bool, len(keys))
	for i, name := range names {
		if name == "" {
			continue
		}
		rid := st.nextRequestID()
		b := wire.AppendLookupStream(st.takeBuf(), h.from, &wire.LookupStream{RequestID: rid, Name: []byte(name)})
		h.submit(s, st, r, rid, 0, b, func(s *shard.Shard, st *shardState, rep *reply) {
			code, _ := rep.errorCode()
			if code == errUnknownTopicOrPart {
				return // found[i] false: created
			}
			found[i] = true
			if code != errNone {
				return // owners[i] 0: COORDINATOR_NOT_AVAILABLE, asked again
			}
			if lr, err := wire.DecodeLookupStreamReply(&rep.h, rep.body); err == nil {
				owners[i] = lr.Owner
				st.ids[name] = lr.Stream
			}
		})
		st.giveBuf(b)
	}
	r.onDone = func(s *shard.Shard, st *shardState, _ *request) { finish(s, st, owners, found) }
}

// createGroupStream creates an internal group stream, detached from the FindCoordinator that found
// it missing (answered COORDINATOR_NOT_AVAILABLE: the client asks again). One create per stream at
// a time per shard.
func (h *Handler) createGroupStream(s *shard.Shard, st *shardState, connID uint64, name string) {
	if st.creating[name] {
		return
	}
	st.creating[name] = true
	bg := &request{conn: connID, silent: true}
	rid := st.nextRequestID()
	b := wire.AppendCreateStream(st.takeBuf(), h.from, &wire.CreateStream{RequestID: rid, Name: []byte(name),
		Copies: h.copies, Policy: wire.PolicyMajority})
	h.submit(s, st, bg, rid, 0, b, func(s *shard.Shard, st *shardState, rep *reply) {
		delete(st.creating, name)
		switch code, msg := rep.errorCode(); code {
		case errNone:
			h.log.Info("kafka: internal group stream created", "stream", name)
		case errTopicExists:
		default:
			h.log.Info("kafka: internal group stream not created", "stream", name, "code", code, "err", msg)
		}
	})
	st.giveBuf(b)
}
