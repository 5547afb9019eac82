package shard

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// closeReason is why the node closed (or refused) a connection. Each has a metric label
// (ringstream_shard_connections_closed_total{listener, reason}) and a rate-limited log line.
type closeReason uint8

const (
	closeClientConnectionsMax closeReason = iota // accepted past ClientConfig.ConnectionsMax: closed at once
	closeClientShardFull                         // accepted past the shard's share of its ring (clientConnsShardMax)
	closeClientHandshakeTimeout
	closeClientHandshakeRefused // a hello or proof refused for its frame, revision or cluster
	closeClientAuthRefused      // refused for the cluster secret
	closeClientIdleTimeout
	closeClientFrameTimeout
	closeClientFrameTooLarge
	closeClientBrokenFrame    // a header that fails its checks after the handshake
	closeClientClosedMidFrame // the client closed with part of a request received
	closeClientClosedMidReply // the client closed (or a send failed) with replies unsent
	closePeerHandshakeRefused
	closePeerHandshakeTimeout
	closePeerBrokenFrame // a peer frame whose header fails its checks, or larger than FrameSizeMax
	closePeerFrameTimeout
	closePeerRecvError // a receive failed (a reset, or TCP keepalive found the peer gone)
	// The Kafka listener's (kafka.go), each the client reason of the same name.
	closeKafkaConnectionsMax
	closeKafkaShardFull
	closeKafkaIdleTimeout
	closeKafkaFrameTimeout
	closeKafkaFrameTooLarge
	closeKafkaBadRequest // a request whose header (or size prefix) breaks a rule, named in the log line
	closeKafkaClosedMidFrame
	closeKafkaClosedMidReply
	closeReasons // the count of reasons
)

// closeReasonNames are the metric labels, listener and reason, of each closeReason.
var closeReasonNames = [closeReasons][2]string{
	closeClientConnectionsMax:   {"client", "connections_max"},
	closeClientShardFull:        {"client", "shard_full"},
	closeClientHandshakeTimeout: {"client", "handshake_timeout"},
	closeClientHandshakeRefused: {"client", "handshake_refused"},
	closeClientAuthRefused:      {"client", "auth_refused"},
	closeClientIdleTimeout:      {"client", "idle_timeout"},
	closeClientFrameTimeout:     {"client", "frame_timeout"},
	closeClientFrameTooLarge:    {"client", "frame_too_large"},
	closeClientBrokenFrame:      {"client", "broken_frame"},
	closeClientClosedMidFrame:   {"client", "closed_mid_frame"},
	closeClientClosedMidReply:   {"client", "closed_mid_reply"},
	closePeerHandshakeRefused:   {"peer", "handshake_refused"},
	closePeerHandshakeTimeout:   {"peer", "handshake_timeout"},
	closePeerBrokenFrame:        {"peer", "broken_frame"},
	closePeerFrameTimeout:       {"peer", "frame_timeout"},
	closePeerRecvError:          {"peer", "recv_error"},
	closeKafkaConnectionsMax:    {"kafka", "connections_max"},
	closeKafkaShardFull:         {"kafka", "shard_full"},
	closeKafkaIdleTimeout:       {"kafka", "idle_timeout"},
	closeKafkaFrameTimeout:      {"kafka", "frame_timeout"},
	closeKafkaFrameTooLarge:     {"kafka", "frame_too_large"},
	closeKafkaBadRequest:        {"kafka", "bad_request"},
	closeKafkaClosedMidFrame:    {"kafka", "closed_mid_frame"},
	closeKafkaClosedMidReply:    {"kafka", "closed_mid_reply"},
}

func (r closeReason) listener() string { return closeReasonNames[r][0] }
func (r closeReason) String() string   { return closeReasonNames[r][1] }

// closeLogIntervalTicks is how often each reason may log on one shard: one line a second (at least
// one tick). The lines a reason could not log in between are summed into its next line, or into a
// line of their own at the first tick after the interval.
func closeLogIntervalTicks(tick time.Duration) uint64 {
	return max(1, uint64(time.Second/max(tick, 1)))
}

// closeLog rate-limits the log lines of connection refusals on one shard: 1,000 bad connections
// give a line per reason per second, each saying how many it stands for, not 1,000 lines.
type closeLog struct {
	log           *slog.Logger
	shard         int
	intervalTicks uint64
	last          [closeReasons]uint64 // tick of the reason's last line, 0: none yet
	logged        [closeReasons]bool
	suppressed    [closeReasons]uint64 // refusals since the last line that it did not log
}

// note counts a refusal and logs it, or leaves it to the next line of its reason.
func (l *closeLog) note(stats *Stats, now uint64, r closeReason, attrs ...any) {
	stats.ConnectionsClosed[r].Add(1)
	if l.logged[r] && now-l.last[r] < l.intervalTicks {
		l.suppressed[r]++
		return
	}
	l.line(now, r, attrs...)
}

func (l *closeLog) line(now uint64, r closeReason, attrs ...any) {
	args := append([]any{"listener", r.listener(), "reason", r.String(), "shard", l.shard}, attrs...)
	if n := l.suppressed[r]; n > 0 {
		args = append(args, "unlogged_since_last_line", n)
	}
	l.log.Warn("shard: connection closed", args...)
	l.last[r], l.logged[r], l.suppressed[r] = now, true, 0
}

