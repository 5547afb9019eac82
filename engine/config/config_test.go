package config_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/ringstream/ringstream/engine/config"
	"github.com/ringstream/ringstream/engine/meta"
	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/ring"
	"github.com/ringstream/ringstream/segment"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/shard/heartbeat"
	"github.com/ringstream/ringstream/wire"
)

func defaultsText(t *testing.T) string {
	t.Helper()
	var b bytes.Buffer
	if err := config.WriteDefaults(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestDefaultsRoundTrip: the printed defaults name every option of File and load back to Defaults.
func TestDefaultsRoundTrip(t *testing.T) {
	text := defaultsText(t)
	c, err := config.Parse([]byte(text), t.TempDir())
	if err != nil {
		t.Fatalf("defaults do not load: %v\n%s", err, text)
	}
	if !reflect.DeepEqual(c.File, config.Defaults()) {
		t.Fatalf("defaults loaded back as\n%+v\nwant\n%+v", c.File, config.Defaults())
	}
	var raw map[string]map[string]any
	if _, err := toml.Decode(text, &raw); err != nil {
		t.Fatal(err)
	}
	ft := reflect.TypeFor[config.File]()
	for i := range ft.NumField() {
		sf := ft.Field(i)
		section := sf.Tag.Get("toml")
		if len(raw[section]) != sf.Type.NumField() {
			t.Errorf("[%s] prints %d options, the struct has %d", section, len(raw[section]), sf.Type.NumField())
		}
		for j := range sf.Type.NumField() {
			key := sf.Type.Field(j).Tag.Get("toml")
			if _, ok := raw[section][key]; !ok {
				t.Errorf("%s.%s is not printed", section, key)
			}
			if !strings.Contains(text, "\n"+key+" = ") {
				t.Errorf("%s.%s has no line of its own", section, key)
			}
		}
	}
	if !strings.Contains(strings.Join(c.Warnings, "\n"), "cluster.secret is empty") {
		t.Errorf("an empty secret is not warned about: %q", c.Warnings)
	}
}

// TestEmptyFileTakesDefaults: a file that sets nothing is the defaults, the shard count from the CPUs.
func TestEmptyFileTakesDefaults(t *testing.T) {
	c, err := config.Parse(nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.File, config.Defaults()) {
		t.Fatalf("empty file: %+v", c.File)
	}
	if c.ShardCount < 1 {
		t.Fatalf("shard count %d from the CPUs", c.ShardCount)
	}
	want := heartbeat.Ticks{BroadcastIntervalTicks: 50, HeartbeatTimeoutTicks: 500, IdleHeartbeatIntervalTicks: 200,
		IdleHeartbeatTimeoutTicks: 1200}
	if c.Schedule != want || c.NodeLivenessTimeoutTicks != 300 || c.EagerFailoverGraceTicks != 20 {
		t.Fatalf("ticks: %+v liveness %d grace %d", c.Schedule, c.NodeLivenessTimeoutTicks, c.EagerFailoverGraceTicks)
	}
}

// TestInvalidOptions: every rule has a case, refused at load with a message naming the key and rule.
func TestInvalidOptions(t *testing.T) {
	cases := []struct {
		name, toml, want string
		cause            error
	}{
		{"node id 0", "[node]\nid = 0", "node.id: must be 1..65535", nil},
		{"node id too large", "[node]\nid = 70000", "node.id", nil},
		{"node not in peers", "[node]\nid = 4", "does not list this node (node.id 4)", nil},
		{"cluster id 0", "[cluster]\nid = 0", "cluster.id: must be 1..2^63-1", nil},
		{"empty data dir", "[node]\ndata_dir = \"\"", "node.data_dir: must not be empty", nil},
		{"listen not ip:port", "[node]\nlisten = \"localhost:7001\"", "node.listen: \"localhost:7001\" is not an ip:port", nil},
		{"client listen", "[client]\nlisten = \"7002\"", "client.listen", nil},
		{"admin listen", "[admin]\nlisten = \"\"", "admin.listen", nil},
		{"no peers", "[cluster]\npeers = {}", "cluster.peers: must list every node", nil},
		{"peer key", "[cluster]\npeers = { 1 = \"127.0.0.1:1\", x = \"127.0.0.1:2\" }", "key \"x\" is not a node id", nil},
		{"peer key 0", "[cluster]\npeers = { 0 = \"127.0.0.1:1\", 1 = \"127.0.0.1:2\" }", "key \"0\" is not a node id", nil},
		{"peer key leading zero", "[cluster]\npeers = { 01 = \"127.0.0.1:1\", 1 = \"127.0.0.1:2\" }", "key \"01\"", nil},
		{"peer address", "[cluster]\npeers = { 1 = \"127.0.0.1\" }", "cluster.peers.1: \"127.0.0.1\" is not an ip:port", nil},
		{"peer port 0", "[cluster]\npeers = { 1 = \"127.0.0.1:0\" }", "cluster.peers.1: 127.0.0.1:0 is not an address another node can dial", nil},
		{"peer unspecified", "[cluster]\npeers = { 1 = \"0.0.0.0:7001\" }", "not an address another node can dial", nil},
		{"peers share address", "[cluster]\npeers = { 1 = \"127.0.0.1:7001\", 2 = \"127.0.0.1:7001\" }", "nodes 1 and 2 share the address", nil},
		{"tick 0", "[cluster]\ntick_ms = 0", "cluster.tick_ms: is 0; must be 1..1000", nil},
		{"tick too long", "[cluster]\ntick_ms = 5000", "cluster.tick_ms", nil},
		{"R9 floor", "[cluster]\ncommit_heartbeat_timeout = 1000", "R9 requires at least 2000 ms", heartbeat.ErrConfig},
		{"R9 4xP", "[cluster]\ncommit_broadcast_interval = 1000\ncommit_heartbeat_timeout = 3000\ncommit_idle_heartbeat_interval = 3000",
			"R9 requires at least 4 x commit_broadcast_interval", heartbeat.ErrConfig},
		{"R23 multiple of P", "[cluster]\ncommit_idle_heartbeat_interval = 1700", "whole multiple of commit_broadcast_interval", heartbeat.ErrConfig},
		{"R23 idle timeout", "[cluster]\ncommit_idle_heartbeat_timeout = 7000", "at least 4 x commit_idle_heartbeat_interval", heartbeat.ErrConfig},
		{"R23 zero", "[cluster]\ncommit_broadcast_interval = 0", "commit_broadcast_interval must be greater than 0", heartbeat.ErrConfig},
		{"not a tick multiple", "[cluster]\ntick_ms = 30", "not a whole multiple of tick_ms", heartbeat.ErrConfig},
		{"liveness tick multiple", "[cluster]\nnode_liveness_timeout = 3005", "cluster.node_liveness_timeout: 3005 ms is not a whole multiple of tick_ms", nil},
		{"grace tick multiple", "[cluster]\neager_failover_grace = 205", "cluster.eager_failover_grace: 205 ms", nil},
		{"liveness 0", "[cluster]\nnode_liveness_timeout = 0", "node_liveness_timeout must be at least one tick", nil},
		{"grace 0", "[cluster]\neager_failover_grace = 0", "eager_failover_grace must be at least one tick", nil},
		{"grace past liveness", "[cluster]\neager_failover_grace = 3000", "eager_failover_grace (300 ticks) must be below node_liveness_timeout", nil},
		{"grace past view change", "[cluster]\neager_failover_grace = 2500\nnode_liveness_timeout = 9000", "past the metadata group's view change timeout", nil},
		{"duration string", "[cluster]\nnode_liveness_timeout = \"3.0001s\"", "not a whole, non-negative count of milliseconds", nil},
		{"negative duration", "[cluster]\nnode_liveness_timeout = -5", "negative duration", nil},
		{"policy", "[cluster]\nassignment_policy = \"all\"", "cluster.assignment_policy: \"all\" is not a policy", nil},
		{"policy count", "[cluster]\nassignment_policy = \"count_durable(0)\"", "the count must be a number in 1..255", nil},
		{"policy count big", "[cluster]\nassignment_policy = \"count_accepted(256)\"", "the count must be a number in 1..255", nil},
		{"shards negative", "[shards]\ncount = -1", "shards.count: is -1", nil},
		{"shards too many", "[shards]\ncount = 2000", "shards is 2000, want 1..1024", nil},
		{"ring backend", "[shards]\nring_backend = \"epoll\"", "unknown backend \"epoll\"", ring.ErrInvalidConfig},
		{"ring backend empty", "[shards]\nring_backend = \"\"", "must not be empty or 0", nil},
		{"ring entries", "[shards]\nring_entries = 1000", "entries 1000 is not a power of two", ring.ErrInvalidConfig},
		{"ring task run", "[shards]\nring_task_run = \"eager\"", "unknown task run mode \"eager\"", ring.ErrInvalidConfig},
		{"segment bytes", "[storage]\nsegment_bytes = 100", "SegmentBytes 100 below 4 KiB", segment.ErrConfig},
		{"segment negative", "[storage]\nsegment_bytes = -1", "storage.segment_bytes", nil},
		{"prewrite", "[storage]\nprewrite_bytes = 100", "PrewriteBytes 100 is neither -1", segment.ErrConfig},
		{"recycle", "[storage]\nrecycle_segments = -2", "RecycleSegments -2 below -1", segment.ErrConfig},
		{"per-stream series negative", "[metrics]\nper_stream_max = -1", "metrics.per_stream_max: is -1; must be 0 (off) to 100000", nil},
		{"per-stream series too many", "[metrics]\nper_stream_max = 100001", "metrics.per_stream_max: is 100001", nil},
		{"log format", "[log]\nformat = \"yaml\"", "log.format: is \"yaml\"; must be text or json", nil},
		{"client outbox", "[client]\noutbox_bytes = 100", "client: shard: invalid configuration: client outbox bytes 100", shard.ErrConfig},
		{"client requests", "[client]\nrequests_max = -1", "client requests max -1 is below 1", shard.ErrConfig},
		{"client frame", "[client]\nframe_bytes_max = 100", "client frame bytes max 100", shard.ErrConfig},
		{"retention bytes", "[storage]\nretention_bytes = -1", "storage.retention_bytes: is -1", nil},
		{"retention age", "[storage]\nretention_age = -5", "last key \"storage.retention_age\"): heartbeat: invalid configuration: negative duration", nil},
		{"retention age huge", "[storage]\nretention_age = 9000000000000000000", "storage.retention_age: is too large", nil},
		{"idle close huge", "[storage]\nidle_close_after = 9000000000000000000", "storage.idle_close_after: is too large", nil},
		{"replicas count", "[metadata]\nreplicas = [1, 2]", "metadata.replicas: vsr: ", nil},
		{"replicas twice", "[metadata]\nreplicas = [1, 2, 2]", "node 2 is listed twice", nil},
		{"replica not a peer", "[metadata]\nreplicas = [1, 2, 9]", "node 9 is not in cluster.peers", nil},
		{"secret short", "[cluster]\nsecret = \"short\"", "cluster.secret: is 5 bytes; a secret must be at least 16", nil},
		{"secret and file", "[cluster]\nsecret = \"0123456789abcdef\"\nsecret_file = \"s\"", "set either secret or secret_file", nil},
		{"secret file missing", "[cluster]\nsecret_file = \"nope\"", "cluster.secret_file: open", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.toml), t.TempDir())
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.toml)
			}
			if !errors.Is(err, config.ErrConfig) {
				t.Errorf("%v does not wrap ErrConfig", err)
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Errorf("%v does not wrap %v", err, tc.cause)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// TestUnknownKeyAndWrongType: a misspelt key and a value of the wrong type are refused by name.
func TestUnknownKeyAndWrongType(t *testing.T) {
	cases := []struct{ toml, want string }{
		{"[cluster]\ncommit_heartbeat_timout = 5000", "unknown key cluster.commit_heartbeat_timout"},
		{"[nodes]\nid = 2", "unknown key nodes"},
		{"[node]\nid = 1\ncolour = \"red\"", "unknown key node.colour"},
		{"[node]\nid = \"one\"", "node.id"},
		{"[shards]\npin_cores = \"yes\"", "shards.pin_cores"},
		{"[metadata]\nreplicas = \"1,2,3\"", "metadata.replicas"},
		{"[cluster]\ncommit_broadcast_interval = true", "duration must be an integer of milliseconds"},
		{"[node\nid = 1", "toml:"},
	}
	for _, tc := range cases {
		_, err := config.Parse([]byte(tc.toml), t.TempDir())
		if err == nil || !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an ErrConfig naming %q", tc.toml, err, tc.want)
		}
	}
}

// TestWarnings: what the rules allow but advise against loads, with a warning naming the option.
func TestWarnings(t *testing.T) {
	text := "[cluster]\nsecret = \"0123456789abcdef\"\ncommit_heartbeat_timeout = 3000\n" +
		"[admin]\nlisten = \"0.0.0.0:7003\""
	c, err := config.Parse([]byte(text), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(c.Warnings, "\n")
	for _, want := range []string{"below 2 x commit_idle_heartbeat_interval", "admin.listen is 0.0.0.0:7003"} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings %q lack %q", c.Warnings, want)
		}
	}
	if strings.Contains(all, "secret is empty") {
		t.Errorf("a set secret is warned about: %q", c.Warnings)
	}
}

