package kafkatest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestKcat_ConsumerGroup: librdkafka's balanced consumer (kcat -G) reads the 500 records of a topic
// as the only member of its group and commits on exit; a second run in the same group starts from
// the committed offsets and reads only the 200 records produced since.
func TestKcat_ConsumerGroup(t *testing.T) {
	path := requireKcat(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	lc := startGroupCluster(t, ctx)
	broker := lc.Nodes()[0].KafkaAddr
	auth := saslArgs(lc)
	produce := func(from, to int) {
		var in bytes.Buffer
		for i := from; i < to; i++ {
			fmt.Fprintf(&in, "v%d\n", i)
		}
		kcat(t, ctx, path, in.Bytes(), append(auth, "-P", "-b", broker, "-t", "kgroup")...)
	}
	consume := func(n int) []string {
		out := kcat(t, ctx, path, nil, append(auth, "-b", broker, "-G", "kcat-group", "-X", "auto.offset.reset=earliest", "-c",
			fmt.Sprint(n), "-q", "-f", "%s\n", "-X", "session.timeout.ms=6000", "kgroup")...)
		return strings.Fields(string(out))
	}
	produce(0, 500)
	got := consume(500)
	if len(got) != 500 || got[0] != "v0" || got[499] != "v499" {
		t.Fatalf("first run read %d records (%v ... ), want v0 to v499", len(got), got[:min(3, len(got))])
	}
	produce(500, 700)
	got = consume(200)
	if len(got) != 200 || got[0] != "v500" || got[199] != "v699" {
		t.Fatalf("second run read %d records (%v ...), want v500 to v699 from the committed offsets", len(got),
			got[:min(3, len(got))])
	}
}
