package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringstream/ringstream/engine/config"
	"github.com/ringstream/ringstream/engine/metahost"
	"github.com/ringstream/ringstream/shard"
	"github.com/ringstream/ringstream/wire"
)

// Config is what the node hands the Kafka handler.
type Config struct {
	Node   *config.Config
	Shards *shard.Node
	// Meta is the node's metadata replica (nil: none), read on shard 0 for Metadata responses.
	Meta *metahost.Group
	// Registry takes the handler's metrics (nil: none registered).
	Registry prometheus.Registerer
	// Labels are the constant labels of those metrics.
	Labels prometheus.Labels
	Logger *slog.Logger
}

// Handler is the node's shard.KafkaHandler: it reads Kafka requests on their connection's shard,
// submits the client requests they map onto, and answers each Kafka request once, in order per
// connection.
type Handler struct {
	cfg      Config
	log      *slog.Logger
	from     wire.From
	node     uint16
	brokers  []shard.Peer // every node with a Kafka address, sorted by id
	copies   uint8        // the replication factor of a topic created without one
	shards   []shardState
	metrics  *metrics
	secret   []byte // the cluster secret; empty: no authentication
	password []byte // SASL PLAIN's password, Password(secret)

	producerIDs *producerIDs // InitProducerId's allocator, shared by the shards
	groupHost                // the group coordinators' metrics and timer (group_metrics.go)
}

// shardState is one shard's Kafka connections and the client requests submitted for them, used
// on that shard's goroutine only.
type shardState struct {
	handler *Handler
	conns   map[uint64]*conn
	calls   map[uint64]*call
	nextID  uint64
	ids     map[string]uint64 // stream name -> id, learned from lookups and Metadata
	// creating holds the topics this shard is auto-creating (autoCreate).
	creating map[string]bool
	frames   [][]byte // buffers for client requests being built (takeBuf, giveBuf)
	name     []byte   // a stream name being built
	out      []byte   // a response being encoded
	// coords are the group coordinators whose internal stream lives on this shard (group_coord.go).
	coords map[uint64]*coordinator
}

// takeBuf lends a buffer to build a client request in. A submission may be answered before it
// returns (a refusal on this shard), and that answer may build another request: each gets its own.
func (st *shardState) takeBuf() []byte {
	if n := len(st.frames); n > 0 {
		b := st.frames[n-1]
		st.frames = st.frames[:n-1]
		return b[:0]
	}
	return nil
}

// giveBuf returns a buffer takeBuf lent once its request was submitted (submissions copy).
func (st *shardState) giveBuf(b []byte) {
	if cap(b) <= bufKeptMax {
		st.frames = append(st.frames, b)
	}
}

// bufKeptMax bounds a buffer kept for reuse: a produce of the largest batch.
const bufKeptMax = 8 << 20

// conn is one Kafka connection: its requests not answered yet, in arrival order, and where it is
// in its SASL authentication (sasl.go).
type conn struct {
	queue     []*request
	saslPlain bool // a SaslHandshake chose PLAIN
	rawSASL   bool // SaslHandshake v0: the next frame is the bare PLAIN token
	authed    bool // authenticated, or no secret to authenticate with
}

// request is one Kafka request under way.
type request struct {
	conn     uint64
	hdr      requestHeader
	resp     kmsg.Response
	waiting  int    // client requests submitted and not answered
	done     bool   // resp is complete
	silent   bool   // acks=0: nothing is sent back
	raw      []byte // sent as it is instead of resp (a bare SASL token's answer)
	finished bool   // answered (or dropped): later replies are ignored
	fetch    *fetchState
	// onDone runs once waiting drops to 0 (nil: the request is done then).
	onDone func(s *shard.Shard, st *shardState, r *request)
}

// call is one client request submitted for a Kafka request, and what its reply does.
type call struct {
	r  *request
	on func(s *shard.Shard, st *shardState, rep *reply)
}

// reply is a client request's answer: a parsed frame, or err when it was never submitted.
type reply struct {
	h    wire.Header
	body []byte
	err  error
}

// errorCode is a reply's Kafka error: none for a success, codeOf for an error reply.
func (rep *reply) errorCode() (int16, string) {
	if rep.err != nil {
		return errRequestTimedOut, rep.err.Error()
	}
	if rep.h.Command != wire.CommandErrorReply {
		return errNone, ""
	}
	e, err := wire.DecodeErrorReply(&rep.h, rep.body)
	if err != nil {
		return errUnknownServer, err.Error()
	}
	return codeOf(e.Code), string(e.Message)
}

