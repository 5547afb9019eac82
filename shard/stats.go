package shard

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Stats are one shard's counters (R19, R32). The shard's goroutine updates them with atomic adds, so
// the metrics collector and tests read them from any goroutine without a lock and without the shard
// allocating per entry.
type Stats struct {
	Ticks     atomic.Uint64
	SendTicks atomic.Uint64
	// TicksSkipped: ticks whose time passed while the shard could not run them (timerTick).
	TicksSkipped atomic.Uint64

	CommitBatchesSent     atomic.Uint64
	CommitEntriesSent     atomic.Uint64
	CommitBatchesReceived atomic.Uint64
	CommitEntriesReceived atomic.Uint64 // good entries handed to the owning shard's groups (R16)
	ReplyBatchesSent      atomic.Uint64
	ReplyEntriesSent      atomic.Uint64
	ReplyBatchesReceived  atomic.Uint64
	ReplyEntriesReceived  atomic.Uint64

	// Entries sent by heartbeat_state (R21, and R32's heartbeat state metrics): index 1 Busy, 2 Idle,
	// 3 Eager; index 0 is unused.
	CommitEntriesSentByState [4]atomic.Uint64

	CommitEntriesAccepted atomic.Uint64 // newer Commits from the current primary: a reply was queued
	CommitEntriesIgnored  atomic.Uint64 // good but stale, other view, unknown group or not a backup
	ReplyEntriesCounted   atomic.Uint64 // replies that counted in a quorum window
	ReplyEntriesIgnored   atomic.Uint64
	BadCommitEntries      atomic.Uint64 // rejected alone (R17)
	BadReplyEntries       atomic.Uint64 // rejected alone (R29)
	FramesDropped         atomic.Uint64 // wrong checksum or undecodable frame, dropped whole (R15)
	FramesRouted          atomic.Uint64 // group-addressed frames handed to a group
	FramesUnroutable      atomic.Uint64 // group-addressed frames for a group this node does not have
	NodeFrames            atomic.Uint64 // node-level frames handed to the node's NodeHandler

	EntriesDroppedLinkDown atomic.Uint64 // Commit entries owed to a peer whose link was down (R25)
	RepliesDroppedLinkDown atomic.Uint64 // reply entries dropped with their batch (R30)
	RepliesDroppedFull     atomic.Uint64 // replies not queued: the reply outbox was full
	EntriesDeferredFull    atomic.Uint64 // Commit entries left owed: the outbox had no room (R13)
	EntriesDeferredSave    atomic.Uint64 // Commit entries left owed: superblock save failed (R12)
	EntriesAwaitingSave    atomic.Uint64 // Commit entries left out of a tick's batch: save in flight (R12)
	BytesDroppedSendFail   atomic.Uint64 // outbox bytes dropped when a send failed (R30)
	FramesDroppedLinkDown  atomic.Uint64 // group frames refused because the link was down

	SuperblockSaves         atomic.Uint64
	SuperblockSaveFailures  atomic.Uint64
	SuperblockSavesDeferred atomic.Uint64 // not issued: no room on the ring this tick (R12)
	SavesOfRemovedGroups    atomic.Uint64 // saves that completed after their group was removed

	RouteBackpressure atomic.Uint64 // a cross-shard queue was full: the receive paused (never a drop)
	QueueWakeups      atomic.Uint64 // MsgRing wakeups sent to other shards

	DataFramesSent    atomic.Uint64 // SendData frames the kernel took whole
	DataBytesSent     atomic.Uint64
	DataFramesDropped atomic.Uint64 // SendData frames reported not sent (link failed or stopped)

	BytesSent      atomic.Uint64
	BytesReceived  atomic.Uint64
	RecvBytesMoved atomic.Uint64 // received bytes a FrameReader moved to make room (user-space copies)

	GroupsBusy atomic.Int64 // primaries in the busy state at the last tick (R20)
	GroupsIdle atomic.Int64
	// Sleeping groups (sleep.go): asleep at the last tick, wakes by an input, full polls (one per
	// send tick).
	GroupsSleeping atomic.Int64
	GroupWakes     atomic.Uint64
	FullPolls      atomic.Uint64

	LinkConnects    atomic.Uint64
	LinkFailures    atomic.Uint64
	HandshakeErrors atomic.Uint64
	AuthRefused     atomic.Uint64 // handshakes refused for the cluster secret (wrong, missing, unexpected); also in HandshakeErrors
	LinksUp         atomic.Int64

	DrainAbandoned atomic.Uint64 // operations still in flight when the drain deadline passed (Stop)

	// ConnectionsClosed counts the connections the node refused or closed, by closeReason
	// (client_limits.go): limits, timeouts, refused handshakes, broken frames, clients gone mid-frame.
	ConnectionsClosed [closeReasons]atomic.Uint64

	Client ClientStats // the client listener (client.go)
	Kafka  KafkaStats  // the Kafka listener (kafka.go)
}