// flush logs, once the interval passed, how many refusals of each reason were left unlogged.
func (l *closeLog) flush(now uint64) {
	for r := range closeReasons {
		if l.suppressed[r] > 0 && now-l.last[r] >= l.intervalTicks {
			n := l.suppressed[r]
			l.suppressed[r] = 0
			l.log.Warn("shard: connections closed", "listener", r.listener(), "reason", r.String(),
				"shard", l.shard, "count", n)
			l.last[r] = now
		}
	}
}

// ClientConnsShardMax is how many client connections one shard holds with a ring of ringEntries
// (ring.Config.Entries): each has up to two operations in flight on the shard's ring (a receive and a
// send), and they may take half of its in-flight table (twice ringEntries), so the links, the tick,
// storage and saves always find room. A connection past it is closed at once, like one past
// ClientConfig.ConnectionsMax: the kernel's reuseport hash may fill one shard before the others.
func ClientConnsShardMax(ringEntries uint32) int { return int(ringEntries) / 2 }

// nodeClients counts the node's client connections, handshaking ones included, across its shards
// (ClientConfig.ConnectionsMax).
type nodeClients struct {
	open atomic.Int64
}

// admit reserves a place for one more client connection, or reports that the node has none.
func (c *nodeClients) admit(limit int) bool {
	if c.open.Add(1) > int64(limit) {
		c.open.Add(-1)
		return false
	}
	return true
}

func (c *nodeClients) release() { c.open.Add(-1) }

// expire closes, at a tick, the client connections past one of their time bounds: the handshake
// (from the accept), a frame whose bytes stopped coming (from its first byte), and an open
// connection with nothing in flight and nothing received (from its last byte or reply).
func (c *clientShard) expire(now uint64) {
	cfg := &c.s.cfg.Client
	for i := len(c.conns) - 1; i >= 0; i-- { // backwards: close may remove c.conns[i]
		cn := c.conns[i]
		switch {
		case cn.state == clientHello || cn.state == clientProving:
			if now-cn.acceptTick >= cfg.HandshakeTimeoutTicks {
				c.s.stats.Client.HandshakeTimeouts.Add(1)
				cn.closeFor(closeClientHandshakeTimeout, "ticks", now-cn.acceptTick)
			}
		case cn.state != clientOpen || cn.stalled || cn.closeAfter:
			// Closing, or not reading by our own choice (a bound or a full queue): the client is not late.
		case cn.frame.expired(now, cfg.FrameTimeoutTicks):
			cn.closeFor(closeClientFrameTimeout, "ticks", now-cn.frame.startTick,
				"received", cn.buffered(), "missing", cn.missing())
		case cn.idle() && now-cn.lastActiveTick >= cfg.IdleTimeoutTicks:
			cn.closeFor(closeClientIdleTimeout, "ticks", now-cn.lastActiveTick)
		}
	}
	c.closes.flush(now)
}

// idle reports that an open connection has nothing under way: no request unanswered (a long-poll
// fetch waiting for records is not idle), no reply unsent, no part of a frame received.
func (cn *clientConn) idle() bool {
	return cn.pending == 0 && len(cn.out) == 0 && len(cn.sending) == 0 && cn.buffered() == 0
}

// buffered is the bytes received and not handed on yet: part of the next request.
func (cn *clientConn) buffered() int {
	if cn.kafka {
		return cn.kin.buffered()
	}
	return cn.in.Buffered()
}

// missing is how many more bytes complete the request under way, once its size is known.
func (cn *clientConn) missing() int {
	if cn.kafka {
		return cn.kin.pending()
	}
	return cn.in.Pending()
}

// markFrame notes, after bytes were handed to the reader, whether part of a frame waits for the rest.
func (cn *clientConn) markFrame() {
	now := cn.s.tick.Number
	cn.lastActiveTick = now
	cn.frame.mark(now, cn.buffered(), cn.framesDone)
}

// frameClock times the frame a connection is receiving, client or peer, in ticks: from its first
// byte to its last. It is marked after each receive was handed to the reader and read at each tick,
// never a timer.
type frameClock struct {
	inFrame   bool   // part of a frame is received and waits for the rest
	startTick uint64 // when that frame's first byte came, or reading resumed
	doneMark  uint64 // the connection's frames done when startTick was set
}

// mark notes whether part of a frame waits for the rest (buffered bytes not handed on), and from which
// tick: a frame started since the last mark (framesDone changed) starts its clock now. A stall ends
// with the stalled frame handed on, so the frame after it starts its clock when reading resumes.
func (c *frameClock) mark(now uint64, buffered int, framesDone uint64) {
	if buffered == 0 {
		c.inFrame = false
		return
	}
	if !c.inFrame || framesDone != c.doneMark {
		c.inFrame, c.startTick, c.doneMark = true, now, framesDone
	}
}

// expired reports that a frame has waited limit ticks or more for its rest.
func (c *frameClock) expired(now, limit uint64) bool {
	return c.inFrame && now-c.startTick >= limit
}

// closeFor closes the connection for reason r: counted by reason and logged (rate-limited).
func (cn *clientConn) closeFor(r closeReason, attrs ...any) {
	cn.s.cl.closes.note(&cn.s.stats, cn.s.tick.Number, cn.reason(r), append(attrs, "conn", cn.id)...)
	cn.close()
}