// New builds the Kafka handler of cfg.Node. Set it with shard.Node.SetKafkaHandler.
func New(cfg Config) (*Handler, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	f := &cfg.Node.File
	h := &Handler{cfg: cfg, log: cfg.Logger, from: wire.From{Cluster: f.Cluster.ID, Node: f.Node.ID}, node: f.Node.ID,
		brokers: slices.Clone(cfg.Node.KafkaAddrs), copies: uint8(min(3, len(cfg.Node.Nodes))),
		shards: make([]shardState, cfg.Node.ShardCount), secret: cfg.Node.Secret,
		producerIDs: newProducerIDs(f.Node.ID, nil)}
	if len(h.secret) > 0 {
		h.password = []byte(Password(h.secret))
	}
	for i := range h.shards {
		h.shards[i] = shardState{handler: h, conns: make(map[uint64]*conn), calls: make(map[uint64]*call), ids: make(map[string]uint64),
			creating: make(map[string]bool), coords: make(map[uint64]*coordinator)}
	}
	if err := h.groupHost.init(len(h.shards), cfg.Registry, cfg.Labels); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registry, cfg.Labels)
	if err != nil {
		return nil, err
	}
	h.metrics = m
	return h, nil
}

// SetBroker sets node id's Kafka address (its bound port, for a node started on port 0). Call it
// before the node starts.
func (h *Handler) SetBroker(id uint16, addr netip.AddrPort) {
	for i := range h.brokers {
		if h.brokers[i].Node == id {
			h.brokers[i].Addr = addr
			return
		}
	}
	h.brokers = append(h.brokers, shard.Peer{Node: id, Addr: addr})
	slices.SortFunc(h.brokers, func(a, b shard.Peer) int { return int(a.Node) - int(b.Node) })
}

// decodeRequest reads one Kafka request frame (its size prefix stripped): the header, checked
// (parseHeaderFixed, skipTags), the request type of its api key at its version (kmsg's highest
// when the client asked above it), and the body. bodyErr is a body that does not decode at that
// version, answered INVALID_REQUEST; err is a frame no response can be formed for, which closes
// the connection. ok reports an API and version this listener serves (supported); the body is read
// only then. The validation of a request frame; it never panics on any bytes (FuzzDecodeRequest).
func decodeRequest(frame []byte) (hdr requestHeader, req kmsg.Request, ok bool, bodyErr, err error) {
	hdr, rest, err := parseHeaderFixed(frame)
	if err != nil {
		return hdr, nil, false, nil, err
	}
	req = kmsg.RequestForKey(hdr.Key)
	if req == nil {
		return hdr, nil, false, nil, fmt.Errorf("%w: api key %d is not a Kafka api this listener knows", ErrBadHeader, hdr.Key)
	}
	req.SetVersion(min(hdr.Version, req.MaxVersion()))
	if hdr.Version <= req.MaxVersion() && req.IsFlexible() {
		if rest, err = skipTags(rest); err != nil {
			return hdr, nil, false, nil, err
		}
	}
	if _, ok = supported(hdr.Key, hdr.Version); ok {
		if hdr.Key != produceKey && len(frame) > requestBytesMax {
			// kmsg makes each array's elements up front, up to one per byte left: bound what a
			// request without records can make the node allocate.
			return hdr, req, ok, fmt.Errorf("kafka: a %s request of %d bytes, above %d", kmsg.NameForKey(hdr.Key),
				len(frame), requestBytesMax), nil
		}
		bodyErr = req.ReadFrom(rest)
	}
	return hdr, req, ok, bodyErr, nil
}

// ErrUnauthenticated is a request other than ApiVersions and SASL's before the connection
// authenticated on a cluster with a secret: the connection closes, as Kafka brokers close it.
var ErrUnauthenticated = errors.New("kafka: not authenticated")

// requestBytesMax bounds a request other than Produce (whose size the [client] frame bound limits).
const requestBytesMax = 256 << 10

// OnKafkaRequest implements shard.KafkaHandler.
func (h *Handler) OnKafkaRequest(s *shard.Shard, connID uint64, frame []byte) error {
	st := &h.shards[s.Index()]
	if c := st.conns[connID]; c != nil && c.rawSASL {
		return h.rawSASLToken(s, st, connID, c, frame)
	}
	hdr, req, ok, bodyErr, err := decodeRequest(frame)
	if err != nil {
		h.metrics.badHeaders.Inc()
		return err
	}
	c := st.conns[connID]
	if c == nil {
		c = &conn{authed: len(h.secret) == 0}
		st.conns[connID] = c
	}
	if !c.authed && !beforeAuth(hdr.Key) {
		h.metrics.unauthenticated.Inc()
		return fmt.Errorf("%w: %s before SASL authentication (the cluster has a secret)", ErrUnauthenticated,
			kmsg.NameForKey(hdr.Key))
	}
	r := &request{conn: connID, hdr: hdr}
	c.queue = append(c.queue, r)
	h.metrics.count(hdr.Key)
	r.waiting++ // the serve itself: an answer that comes during it cannot finish r early
	switch {
	case !ok:
		h.unsupported(r, req)
	case bodyErr != nil:
		h.invalid(r, req, bodyErr)
	default:
		h.serve(s, st, r, req)
	}
	r.waiting--
	h.settle(s, st, r)
	return nil
}