// counterDesc pairs a metric name with the Stats field it reads.
type counterDesc struct {
	desc *prometheus.Desc
	get  func(*Stats) float64
}

// collector exposes every shard's Stats of one node to a prometheus registry, labelled by shard.
type collector struct {
	node     string
	shards   []*Shard
	counters []counterDesc
	gauges   []counterDesc
	linkUp   *prometheus.Desc
	byState  *prometheus.Desc
	closed   *prometheus.Desc
}

func newCollector(node uint16, shards []*Shard) *collector {
	c := &collector{node: strconv.Itoa(int(node)), shards: shards}
	labels := []string{"node", "shard"}
	c.linkUp = prometheus.NewDesc("ringstream_shard_link_up", "1 when the shard's link to the peer node is "+
		"connected and handshaken, 0 when it is down.", []string{"node", "shard", "peer"}, nil)
	c.byState = prometheus.NewDesc("ringstream_shard_commit_entries_sent_by_state_total",
		"Commit entries sent, by heartbeat_state (R21).", []string{"node", "shard", "state"}, nil)
	c.closed = prometheus.NewDesc("ringstream_shard_connections_closed_total", "Connections the node refused "+
		"or closed for a limit, a timeout or a fault, by listener (client, peer) and reason.",
		[]string{"node", "shard", "listener", "reason"}, nil)
	counter := func(name, help string, get func(*Stats) float64) {
		c.counters = append(c.counters, counterDesc{
			prometheus.NewDesc("ringstream_shard_"+name, help, labels, nil), get})
	}
	gauge := func(name, help string, get func(*Stats) float64) {
		c.gauges = append(c.gauges, counterDesc{
			prometheus.NewDesc("ringstream_shard_"+name, help, labels, nil), get})
	}
	u := func(a *atomic.Uint64) float64 { return float64(a.Load()) }
	counter("ticks_total", "Ticks run.", func(s *Stats) float64 { return u(&s.Ticks) })
	counter("send_ticks_total", "Send ticks run (R1).", func(s *Stats) float64 { return u(&s.SendTicks) })
	counter("ticks_skipped_total", "Ticks whose time passed while the shard could not run them (a stopped or "+
		"starved process): its windows count them.", func(s *Stats) float64 { return u(&s.TicksSkipped) })
	counter("commit_batches_sent_total", "Commit batch frames sent (R19).", func(s *Stats) float64 { return u(&s.CommitBatchesSent) })
	counter("commit_entries_sent_total", "Commit entries sent (R19).", func(s *Stats) float64 { return u(&s.CommitEntriesSent) })
	counter("commit_batches_received_total", "Commit batch frames received (R19).", func(s *Stats) float64 { return u(&s.CommitBatchesReceived) })
	counter("commit_entries_received_total", "Commit entries handled by the owning shard (R19).", func(s *Stats) float64 { return u(&s.CommitEntriesReceived) })
	counter("reply_batches_sent_total", "CommitReply batch frames sent (R32).", func(s *Stats) float64 { return u(&s.ReplyBatchesSent) })
	counter("reply_entries_sent_total", "CommitReply entries sent (R32).", func(s *Stats) float64 { return u(&s.ReplyEntriesSent) })
	counter("reply_batches_received_total", "CommitReply batch frames received (R32).", func(s *Stats) float64 { return u(&s.ReplyBatchesReceived) })
	counter("reply_entries_received_total", "CommitReply entries handled by the owning shard (R32).", func(s *Stats) float64 { return u(&s.ReplyEntriesReceived) })
	counter("bad_commit_entries_total", "Commit entries rejected alone (R17).", func(s *Stats) float64 { return u(&s.BadCommitEntries) })
	counter("bad_reply_entries_total", "CommitReply entries rejected alone (R29).", func(s *Stats) float64 { return u(&s.BadReplyEntries) })
	counter("frames_dropped_total", "Frames dropped whole: checksum or decoding (R15).", func(s *Stats) float64 { return u(&s.FramesDropped) })
	counter("entries_dropped_link_down_total", "Commit entries owed to a peer whose link was down (R25).", func(s *Stats) float64 { return u(&s.EntriesDroppedLinkDown) })
	counter("replies_dropped_total", "CommitReply entries dropped with a failed or impossible batch send (R30).", func(s *Stats) float64 {
		return u(&s.RepliesDroppedLinkDown) + u(&s.RepliesDroppedFull)
	})
	counter("entries_deferred_total", "Commit entries left owed for a later batch (R12, R13).", func(s *Stats) float64 {
		return u(&s.EntriesDeferredFull) + u(&s.EntriesDeferredSave)
	})
	counter("entries_awaiting_save_total", "Commit entries left out of a tick's batch while their group's save ran (R12).",
		func(s *Stats) float64 { return u(&s.EntriesAwaitingSave) })
	counter("superblock_save_failures_total", "Superblock saves that failed (R12).", func(s *Stats) float64 { return u(&s.SuperblockSaveFailures) })
	counter("superblock_saves_deferred_total", "Superblock saves not issued for lack of ring room (R12).", func(s *Stats) float64 { return u(&s.SuperblockSavesDeferred) })
	counter("route_backpressure_total", "Receives paused on a full cross-shard queue.", func(s *Stats) float64 { return u(&s.RouteBackpressure) })
	counter("bytes_sent_total", "Bytes sent on peer links.", func(s *Stats) float64 { return u(&s.BytesSent) })
	counter("bytes_received_total", "Bytes received on peer links.", func(s *Stats) float64 { return u(&s.BytesReceived) })
	counter("link_failures_total", "Peer link failures.", func(s *Stats) float64 { return u(&s.LinkFailures) })
	counter("handshake_errors_total", "Peer handshakes refused or timed out, on both ends.", func(s *Stats) float64 { return u(&s.HandshakeErrors) })
	counter("auth_refused_total", "Peer handshakes refused for the cluster secret (wrong, missing or unexpected).", func(s *Stats) float64 { return u(&s.AuthRefused) })
	counter("data_frames_sent_total", "SendData frames the kernel took whole.", func(s *Stats) float64 { return u(&s.DataFramesSent) })
	counter("data_bytes_sent_total", "Bytes of SendData frames sent.", func(s *Stats) float64 { return u(&s.DataBytesSent) })
	counter("data_frames_dropped_total", "SendData frames reported not sent.", func(s *Stats) float64 { return u(&s.DataFramesDropped) })
	counter("recv_bytes_moved_total", "Received bytes moved in user space to make room.", func(s *Stats) float64 { return u(&s.RecvBytesMoved) })
	counter("node_frames_total", "Node-level frames handed to the node handler.", func(s *Stats) float64 { return u(&s.NodeFrames) })
	counter("drain_abandoned_total", "Operations abandoned at the drain deadline of Stop.", func(s *Stats) float64 { return u(&s.DrainAbandoned) })
	clientMetrics(counter, gauge)
	kafkaMetrics(counter, gauge)
	gauge("groups_busy", "Led groups in the busy state (R20).", func(s *Stats) float64 { return float64(s.GroupsBusy.Load()) })
	gauge("groups_idle", "Led groups in the idle state (R20).", func(s *Stats) float64 { return float64(s.GroupsIdle.Load()) })
	gauge("groups_sleeping", "Groups off every tick's poll until their next alarm, send tick or input.", func(s *Stats) float64 { return float64(s.GroupsSleeping.Load()) })
	counter("group_wakes_total", "Sleeping groups woken by an input before their alarm.", func(s *Stats) float64 { return u(&s.GroupWakes) })
	counter("full_polls_total", "Ticks that polled every group (the send ticks).", func(s *Stats) float64 { return u(&s.FullPolls) })
	gauge("links_up", "Outbound peer links connected.", func(s *Stats) float64 { return float64(s.LinksUp.Load()) })
	return c
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.counters {
		ch <- d.desc
	}
	for _, d := range c.gauges {
		ch <- d.desc
	}
	ch <- c.linkUp
	ch <- c.byState
	ch <- c.closed
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.shards {
		idx := strconv.Itoa(s.index)
		for _, d := range c.counters {
			ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, d.get(&s.stats), c.node, idx)
		}
		for _, d := range c.gauges {
			ch <- prometheus.MustNewConstMetric(d.desc, prometheus.GaugeValue, d.get(&s.stats), c.node, idx)
		}
		for st, name := range [...]string{1: "busy", 2: "idle", 3: "eager"} {
			if name != "" {
				ch <- prometheus.MustNewConstMetric(c.byState, prometheus.CounterValue,
					float64(s.stats.CommitEntriesSentByState[st].Load()), c.node, idx, name)
			}
		}
		for r := range closeReasons {
			ch <- prometheus.MustNewConstMetric(c.closed, prometheus.CounterValue,
				float64(s.stats.ConnectionsClosed[r].Load()), c.node, idx, r.listener(), r.String())
		}
		for _, l := range s.links {
			up := 0.0
			if l.up.Load() {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(c.linkUp, prometheus.GaugeValue, up, c.node, idx,
				strconv.Itoa(int(l.peer.Node)))
		}
	}
}
