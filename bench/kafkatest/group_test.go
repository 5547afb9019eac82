package kafkatest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringstream/ringstream/client"
	"github.com/ringstream/ringstream/localcluster"
)

// startGroupCluster is startCluster with two shards per node, so that a group's coordinator (on the
// shard of its internal stream) and the connections asking it are on different shards as often as
// not. A node built with the race detector (GOFLAGS=-race) that reported a race fails the test.
func startGroupCluster(t *testing.T, ctx context.Context) *localcluster.Cluster {
	t.Helper()
	lc, err := localcluster.Start(ctx, localcluster.Options{Binary: ringstreamBin, Dir: t.TempDir(), Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		lc.Close()
		for _, n := range lc.Nodes() {
			log, _ := os.ReadFile(n.LogPath())
			if bytes.Contains(log, []byte("WARNING: DATA RACE")) {
				t.Errorf("node %d reported a data race:\n%s", n.ID, log)
			} else if t.Failed() {
				t.Logf("node %d log:\n%s", n.ID, n.LogTail())
			}
		}
	})
	return lc
}

// groupConsumer is a franz-go consumer group member of group on topic, committing by hand.
func groupConsumer(t *testing.T, lc *localcluster.Cluster, group, topic string) *kgo.Client {
	t.Helper()
	return franzClient(t, lc, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.SessionTimeout(6*time.Second),
		kgo.HeartbeatInterval(300*time.Millisecond), kgo.RebalanceTimeout(10*time.Second),
		kgo.FetchMaxWait(200*time.Millisecond))
}

