package wire_test

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/ringstream/ringstream/wire"
)

func TestHandshakeRoundTrip(t *testing.T) {
	hs := wire.Handshake{Node: 65535, Cluster: testCluster, Revision: wire.Revision, Shard: 3, ShardCount: 4}
	frame := wire.AppendHandshake(nil, hs)
	h, body := parse(t, frame)
	got, err := wire.DecodeHandshake(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	if got != hs {
		t.Fatalf("got %+v want %+v", got, hs)
	}
	if err := got.Check(testCluster); err != nil {
		t.Fatal(err)
	}
}

// TestR18_Revision1Refused: a peer on revision 1 is refused, and the error says it is the revision.
func TestR18_Revision1Refused(t *testing.T) {
	hs := wire.Handshake{Node: 9, Cluster: testCluster, Revision: 1}
	err := hs.Check(testCluster)
	if !errors.Is(err, wire.ErrRevision) || errors.Is(err, wire.ErrForeignCluster) {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(err.Error(), "node 9 speaks wire revision 1") {
		t.Fatalf("message does not say which: %q", err)
	}
	// A whole frame whose header says revision 1 is refused by ParseFrame already.
	frame := wire.AppendHandshake(nil, hs)
	binary.LittleEndian.PutUint16(frame[48:], 1)
	binary.LittleEndian.PutUint64(frame[0:], xxhash.Sum64(frame[8:wire.HeaderSize]))
	if _, _, err := wire.ParseFrame(frame); !errors.Is(err, wire.ErrRevision) {
		t.Fatalf("frame on revision 1: got %v", err)
	}
}

// TestR18_ForeignClusterRefused: a peer of another cluster is refused, and the error says so.
func TestR18_ForeignClusterRefused(t *testing.T) {
	hs := wire.Handshake{Node: 4, Cluster: 0xBAD, Revision: wire.Revision}
	frame := wire.AppendHandshake(nil, hs)
	h, body := parse(t, frame)
	got, err := wire.DecodeHandshake(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	err = got.Check(testCluster)
	if !errors.Is(err, wire.ErrForeignCluster) || errors.Is(err, wire.ErrRevision) {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(err.Error(), "cluster 0xbad") {
		t.Fatalf("message does not say which: %q", err)
	}
}

func TestHandshakeInconsistentRefused(t *testing.T) {
	frame := wire.AppendHandshake(nil, wire.Handshake{Node: 4, Cluster: testCluster, Revision: wire.Revision})
	h, body := parse(t, frame)
	for name, mutate := range map[string]func(h *wire.Header){
		"node differs":    func(h *wire.Header) { h.Sender = 5 },
		"cluster differs": func(h *wire.Header) { h.Cluster++ },
		"shard range":     func(h *wire.Header) { h.Area[4] = 2; h.Area[6] = 2 },
	} {
		hh := h
		mutate(&hh)
		if _, err := wire.DecodeHandshake(&hh, body); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("%s: got %v", name, err)
		}
	}
	hh := h
	hh.Area[100] = 1
	if _, err := wire.DecodeHandshake(&hh, body); !errors.Is(err, wire.ErrReserved) {
		t.Errorf("area: got %v", err)
	}
	if _, err := wire.DecodeHandshake(&h, []byte{0}); !errors.Is(err, wire.ErrTrailingBytes) {
		t.Errorf("body: got %v", err)
	}
	if err := (wire.Handshake{Revision: wire.Revision, Cluster: testCluster}).Check(testCluster); !errors.Is(err, wire.ErrSender) {
		t.Errorf("node 0: got %v", err)
	}
}
