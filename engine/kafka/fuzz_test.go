package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// FuzzDecodeRequest feeds arbitrary bytes to the Kafka frame decoding path, as a connection's
// shard hands a frame to the handler: the header and its tagged fields, kmsg's body decoding at the
// version asked, a produce's record batches, and (the same bytes as a fetch reply's stored batches)
// the batch conversion, and (as an internal group stream's record) the offset record decoding. The
// group coordinator's requests are among the seeds. None of it may panic; each input is either decoded or refused.
func FuzzDecodeRequest(f *testing.F) {
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(3)
	av.ClientSoftwareName, av.ClientSoftwareVersion = "kcat", "1.7"
	f.Add(requestFrame(av, 1))
	meta := kmsg.NewPtrMetadataRequest()
	meta.SetVersion(9)
	topic := "orders"
	meta.Topics = []kmsg.MetadataRequestTopic{{Topic: &topic}}
	f.Add(requestFrame(meta, 2))
	prod := kmsg.NewPtrProduceRequest()
	prod.SetVersion(9)
	prod.Acks = -1
	prod.Topics = []kmsg.ProduceRequestTopic{{Topic: topic, Partitions: []kmsg.ProduceRequestTopicPartition{
		{Partition: 0, Records: kafkaBatch(someRecords(3), 1, 0)}}}}
	f.Add(requestFrame(prod, 3))
	prod.SetVersion(3)
	f.Add(requestFrame(prod, 4))
	fetch := kmsg.NewPtrFetchRequest()
	fetch.SetVersion(11)
	fetch.Topics = []kmsg.FetchRequestTopic{{Topic: topic, Partitions: []kmsg.FetchRequestTopicPartition{
		{Partition: 0, FetchOffset: 5, PartitionMaxBytes: 1 << 20}}}}
	f.Add(requestFrame(fetch, 5))
	join := kmsg.NewPtrJoinGroupRequest()
	join.SetVersion(5)
	join.Group, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis, join.ProtocolType = "g", 10000, 20000, "consumer"
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 1, 0, 0, 0, 1, 0, 1, 't'}}}
	f.Add(requestFrame(join, 6))
	join.SetVersion(9)
	f.Add(requestFrame(join, 7))
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.SetVersion(5)
	sync.Group, sync.Generation, sync.MemberID = "g", 1, "m"
	sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: "m", MemberAssignment: []byte{0, 1}}}
	f.Add(requestFrame(sync, 8))
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.SetVersion(8)
	commit.Group, commit.Generation, commit.MemberID = "g", 1, "m"
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{
		{Partition: 0, Offset: 10}}}}
	f.Add(requestFrame(commit, 9))
	ofetch := kmsg.NewPtrOffsetFetchRequest()
	ofetch.SetVersion(7)
	ofetch.Group = "g"
	f.Add(requestFrame(ofetch, 10))
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.SetVersion(5)
	leave.Group, leave.Members = "g", []kmsg.LeaveGroupRequestMember{{MemberID: "m"}}
	f.Add(requestFrame(leave, 11))
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.SetVersion(4)
	fc.CoordinatorKeys = []string{"g"}
	f.Add(requestFrame(fc, 12))
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.SetVersion(4)
	hb.Group, hb.Generation, hb.MemberID = "g", 1, "m"
	f.Add(requestFrame(hb, 13))
	f.Add(appendOffsetRecord(nil, &offsetRecord{group: "g", topic: topic, partition: 1, offset: 5, leaderEpoch: -1}))
	f.Add([]byte{0, 3, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 1, 0, 5, 1})
	f.Fuzz(func(t *testing.T, frame []byte) {
		_, req, ok, bodyErr, err := decodeRequest(frame)
		if err == nil && ok && bodyErr == nil {
			if p, isProduce := req.(*kmsg.ProduceRequest); isProduce {
				for _, t := range p.Topics {
					_ = validateTopic(t.Topic)
					for _, part := range t.Partitions {
						if pb, err := parseProducedBatch(part.Records); err == nil {
							_ = appendStoredPayload(nil, &pb)
						}
					}
				}
			}
		}
		_, _ = parseProducedBatch(frame)
		_, _ = appendKafkaBatches(nil, frame)
		_, _, _ = SplitStreamName(string(frame))
		_, _ = decodeOffsetRecord(frame)
		_ = eachValue(frame, func(v []byte) { _, _ = decodeOffsetRecord(v) })
	})
}
