package kafkatest

import (
	"context"
	"hash/fnv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupStream is the internal stream of a group, by the rule docs/kafka.md gives: the FNV-1a hash
// of the group id mod 8.
func groupStream(group string) uint32 {
	f := fnv.New32a()
	_, _ = f.Write([]byte(group))
	return f.Sum32() % 8
}

// simpleCommit commits offset for partition 0 of topic in group with generation -1 (a group
// without members), asking again while the coordinator is not available yet.
func simpleCommit(t *testing.T, ctx context.Context, cl *kgo.Client, group, topic string, offset int64) {
	t.Helper()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = group, -1
	req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{
		{Partition: 0, Offset: offset, LeaderEpoch: -1}}}}
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err == nil && resp.Topics[0].Partitions[0].ErrorCode == 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("commit %s %d: %v %v", group, offset, err, resp)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
