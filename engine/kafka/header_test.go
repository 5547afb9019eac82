package kafka

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// requestFrame is req as a client sends it, its size prefix stripped: kmsg's request header (v1,
// or v2 with tagged fields for a flexible version) and body.
func requestFrame(req kmsg.Request, correlationID int32) []byte {
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("test"))
	return f.AppendRequest(nil, req, correlationID)[4:]
}

func TestDecodeRequest(t *testing.T) {
	meta := kmsg.NewPtrMetadataRequest()
	meta.SetVersion(9) // flexible: header v2
	topic := "orders"
	meta.Topics = []kmsg.MetadataRequestTopic{{Topic: &topic}}
	hdr, req, ok, bodyErr, err := decodeRequest(requestFrame(meta, 42))
	if err != nil || bodyErr != nil || !ok {
		t.Fatalf("metadata v9: ok %v, %v, %v", ok, bodyErr, err)
	}
	got := req.(*kmsg.MetadataRequest)
	if hdr.CorrelationID != 42 || string(hdr.ClientID) != "test" || len(got.Topics) != 1 || *got.Topics[0].Topic != "orders" {
		t.Fatalf("decoded %+v %+v", hdr, got)
	}

	prod := kmsg.NewPtrProduceRequest()
	prod.SetVersion(2) // below the versions served: not read, answered UNSUPPORTED_VERSION
	if _, _, ok, _, err := decodeRequest(requestFrame(prod, 1)); ok || err != nil {
		t.Fatalf("produce v2: ok %v, err %v", ok, err)
	}

	big := kmsg.NewPtrMetadataRequest()
	big.SetVersion(1)
	for range 40000 {
		big.Topics = append(big.Topics, kmsg.MetadataRequestTopic{Topic: &topic})
	}
	if _, _, ok, bodyErr, err := decodeRequest(requestFrame(big, 1)); !ok || bodyErr == nil || err != nil {
		t.Fatalf("metadata of %d bytes: ok %v, body %v, err %v", len(requestFrame(big, 1)), ok, bodyErr, err)
	}

	bad := func(frame []byte) {
		t.Helper()
		if _, _, _, _, err := decodeRequest(frame); !errors.Is(err, ErrBadHeader) {
			t.Errorf("% x: %v, want ErrBadHeader", frame, err)
		}
	}
	bad([]byte{0, 3, 0, 1, 0, 0, 0, 1, 0})                         // short
	bad([]byte{0, 3, 0xff, 0xff, 0, 0, 0, 1, 0xff, 0xff})          // negative version
	bad([]byte{0, 3, 0, 1, 0, 0, 0, 1, 0, 9, 'a'})                 // client id past the frame
	bad([]byte{0, 3, 0, 1, 0, 0, 0, 1, 0x80, 0})                   // client id length below -1
	bad([]byte{0x7f, 0, 0, 1, 0, 0, 0, 1, 0xff, 0xff})             // unknown api key
	bad([]byte{0, 3, 0, 9, 0, 0, 0, 1, 0xff, 0xff})                // flexible: no tagged fields
	bad([]byte{0, 3, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 1, 0, 5, 1})    // tagged field past the frame
	bad([]byte{0, 3, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 2, 1, 0, 1, 0}) // tags not ascending
	if h, _, err := parseHeaderFixed([]byte{0, 18, 0, 0, 0, 0, 0, 7, 0xff, 0xff}); err != nil || h.ClientID != nil ||
		h.CorrelationID != 7 {
		t.Fatalf("null client id: %+v %v", h, err)
	}
}

// The response header: size, correlation id, and one empty tagged-field byte for flexible versions.
func TestResponseHeader(t *testing.T) {
	b := appendResponseHeader([]byte{9}, 5, true)
	b = append(b, 1, 2, 3)
	b = finishResponse(b, 1)
	if size := binary.BigEndian.Uint32(b[1:]); size != 4+1+3 {
		t.Fatalf("size %d", size)
	}
	if id := int32(binary.BigEndian.Uint32(b[5:])); id != 5 || b[9] != 0 {
		t.Fatalf("header % x", b)
	}
	if got := appendResponseHeader(nil, 5, false); len(got) != 8 {
		t.Fatalf("v0 header % x", got)
	}
}

// Every advertised API and version is one kmsg has, and supported agrees with the table.
func TestApisAdvertised(t *testing.T) {
	resp := apiVersionsResponse(3)
	if len(resp.ApiKeys) != len(apis) {
		t.Fatalf("%d keys advertised, %d served", len(resp.ApiKeys), len(apis))
	}
	for _, a := range apis {
		req := kmsg.RequestForKey(a.key)
		if req == nil || a.max > req.MaxVersion() || a.min > a.max {
			t.Fatalf("api %d %d..%d", a.key, a.min, a.max)
		}
		if _, ok := supported(a.key, a.max+1); ok {
			t.Fatalf("api %d version %d supported", a.key, a.max+1)
		}
		if _, ok := supported(a.key, a.min); !ok {
			t.Fatalf("api %d version %d not supported", a.key, a.min)
		}
	}
	if _, ok := supported(26, 0); ok { // EndTxn: transactions are not served
		t.Fatal("EndTxn supported")
	}
	r := &request{hdr: requestHeader{Key: 26}}
	h := &Handler{metrics: mustMetrics(t)}
	h.unsupported(r, kmsg.RequestForKey(26))
	if r.resp.(*kmsg.EndTxnResponse).ErrorCode != errUnsupportedVersion {
		t.Fatal("EndTxn answered without UNSUPPORTED_VERSION")
	}
	r = &request{hdr: requestHeader{Key: apiVersionsKey, Version: 9}}
	h.unsupported(r, kmsg.RequestForKey(apiVersionsKey))
	if av := r.resp.(*kmsg.ApiVersionsResponse); av.ErrorCode != errUnsupportedVersion || av.Version != 0 || len(av.ApiKeys) != len(apis) {
		t.Fatalf("ApiVersions v9 answered %+v", av)
	}
}

func mustMetrics(t testing.TB) *metrics {
	m, err := newMetrics(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