// settle finishes r once nothing is pending for it, and answers what is ready on its connection.
func (h *Handler) settle(s *shard.Shard, st *shardState, r *request) {
	for r.waiting == 0 && !r.done {
		if r.onDone == nil {
			r.done = true
			break
		}
		f := r.onDone
		r.onDone = nil
		r.waiting++ // as in OnKafkaRequest
		f(s, st, r)
		r.waiting--
	}
	h.flush(s, st, r.conn)
}

// flush answers the connection's requests that are done, in order.
func (h *Handler) flush(s *shard.Shard, st *shardState, connID uint64) {
	c := st.conns[connID]
	if c == nil {
		return
	}
	for len(c.queue) > 0 && (c.queue[0].done || c.queue[0].silent) {
		r := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		r.finished = true
		if r.silent {
			s.KafkaRespond(connID, nil)
			continue
		}
		if r.raw != nil {
			s.KafkaRespond(connID, r.raw)
			continue
		}
		if r.fetch != nil {
			trimFetch(r.fetch)
		}
		st.out = h.encode(st.out[:0], r)
		s.KafkaRespond(connID, st.out)
	}
}

// encode appends r's whole response: size, header, body.
func (h *Handler) encode(dst []byte, r *request) []byte {
	start := len(dst)
	// ApiVersions answers with response header v0 at every version (KIP-511), so that a client
	// that asked at a version we lack can read the answer.
	flexible := r.resp.IsFlexible() && r.hdr.Key != apiVersionsKey
	dst = appendResponseHeader(dst, r.hdr.CorrelationID, flexible)
	dst = r.resp.AppendTo(dst)
	return finishResponse(dst, start)
}

// OnKafkaReply implements shard.KafkaHandler.
func (h *Handler) OnKafkaReply(s *shard.Shard, req shard.ClientRequest, frame []byte) {
	st := &h.shards[s.Index()]
	c := st.calls[req.RequestID]
	if c == nil {
		h.metrics.orphanReplies.Inc()
		return
	}
	delete(st.calls, req.RequestID)
	var rep reply
	rep.h, rep.body, rep.err = wire.ParseFrame(frame)
	h.answer(s, st, c, &rep)
}

// answer hands a reply to its call and settles the Kafka request.
func (h *Handler) answer(s *shard.Shard, st *shardState, c *call, rep *reply) {
	r := c.r
	r.waiting--
	if r.finished && !r.silent {
		return // answered already, or its connection closed: nothing reads what is left
	}
	c.on(s, st, rep)
	h.settle(s, st, r)
}

// OnKafkaClosed implements shard.KafkaHandler.
func (h *Handler) OnKafkaClosed(s *shard.Shard, connID uint64) {
	st := &h.shards[s.Index()]
	if c := st.conns[connID]; c != nil {
		for _, r := range c.queue {
			r.finished = true
		}
		delete(st.conns, connID)
	}
}

// submit sends frame, a client request built with request id id, for r; on runs with its reply.
// stream is the stream the request addresses (0: none).
func (h *Handler) submit(s *shard.Shard, st *shardState, r *request, id, stream uint64, frame []byte,
	on func(s *shard.Shard, st *shardState, rep *reply)) {
	c := &call{r: r, on: on}
	r.waiting++
	st.calls[id] = c
	req := shard.ClientRequest{Shard: s.Index(), Conn: r.conn, RequestID: id, Stream: stream, Kafka: true}
	if err := s.SubmitClientRequest(req, frame); err != nil {
		delete(st.calls, id)
		h.metrics.submitRefused.Inc()
		r.waiting--
		on(s, st, &reply{err: fmt.Errorf("kafka: submit: %w", err)})
	}
}

// nextID is a request id for a client request of this shard's.
func (st *shardState) nextRequestID() uint64 {
	st.nextID++
	return st.nextID
}

// resolve finds the id of stream name (from the cache, or a lookup) and runs then with it, or with
// the Kafka error of the lookup.
func (h *Handler) resolve(s *shard.Shard, st *shardState, r *request, name []byte,
	then func(s *shard.Shard, st *shardState, id uint64, code int16, msg string)) {
	if id, ok := st.ids[string(name)]; ok {
		then(s, st, id, errNone, "")
		return
	}
	key := string(name)
	rid := st.nextRequestID()
	b := wire.AppendLookupStream(st.takeBuf(), h.from, &wire.LookupStream{RequestID: rid, Name: name})
	defer st.giveBuf(b)
	h.submit(s, st, r, rid, 0, b, func(s *shard.Shard, st *shardState, rep *reply) {
		if code, msg := rep.errorCode(); code != errNone {
			then(s, st, 0, code, msg)
			return
		}
		lr, err := wire.DecodeLookupStreamReply(&rep.h, rep.body)
		if err != nil {
			then(s, st, 0, errUnknownServer, err.Error())
			return
		}
		st.ids[key] = lr.Stream
		then(s, st, lr.Stream, errNone, "")
	})
}

// forget drops a cached stream id after the node said the stream is unknown.
func (st *shardState) forget(name string, code int16) {
	if code == errUnknownTopicOrPart {
		delete(st.ids, name)
	}
}