// TestSecretFile: the secret is read from a file next to the config, its newline dropped; a file
// others can read is warned about.
func TestSecretFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("0123456789abcdefXYZ\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "node.toml")
	if err := os.WriteFile(path, []byte("[cluster]\nsecret_file = \"secret\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(c.Secret) != "0123456789abcdefXYZ" {
		t.Fatalf("secret %q", c.Secret)
	}
	if !strings.Contains(strings.Join(c.Warnings, "\n"), "readable by group or others") {
		t.Errorf("mode 0644 not warned about: %q", c.Warnings)
	}
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(path); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Fatalf("empty secret file: %v", err)
	}
	if _, err := config.Load(filepath.Join(dir, "missing.toml")); !errors.Is(err, config.ErrConfig) {
		t.Fatalf("missing file: %v", err)
	}
}

// TestConverters: the other packages' configs come out filled and valid.
func TestConverters(t *testing.T) {
	text := "[node]\nid = 2\n[cluster]\ntick_ms = 5\nassignment_policy = \"count_durable(2)\"\nsecret = \"0123456789abcdef\"\n" +
		"[shards]\ncount = 3\npin_cores = true\nring_backend = \"fallback\"\n" +
		"[storage]\nsegment_bytes = 1048576\nretention_bytes = 5000\nretention_age = \"1h\"\n[metadata]\nreplicas = [3, 2, 1]"
	c, err := config.Parse([]byte(text), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sc := c.Shard()
	if sc.Node != 2 || sc.Cluster != 1 || sc.Shards != 3 || !sc.PinCores || sc.Tick.Milliseconds() != 5 ||
		sc.Ring.Backend != ring.BackendFallback || string(sc.Secret) != "0123456789abcdef" || sc.Schedule.BroadcastIntervalTicks != 100 || sc.Listen.Port() != 7001 {
		t.Fatalf("shard config %+v", sc)
	}
	if sc.ClientListen.Port() != 7002 || sc.Client.RequestsMax != 64 || sc.Client.FrameBytesMax != 8<<20+256 {
		t.Fatalf("client listener %v %+v", sc.ClientListen, sc.Client)
	}
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	peers := c.Peers()
	if len(peers) != 2 || peers[0].Node != 1 || peers[1].Node != 3 || peers[1].Addr.Port() != 7021 {
		t.Fatalf("peers %+v", peers)
	}
	cc := c.Control()
	if cc.NodeLivenessTimeoutTicks != 600 || cc.EagerFailoverGraceTicks != 40 ||
		cc.AssignmentPolicy != (meta.Policy{Kind: meta.PolicyCountDurable, Count: 2}) {
		t.Fatalf("control config %+v", cc)
	}
	if seg := c.Segment(); seg.SegmentBytes != 1<<20 || seg.Validate() != nil {
		t.Fatalf("segment config %+v", seg)
	}
	if b, age := c.Retention(); b != 5000 || age != 3600_000 {
		t.Fatalf("retention %d %d", b, age)
	}
	for _, tc := range []struct {
		value string
		ticks int64
	}{{"", 2000}, {"\"12ms\"", 3}, {"5", 1}, {"0", -1}} { // tick_ms 5; default 10 s
		text := "[cluster]\ntick_ms = 5\n"
		if tc.value != "" {
			text += "[storage]\nidle_close_after = " + tc.value + "\n"
		}
		ic, err := config.Parse([]byte(text), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if got := ic.IdleCloseTicks(); got != tc.ticks {
			t.Errorf("idle_close_after %q: %d ticks, want %d", tc.value, got, tc.ticks)
		}
	}
	mg, ok := c.MetaGroup()
	if !ok {
		t.Fatal("node 2 is a replica")
	}
	emg := metahost.Config(mg) // the two types must keep the same fields
	if emg.VSR.Self != 1 || emg.VSR.ReplicaCount != 3 || emg.Members[0].Node != 3 || emg.Members[2].Index != 2 ||
		emg.EagerFailoverGraceTicks != 40 || emg.TickPeriod != 5*time.Millisecond || emg.Dir != filepath.Join("data", "meta") ||
		emg.VSR.Validate() != nil {
		t.Fatalf("metadata group config %+v", emg)
	}
	c2, err := config.Parse([]byte("[node]\nid = 4\n[cluster]\npeers = {1=\"10.0.0.1:1\",2=\"10.0.0.2:1\",3=\"10.0.0.3:1\",4=\"10.0.0.4:1\"}"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c2.MetaGroup(); ok {
		t.Fatal("node 4 is not a replica")
	}
}

// TestParsePolicy: every policy the controller stamps reads back from its String.
func TestParsePolicy(t *testing.T) {
	for _, p := range []meta.Policy{{Kind: meta.PolicyMajorityDurable}, {Kind: meta.PolicyLocalDurable},
		{Kind: meta.PolicyCountDurable, Count: 1}, {Kind: meta.PolicyCountAccepted, Count: 255}} {
		got, err := config.ParsePolicy(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %v, %v", p.String(), got, err)
		}
	}
	for _, s := range []string{"", "unset", "count_durable()", "count_durable(x)", "count_durable(3", "count_durable(1)x", "count_durable(-1)"} {
		if _, err := config.ParsePolicy(s); err == nil {
			t.Errorf("ParsePolicy(%q) accepted", s)
		}
	}
}

// TestLoggerFormat: log.format json writes each record as one JSON object; text (the default) as
// key=value pairs.
func TestLoggerFormat(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"[log]\nformat = \"json\"", `"msg":"copy opened"`},
		{"", `msg="copy opened"`},
	} {
		cfg, err := config.Parse([]byte(tc.file), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		cfg.Logger(&b, slog.LevelInfo).Info("copy opened", "stream", 7)
		cfg.Logger(&b, slog.LevelWarn).Info("not at warn")
		line := b.String()
		if strings.Contains(line, "not at warn") {
			t.Fatalf("%q logs below its level: %q", tc.file, line)
		}
		if !strings.Contains(line, tc.want) {
			t.Fatalf("%q logs %q; want %s in it", tc.file, line, tc.want)
		}
		if cfg.File.Log.Format == "json" {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["stream"] != float64(7) {
				t.Fatalf("json log line %q: %v %v", line, rec, err)
			}
		}
	}
}

// TestDefaults_StateTransferChunkFitsAPeerOutbox: a metadata state transfer chunk's frame must fit in
// what a peer link's outbox keeps for frames (shard.ErrFrameTooLarge otherwise), or no checkpoint could
// ever reach a replica behind the log.
func TestDefaults_StateTransferChunkFitsAPeerOutbox(t *testing.T) {
	c, err := config.Parse([]byte(defaultsText(t)), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mg, ok := c.MetaGroup()
	if !ok {
		t.Fatal("the defaults run no metadata replica")
	}
	frame := wire.HeaderSize + wire.VSRFixedSize + mg.VSR.SnapshotChunkBytes
	if room := c.Shard().FrameRoom(); frame > room {
		t.Fatalf("a chunk frame is %d bytes, a peer outbox takes frames up to %d", frame, room)
	}
}
