package kafka

import (
	"reflect"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringstream/ringstream/shard"
)

// Api keys this listener serves.
const (
	produceKey      int16 = 0
	fetchKey        int16 = 1
	listOffsetsKey  int16 = 2
	metadataKey     int16 = 3
	apiVersionsKey  int16 = 18
	createTopicsKey int16 = 19
	deleteTopicsKey int16 = 20
)

// api is one served Kafka API and the versions advertised.
type api struct {
	key, min, max int16
}

// apis are the APIs and versions this listener implements, advertised exactly by ApiVersions.
// The lower bounds: Produce 3 and Fetch 4 are the first versions that carry record batches of
// magic 2, ListOffsets 1 the first with one offset per partition, SaslHandshake 0 takes the bare
// token after it (rawSASLToken). The upper bounds stop before topic ids (Metadata 10, Fetch 13,
// CreateTopics 7, DeleteTopics 6) and before fields this listener does not fill (Produce 10's
// current-leader hints; 9 is the last flexible version without them).
var apis = [...]api{
	{produceKey, 3, 9},
	{fetchKey, 4, 11},
	{listOffsetsKey, 1, 6},
	{metadataKey, 0, 9},
	{apiVersionsKey, 0, 3},
	{createTopicsKey, 0, 6},
	{deleteTopicsKey, 0, 5},
	{saslHandshakeKey, 0, 1},
	{saslAuthenticateKey, 0, 2},
	{initProducerIDKey, 0, 4},
	groupAPIs[0], groupAPIs[1], groupAPIs[2], groupAPIs[3], groupAPIs[4], groupAPIs[5], groupAPIs[6], groupAPIs[7], groupAPIs[8],
}

// serve serves a decoded request of a supported API and version.
func (h *Handler) serve(s *shard.Shard, st *shardState, r *request, req kmsg.Request) {
	switch r.hdr.Key {
	case produceKey:
		serveProduce(h, s, st, r, req)
	case fetchKey:
		serveFetch(h, s, st, r, req)
	case listOffsetsKey:
		serveListOffsets(h, s, st, r, req)
	case metadataKey:
		serveMetadata(h, s, st, r, req)
	case apiVersionsKey:
		serveApiVersions(h, s, st, r, req)
	case createTopicsKey:
		serveCreateTopics(h, s, st, r, req)
	case deleteTopicsKey:
		serveDeleteTopics(h, s, st, r, req)
	case saslHandshakeKey:
		serveSASLHandshake(h, s, st, r, req)
	case saslAuthenticateKey:
		serveSASLAuthenticate(h, s, st, r, req)
	case initProducerIDKey:
		serveInitProducerID(h, s, st, r, req)
	default:
		h.serveGroup(s, st, r, req)
	}
}

// supported returns the API of key when version is one this listener serves.
func supported(key, version int16) (api, bool) {
	for _, a := range apis {
		if a.key == key {
			return a, version >= a.min && version <= a.max
		}
	}
	return api{}, false
}

// unsupported answers a request of an API or version this listener does not serve: ApiVersions
// at version 0 with UNSUPPORTED_VERSION and the APIs served (so the client can pick a version,
// KIP-511); any other API with its response at the version asked (kmsg's highest when the
// client asked above it), UNSUPPORTED_VERSION in its top-level error code where it has one, and
// empty otherwise.
func (h *Handler) unsupported(r *request, req kmsg.Request) {
	h.metrics.unsupported.Inc()
	if r.hdr.Key == apiVersionsKey {
		resp := apiVersionsResponse(0)
		resp.ErrorCode = errUnsupportedVersion
		r.resp = resp
		return
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	setErrorCode(resp, errUnsupportedVersion)
	r.resp = resp
}

// invalid answers a request whose body does not decode at its version: its response with
// INVALID_REQUEST in the top-level error code where it has one.
func (h *Handler) invalid(r *request, req kmsg.Request, err error) {
	h.metrics.invalid.Inc()
	h.log.Debug("kafka: request body does not decode", "api", kmsg.NameForKey(r.hdr.Key), "version", r.hdr.Version,
		"err", err)
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	setErrorCode(resp, errInvalidRequest)
	r.resp = resp
}

// setErrorCode sets a response's top-level ErrorCode field, when it has one.
func setErrorCode(resp kmsg.Response, code int16) {
	v := reflect.ValueOf(resp)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return
	}
	if f := v.Elem().FieldByName("ErrorCode"); f.IsValid() && f.Kind() == reflect.Int16 && f.CanSet() {
		f.SetInt(int64(code))
	}
}

func apiVersionsResponse(version int16) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(version)
	for _, a := range apis {
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = a.key, a.min, a.max
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	return resp
}

func serveApiVersions(h *Handler, _ *shard.Shard, _ *shardState, r *request, req kmsg.Request) {
	r.resp = apiVersionsResponse(req.GetVersion())
}
