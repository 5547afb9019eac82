package config_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/engine/config"
)

// TestKafka: the Kafka listener is off unless kafka.listen is set; cluster.kafka lists the brokers,
// a node left out is none unless it is this node with a dialable kafka.listen; keys outside
// cluster.peers and undialable addresses are refused naming the key.
func TestKafka(t *testing.T) {
	peers := "[node]\nid = 1\n[cluster]\npeers = { 1 = \"10.0.0.1:7001\", 2 = \"10.0.0.2:7001\", 3 = \"10.0.0.3:7001\" }\n"
	cases := []struct {
		name, cluster, listen, want, err string
	}{
		{"off", "", "", "", ""},
		{"listed", `kafka = { 1 = "10.0.0.1:9092", 3 = "10.0.0.3:9092" }`, "0.0.0.0:9092", "1=10.0.0.1:9092 3=10.0.0.3:9092", ""},
		{"this node stands for itself", "", "10.0.0.1:9092", "1=10.0.0.1:9092", ""},
		{"unspecified listen is no broker", "", "0.0.0.0:9092", "", ""},
		{"unknown node", `kafka = { 4 = "10.0.0.4:9092" }`, "", "", `cluster.kafka: key "4" is not a node`},
		{"port 0", `kafka = { 2 = "10.0.0.2:0" }`, "", "", "cluster.kafka.2: 10.0.0.2:0 is not an address a client can dial"},
		{"bad listen", "", "localhost:9092", "", `kafka.listen: "localhost:9092" is not an ip:port`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := peers + tc.cluster + "\n"
			if tc.listen != "" {
				file += "[kafka]\nlisten = \"" + tc.listen + "\"\n"
			}
			c, err := config.Parse([]byte(file), t.TempDir())
			if tc.err != "" {
				if err == nil || !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.KafkaListen.IsValid() != (tc.listen != "") || c.Shard().KafkaListen != c.KafkaListen {
				t.Fatalf("kafka listen %v (shard %v) from %q", c.KafkaListen, c.Shard().KafkaListen, tc.listen)
			}
			var got []string
			for _, p := range c.KafkaAddrs {
				got = append(got, fmt.Sprintf("%d=%s", p.Node, p.Addr))
			}
			if strings.Join(got, " ") != tc.want {
				t.Fatalf("brokers %q, want %q", strings.Join(got, " "), tc.want)
			}
		})
	}
}