// offsetFetch is group's committed offsets of topic's partitions 0..n-1, asked until the
// coordinator answers without an error (one just killed is replaced after the failover).
func offsetFetch(t *testing.T, ctx context.Context, cl *kgo.Client, group, topic string, n int32) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	for p := range n {
		rt.Partitions = append(rt.Partitions, p)
	}
	req.Topics = append(req.Topics, rt)
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err == nil && resp.ErrorCode == 0 {
			got := make(map[int32]int64)
			for _, p := range resp.Topics[0].Partitions {
				if p.ErrorCode != 0 {
					t.Fatalf("OffsetFetch partition %d: error %d", p.Partition, p.ErrorCode)
				}
				got[p.Partition] = p.Offset
			}
			return got
		}
		if ctx.Err() != nil {
			t.Fatalf("OffsetFetch of group %s: %v", group, err)
		}
		if err == nil {
			t.Logf("OffsetFetch of group %s: error %d; again", group, resp.ErrorCode)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// coordinator is the node FindCoordinator names for group.
func coordinator(t *testing.T, ctx context.Context, cl *kgo.Client, group string) int32 {
	t.Helper()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey = group
	req.CoordinatorKeys = []string{group}
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			if len(resp.Coordinators) > 0 && resp.Coordinators[0].ErrorCode == 0 {
				return resp.Coordinators[0].NodeID
			}
			if len(resp.Coordinators) == 0 && resp.ErrorCode == 0 {
				return resp.NodeID
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("FindCoordinator %s: %v", group, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// consumeTo polls c until every partition reached ends, recording each record's (partition,
// offset) in seen; a record read twice or below from fails the test.
func consumeTo(t *testing.T, ctx context.Context, c *kgo.Client, ends, from map[int32]int64, seen map[[2]int64]bool) {
	t.Helper()
	next := make(map[int32]int64)
	for p, o := range from {
		next[p] = o
	}
	done := func() bool {
		for p, e := range ends {
			if next[p] < e {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := c.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed to %v, want %v: %v", next, ends, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			k := [2]int64{int64(r.Partition), r.Offset}
			if seen[k] {
				t.Errorf("partition %d offset %d read twice", r.Partition, r.Offset)
			}
			if r.Offset < from[r.Partition] {
				t.Errorf("partition %d offset %d read, below the committed %d", r.Partition, r.Offset, from[r.Partition])
			}
			seen[k] = true
			next[r.Partition] = max(next[r.Partition], r.Offset+1)
		})
	}
}

// commitAll commits c's consumed offsets, again while the coordinator refuses them (a member that
// has not rejoined the coordinator that took over is refused as unknown; kgo rejoins meanwhile).
func commitAll(t *testing.T, ctx context.Context, c *kgo.Client) {
	t.Helper()
	for {
		err := c.CommitUncommittedOffsets(ctx)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("commit: %v", err)
		}
		t.Logf("commit: %v; again", err)
		time.Sleep(200 * time.Millisecond)
	}
}

// checkListed checks that ListGroups (kgo asks every broker) lists group in state, and that
// DescribeGroups (asked of its coordinator) gives that state and members members with assignments.
func checkListed(t *testing.T, ctx context.Context, cl *kgo.Client, group, state string, members int) {
	t.Helper()
	lreq := kmsg.NewPtrListGroupsRequest()
	lresp, err := lreq.RequestWith(ctx, cl)
	if err != nil || lresp.ErrorCode != 0 {
		t.Fatalf("ListGroups: %v %v", err, lresp)
	}
	listed := false
	for _, g := range lresp.Groups {
		listed = listed || (g.Group == group && g.GroupState == state && g.ProtocolType == "consumer")
	}
	if !listed {
		t.Errorf("ListGroups: %+v, want %s in state %s", lresp.Groups, group, state)
	}
	dreq := kmsg.NewPtrDescribeGroupsRequest()
	dreq.Groups = []string{group}
	dresp, err := dreq.RequestWith(ctx, cl)
	if err != nil || len(dresp.Groups) != 1 {
		t.Fatalf("DescribeGroups: %v %v", err, dresp)
	}
	d := dresp.Groups[0]
	if d.ErrorCode != 0 || d.State != state || len(d.Members) != members || d.Protocol == "" {
		t.Fatalf("DescribeGroups: error %d, state %q, %d members, protocol %q; want %s with %d", d.ErrorCode, d.State,
			len(d.Members), d.Protocol, state, members)
	}
	for _, m := range d.Members {
		if len(m.MemberAssignment) == 0 || m.ClientID == "" {
			t.Errorf("DescribeGroups: member %s: client %q, assignment of %d bytes", m.MemberID, m.ClientID,
				len(m.MemberAssignment))
		}
	}
}

// TestFranzGo_GroupCoordinatorKilled: a franz-go consumer group member reads a 4-partition topic
// and commits its offsets (confirmed in the group's internal stream). The group coordinator's node
// is SIGKILLed: FindCoordinator then names the internal stream's new owner, whose OffsetFetch gives
// the offsets committed before the kill. The member goes on: it reaches the new coordinator, reads
// the records produced meanwhile and commits them there (its group record made it a member there,
// or it rejoins). It leaves, and a new member of the group reads the next records from the
// committed offsets: nothing below them, nothing twice. ListGroups and DescribeGroups show the
// stable group with its member, and a node other than the coordinator answers NOT_COORDINATOR.
func TestFranzGo_GroupCoordinatorKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	lc := startGroupCluster(t, ctx)
	const topic, group, n = "fgroup", "franz-group", 1000
	prod := franzClient(t, lc, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.NoCompression()))
	createTopic(t, ctx, prod, topic, 4)
	partitions(t, ctx, prod, topic, 4)
	produce := func(from int) map[int32]int64 {
		var rs []*kgo.Record
		for i := from; i < from+n; i++ {
			rs = append(rs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)})
		}
		if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return listLatest(t, ctx, prod, topic, 4)
	}
	ends := produce(0)
	seen := make(map[[2]int64]bool)
	c1 := groupConsumer(t, lc, group, topic)
	consumeTo(t, ctx, c1, ends, map[int32]int64{}, seen)
	commitAll(t, ctx, c1)
	checkListed(t, ctx, prod, group, "Stable", 1)

	old := coordinator(t, ctx, prod, group)
	// The other nodes are no coordinator of the group: the client is sent to look it up again.
	for _, nd := range lc.Nodes() {
		if int32(nd.ID) == old {
			continue
		}
		hb := kmsg.NewPtrHeartbeatRequest()
		hb.SetVersion(3)
		hb.Group, hb.Generation, hb.MemberID = group, 1, "m"
		resp := kmsg.NewPtrHeartbeatResponse()
		resp.SetVersion(3)
		rawExchange(t, nd.KafkaAddr, password(lc), hb, resp)
		if resp.ErrorCode != 16 {
			t.Errorf("Heartbeat to node %d, not the coordinator (node %d): error %d, want NOT_COORDINATOR (16)", nd.ID, old,
				resp.ErrorCode)
		}
	}
	if err := lc.Kill(uint16(old)); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	t.Logf("coordinator node %d killed", old)
	// A new client: prod's connections to the killed node are retried until its own timeouts.
	admin := franzClient(t, lc)
	var now int32
	for now = old; now == old; now = coordinator(t, ctx, admin, group) {
		time.Sleep(50 * time.Millisecond)
	}
	committed := offsetFetch(t, ctx, admin, group, topic, 4)
	t.Logf("new coordinator node %d served the offsets %v after the kill", now, time.Since(killed).Round(time.Millisecond))
	for p, e := range ends {
		if committed[p] != e {
			t.Fatalf("partition %d: committed %d before the kill, %d on the new coordinator (node %d)", p, e, committed[p], now)
		}
	}
	before := ends
	ends = produce(n)
	consumeTo(t, ctx, c1, ends, before, seen)
	commitAll(t, ctx, c1)
	t.Logf("the member read on and committed %v after the kill", time.Since(killed).Round(time.Millisecond))
	committed = offsetFetch(t, ctx, admin, group, topic, 4)
	for p, e := range ends {
		if committed[p] != e {
			t.Fatalf("partition %d: committed %d on the new coordinator (node %d), want %d", p, committed[p], now, e)
		}
	}
	c1.Close() // leaves the group

	ends = produce(2 * n)
	c2 := groupConsumer(t, lc, group, topic)
	consumeTo(t, ctx, c2, ends, committed, seen)
	commitAll(t, ctx, c2)
	final := offsetFetch(t, ctx, admin, group, topic, 4)
	for p, e := range ends {
		if final[p] != e {
			t.Errorf("partition %d: committed %d at the end, want %d", p, final[p], e)
		}
	}
	if len(seen) != 3*n {
		t.Errorf("%d records read, want %d", len(seen), 3*n)
	}
}

