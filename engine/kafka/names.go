package kafka

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ringstream/ringstream/wire"
)

// Topics and partitions map onto streams by name: partition p of topic t is the stream "t.p" (p in
// decimal, no leading zeros). A topic of N partitions is the N streams t.0 .. t.(N-1).

// TopicNameMax bounds a topic name: Kafka's 249, which leaves room in a stream name (255) for the
// separator and a partition number.
const TopicNameMax = 249

// PartitionsMax bounds the partitions of one topic this listener creates.
const PartitionsMax = 1024

// TopicRule is the rule for a topic name, as refusals state it.
const TopicRule = "a topic name is 1 to 249 bytes of ASCII letters, digits, '.', '_' and '-', and not \".\" or \"..\""

// validateTopic checks a topic name against TopicRule (and so that its streams' names pass
// wire.ValidateStreamName).
func validateTopic(topic string) error {
	if len(topic) > TopicNameMax {
		return fmt.Errorf("topic name of %d bytes: %s", len(topic), TopicRule)
	}
	if err := wire.ValidateStreamName(topic); err != nil {
		return fmt.Errorf("topic name %q: %s", topic, TopicRule)
	}
	return nil
}

// StreamName is the stream of partition p of topic: "topic.p". topic must pass validateTopic.
func StreamName(topic string, p int32) string {
	return topic + "." + strconv.FormatInt(int64(p), 10)
}

// appendStreamName appends the stream name of partition p of topic to dst (no allocation when dst has room).
func appendStreamName(dst []byte, topic string, p int32) []byte {
	dst = append(dst, topic...)
	dst = append(dst, '.')
	return strconv.AppendInt(dst, int64(p), 10)
}

// SplitStreamName is the inverse of StreamName: the topic and partition a stream stands for, or
// false when its name is not "topic.p" with a valid topic and p in 0..PartitionsMax-1.
func SplitStreamName(name string) (string, int32, bool) {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 || i == len(name)-1 {
		return "", 0, false
	}
	digits := name[i+1:]
	if len(digits) > 1 && digits[0] == '0' {
		return "", 0, false
	}
	p, err := strconv.ParseUint(digits, 10, 32)
	if err != nil || p >= PartitionsMax {
		return "", 0, false
	}
	topic := name[:i]
	if validateTopic(topic) != nil {
		return "", 0, false
	}
	return topic, int32(p), true
}