// TestFranzGo_GroupStreamDeleted: an operator deletes a group's internal stream (ringstream stream
// delete). The next FindCoordinator creates it again (the same stream id, the next incarnation).
// Within a few seconds the old coordinator's check finds its stream written elsewhere (its confirmed
// tail is not the one it knew) and drops what it held; then the coordinator serves the group from
// the new stream (the old offset gone with the old stream; an OffsetCommit and OffsetFetch work)
// and the other nodes answer NOT_COORDINATOR.
func TestFranzGo_GroupStreamDeleted(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	lc := startGroupCluster(t, ctx)
	cl := franzClient(t, lc)
	const group, topic = "deleted-group", "dt"
	// Eight connections to each node: with two shards, both shards of each node answer.
	heartbeatAll := func(coord int32) {
		for i := 0; i < 8*len(lc.Nodes()); i++ {
			nd := lc.Nodes()[i%len(lc.Nodes())]
			hb := kmsg.NewPtrHeartbeatRequest()
			hb.SetVersion(3)
			hb.Group, hb.Generation, hb.MemberID = group, 1, "m"
			resp := kmsg.NewPtrHeartbeatResponse()
			resp.SetVersion(3)
			rawExchange(t, nd.KafkaAddr, password(lc), hb, resp)
			want := int16(16) // NOT_COORDINATOR
			if int32(nd.ID) == coord {
				want = 25 // UNKNOWN_MEMBER_ID: the coordinator, with no such member
			}
			if resp.ErrorCode != want {
				t.Errorf("Heartbeat to node %d (coordinator %d): error %d, want %d", nd.ID, coord, resp.ErrorCode, want)
			}
		}
	}
	simpleCommit(t, ctx, cl, group, topic, 7)
	heartbeatAll(coordinator(t, ctx, cl, group))

	c, err := client.Dial(ctx, client.Config{Addrs: lc.ClientAddrs(), Cluster: 1, Secret: []byte(lc.Secret())})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := fmt.Sprintf("__kafka_groups-%d", groupStream(group))
	if err := c.DeleteStream(ctx, name); err != nil {
		t.Fatalf("delete %s: %v", name, err)
	}
	admin := franzClient(t, lc) // no coordinator cached
	coord := coordinator(t, ctx, admin, group)
	// A coordinator learns its stream is gone at its next ownership check (every second); until
	// then it may answer from what it held.
	deleted := time.Now()
	for got := int64(7); got != -1; got = offsetFetch(t, ctx, admin, group, topic, 1)[0] {
		if time.Since(deleted) > 5*time.Second {
			t.Fatalf("offset 5 s after the stream was deleted and made again: %d, want none (-1)", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the deleted stream's offsets were gone %v after the delete", time.Since(deleted).Round(time.Millisecond))
	coord = coordinator(t, ctx, admin, group)
	simpleCommit(t, ctx, admin, group, topic, 9)
	if got := offsetFetch(t, ctx, admin, group, topic, 1)[0]; got != 9 {
		t.Fatalf("offset committed on the new stream: %d, want 9", got)
	}
	heartbeatAll(coord)
}
