package wire_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/ringstream/ringstream/wire"
)

var (
	fromNode   = wire.From{Cluster: testCluster, Node: 2}
	fromClient = wire.From{Cluster: testCluster}
)

// decoded pairs a message with the list a decoder returns beside it, so round trips compare both.
type decoded struct {
	Msg  any
	List any
}

func logEpochsOf(l wire.LogEpochs) []wire.LogEpoch       { return l.AppendTo(nil) }
func historyOf(l wire.HistoryStarts) []wire.HistoryStart { return l.AppendTo(nil) }

func copiesOf(l wire.CopyTails) ([]wire.CopyTail, error) {
	var out []wire.CopyTail
	for i := 0; i < l.Len(); i++ {
		c, err := l.At(i)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

var testCursors = []wire.CursorInfo{{Consumer: []byte("audit"), Offset: 4160}, {Consumer: []byte("billing"), Offset: 17}}

func cursorsOf(l wire.CursorInfos) []wire.CursorInfo {
	var out []wire.CursorInfo
	for c, ok := l.Next(); ok; c, ok = l.Next() {
		out = append(out, c)
	}
	return out
}

func streamsOf(l wire.StreamInfos) []wire.StreamInfo {
	var out []wire.StreamInfo
	for s, ok := l.Next(); ok; s, ok = l.Next() {
		out = append(out, s)
	}
	return out
}

// commandCase is one command's round trip: encode builds a frame, decode reads it back, want is what
// decode must return. listBody says every byte of the body is structured, so any truncation of it must
// be refused (an opaque body cannot tell; the frame's checksum does).
type commandCase struct {
	name     string
	command  wire.Command
	encode   func(dst []byte) []byte
	decode   func(h *wire.Header, body []byte) (decoded, error)
	want     decoded
	listBody bool
}

var (
	authHandshake = wire.Handshake{Node: 2, Cluster: testCluster, Revision: wire.Revision, Shard: 1, ShardCount: 2,
		Nonce: wire.Nonce{1, 2, 3, 31: 4}, Proof: wire.Proof{9, 8, 7, 31: 6}}
	clientHello     = wire.ClientHello{RequestID: 11, Cluster: testCluster, Revision: wire.Revision, Nonce: wire.Nonce{5, 31: 5}}
	clientChallenge = wire.ClientChallenge{RequestID: 11, Cluster: testCluster, Revision: wire.Revision, Node: 3,
		Nonce: wire.Nonce{6, 31: 6}, Proof: wire.Proof{7, 31: 7}}
	clientProof = wire.ClientProof{RequestID: 11, Proof: wire.Proof{8, 31: 8}}
	testEpochs  = []wire.LogEpoch{{Epoch: 1, RecordStart: 0, CursorStart: 0}, {Epoch: 3, RecordStart: 100, CursorStart: 7}, {Epoch: 9, RecordStart: 1 << 40, CursorStart: 1 << 33}}
	testStarts  = []wire.HistoryStart{{Epoch: 2, Node: 1, RecordStart: 50, CursorStart: 4}, {Epoch: 5, Node: 65535, RecordStart: 90, CursorStart: 4}}
	testCopies  = []wire.CopyTail{
		{Stream: 11, Incarnation: 1, Epoch: 4, RecordTail: 1000, CursorTail: 20, Role: wire.RoleOwner},
		{Stream: 12, Incarnation: 2, Epoch: 4, RecordTail: 999, CursorTail: 19, Role: wire.RoleFollower},
		{Stream: 13, Incarnation: 3, Epoch: 5, RecordTail: 0, CursorTail: 0, Role: wire.RoleSealed},
	}
	testStreams = []wire.StreamInfo{
		{Stream: 1, Incarnation: 1, Copies: 3, Policy: wire.PolicyMajority, Name: []byte("orders")},
		{Stream: 7, Incarnation: 4, Copies: 5, Policy: wire.PolicyCount, ConfirmCount: 4, Name: []byte("evenements-u_1.2")},
		{Stream: 1 << 60, Incarnation: 0, Copies: 1, Policy: wire.PolicyAll, Name: bytes.Repeat([]byte("n"), wire.NameSizeMax)},
	}
)

func commandCases() []commandCase {
	prepare := wire.StreamPrepare{Stream: 77, Incarnation: 2, Epoch: 5, PrevEpoch: 4, Log: wire.LogRecords,
		BaseOffset: 1000, Count: 3, ConfirmedTail: 990, Batches: []byte("three opaque records")}
	prepareOK := wire.StreamPrepareOK{Stream: 77, Incarnation: 2, Epoch: 5, Status: wire.PrepareMismatch,
		Log: wire.LogCursors, RecordTail: 998, CursorTail: 40, BaseOffset: 4100}
	seal := wire.StreamSeal{Stream: 77, Incarnation: 2, FenceEpoch: 6, TransitionID: 0xDEADBEEF}
	sealReply := wire.StreamSealReply{Stream: 77, Incarnation: 2, FenceEpoch: 6, Status: wire.SealSealed,
		TransitionID: 0xDEADBEEF, RecordTail: 1003, CursorTail: 41, Digest: 0x0123456789ABCDEF}
	hb := wire.NodeHeartbeat{Sequence: 123456, Flags: wire.FlagShuttingDown}
	assignment := wire.StreamAssignment{Stream: 77, Incarnation: 2, Epoch: 6, Owner: 4, PolicyKind: 3,
		PolicyCount: 2, StartsVersion: 9, FollowerCount: 3, Followers: [wire.AssignmentFollowersMax]uint16{1, 5, 65535}}
	create := wire.CreateStream{RequestID: 1, Name: []byte("orders"), Copies: 3, Policy: wire.PolicyCount, ConfirmCount: 2}
	idReply := wire.StreamIDReply{RequestID: 1, Stream: 77, Incarnation: 2}
	nameReq := wire.StreamNameRequest{RequestID: 2, Name: []byte("orders")}
	lookup := wire.LookupStream{RequestID: 2, Name: []byte("orders"), AfterEpoch: 6, WaitMs: 2000}
	list := wire.ListStreams{RequestID: 3, After: 10, Limit: 100}
	listReply := wire.ListStreamsReply{RequestID: 3, More: true}
	lookupReply := wire.LookupStreamReply{RequestID: 4, Stream: 77, Incarnation: 2, Epoch: 6, Owner: 3, OwnerAddr: []byte("127.0.0.1:7003")}
	produce := wire.Produce{RequestID: 5, Stream: 77, Incarnation: 2, ProducerID: 99, Sequence: 12, Codec: 2, Format: 2, Count: 64, Batch: []byte("zstd frame")}
	produce.BatchSum, produce.BatchSummed = xxhash.Sum64(produce.Batch), true // what the decoder adds
	produceReply := wire.ProduceReply{RequestID: 5, Stream: 77, Incarnation: 2, Epoch: 6, BaseOffset: 4096, Count: 64, Duplicate: true}
	fetch := wire.Fetch{RequestID: 6, Stream: 77, Incarnation: 2, Offset: 4000, BytesMax: 1 << 20, RecordsMax: 500, WaitMs: 250}
	fetchReply := wire.FetchReply{RequestID: 6, Stream: 77, Incarnation: 2, BaseOffset: 4000, Count: 2, ConfirmedTail: 4160, Batches: []byte("two records")}
	commitCursor := wire.CursorRequest{RequestID: 7, Stream: 77, Incarnation: 2, Consumer: []byte("billing"), Offset: 4002}
	getCursor := wire.CursorRequest{RequestID: 8, Stream: 77, Incarnation: 2, Consumer: []byte("billing")}
	commitCursorReply := wire.CursorReply{RequestID: 7, Stream: 77, Incarnation: 2, Offset: 4002, Found: true}
	getCursorReply := wire.CursorReply{RequestID: 8, Stream: 77, Incarnation: 2}
	listCursors := wire.ListCursors{RequestID: 10, Stream: 77, Incarnation: 2, From: []byte("billing"), After: true, Limit: 500}
	listCursorsReply := wire.ListCursorsReply{RequestID: 10, Stream: 77, Incarnation: 2, ConfirmedTail: 4160, Head: 12, Total: 5, More: true}
	deleteCursor := wire.CursorRequest{RequestID: 11, Stream: 77, Incarnation: 2, Consumer: []byte("billing")}
	deleteCursorReply := wire.CursorReply{RequestID: 11, Stream: 77, Incarnation: 2, Offset: 4002, Found: true}
	batchNames, err := wire.StreamNamesOf([][]byte{[]byte("a.0"), []byte("a.1"), bytes.Repeat([]byte("z"), wire.NameSizeMax)})
	if err != nil {
		panic(err)
	}
	creates := wire.CreateStreams{RequestID: 12, Copies: 3, Policy: wire.PolicyMajority, Names: batchNames}
	deletes := wire.DeleteStreams{RequestID: 13, Names: batchNames}
	streamsReply := wire.StreamsReply{RequestID: 12}
	outcomes := []wire.StreamOutcome{{Stream: 5, Incarnation: 1, Message: []byte{}},
		{Code: wire.CodeStreamExists, Stream: 6, Incarnation: 2, Message: []byte("a stream is named \"a.1\" already")},
		{Code: wire.CodeUnavailable, Message: []byte("no nodes")}}
	errReply := wire.ErrorReply{RequestID: 9, Stream: 77, Code: wire.CodeNotOwner, Owner: 3, Message: []byte("node 2 does not own stream 77; owner is node 3")}
	one := func(f func(h *wire.Header, body []byte) (any, error)) func(h *wire.Header, body []byte) (decoded, error) {
		return func(h *wire.Header, body []byte) (decoded, error) {
			m, err := f(h, body)
			return decoded{Msg: m}, err
		}
	}
	return []commandCase{
		{"handshake", wire.CommandHandshake,
			func(d []byte) []byte {
				return wire.AppendHandshake(d, wire.Handshake{Node: 2, Cluster: testCluster, Revision: wire.Revision, Shard: 1, ShardCount: 2})
			},
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeHandshake(h, b) }),
			decoded{Msg: wire.Handshake{Node: 2, Cluster: testCluster, Revision: wire.Revision, Shard: 1, ShardCount: 2}}, true},
		{"authenticated handshake", wire.CommandHandshake,
			func(d []byte) []byte { return wire.AppendHandshake(d, authHandshake) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeHandshake(h, b) }),
			decoded{Msg: authHandshake}, false},
		{"handshake proof", wire.CommandHandshakeProof,
			func(d []byte) []byte { return wire.AppendHandshakeProof(d, testCluster, 2, authHandshake.Proof) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeHandshakeProof(h, b) }),
			decoded{Msg: authHandshake.Proof}, false},
		{"client hello", wire.CommandClientHello,
			func(d []byte) []byte { return wire.AppendClientHello(d, &clientHello) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeClientHello(h, b) }),
			decoded{Msg: clientHello}, false},
		{"client challenge", wire.CommandClientChallenge,
			func(d []byte) []byte { return wire.AppendClientChallenge(d, &clientChallenge) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeClientChallenge(h, b) }),
			decoded{Msg: clientChallenge}, false},
		{"client proof", wire.CommandClientProof,
			func(d []byte) []byte { return wire.AppendClientProof(d, testCluster, &clientProof) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeClientProof(h, b) }),
			decoded{Msg: clientProof}, false},
		{"commit batch", wire.CommandCommit,
			func(d []byte) []byte { return wire.AppendCommitBatch(d, testCluster, 2, commitEntries(5)) },
			func(h *wire.Header, b []byte) (decoded, error) {
				batch, err := wire.DecodeCommitBatch(h, b)
				if err != nil {
					return decoded{}, err
				}
				var c collector
				batch.Each(&c)
				return decoded{List: c.commits}, nil
			},
			decoded{List: commitEntries(5)}, true},
		{"commit reply batch", wire.CommandCommitReply,
			func(d []byte) []byte { return wire.AppendCommitReplyBatch(d, testCluster, 2, commitReplyEntries(5)) },
			func(h *wire.Header, b []byte) (decoded, error) {
				batch, err := wire.DecodeCommitReplyBatch(h, b)
				if err != nil {
					return decoded{}, err
				}
				var c collector
				batch.Each(&c)
				return decoded{List: c.replies}, nil
			},
			decoded{List: commitReplyEntries(5)}, true},
		{"stream prepare", wire.CommandStreamPrepare,
			func(d []byte) []byte { return wire.AppendStreamPrepare(d, fromNode, &prepare) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeStreamPrepare(h, b) }),
			decoded{Msg: prepare}, false},
		{"stream prepare ok", wire.CommandStreamPrepareOK,
			func(d []byte) []byte { return wire.AppendStreamPrepareOK(d, fromNode, &prepareOK, testEpochs) },
			func(h *wire.Header, b []byte) (decoded, error) {
				m, l, err := wire.DecodeStreamPrepareOK(h, b)
				return decoded{m, logEpochsOf(l)}, err
			},
			decoded{prepareOK, testEpochs}, true},
		{"stream seal", wire.CommandStreamSeal,
			func(d []byte) []byte { return wire.AppendStreamSeal(d, fromNode, &seal, testStarts) },
			func(h *wire.Header, b []byte) (decoded, error) {
				m, l, err := wire.DecodeStreamSeal(h, b)
				return decoded{m, historyOf(l)}, err
			},
			decoded{seal, testStarts}, true},
		{"stream seal reply", wire.CommandStreamSealReply,
			func(d []byte) []byte { return wire.AppendStreamSealReply(d, fromNode, &sealReply, testEpochs) },
			func(h *wire.Header, b []byte) (decoded, error) {
				m, l, err := wire.DecodeStreamSealReply(h, b)
				return decoded{m, logEpochsOf(l)}, err
			},
			decoded{sealReply, testEpochs}, true},
		{"node heartbeat", wire.CommandNodeHeartbeat,
			func(d []byte) []byte { return wire.AppendNodeHeartbeat(d, fromNode, &hb, testCopies) },
			func(h *wire.Header, b []byte) (decoded, error) {
				m, l, err := wire.DecodeNodeHeartbeat(h, b)
				if err != nil {
					return decoded{}, err
				}
				copies, err := copiesOf(l)
				return decoded{m, copies}, err
			},
			decoded{hb, testCopies}, true},
		{"create stream", wire.CommandCreateStream,
			func(d []byte) []byte { return wire.AppendCreateStream(d, fromClient, &create) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeCreateStream(h, b) }),
			decoded{Msg: create}, false},
		{"create stream reply", wire.CommandCreateStreamReply,
			func(d []byte) []byte { return wire.AppendCreateStreamReply(d, fromNode, &idReply) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeCreateStreamReply(h, b) }),
			decoded{Msg: idReply}, true},
		{"delete stream", wire.CommandDeleteStream,
			func(d []byte) []byte { return wire.AppendDeleteStream(d, fromClient, &nameReq) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeDeleteStream(h, b) }),
			decoded{Msg: nameReq}, false},
		{"delete stream reply", wire.CommandDeleteStreamReply,
			func(d []byte) []byte { return wire.AppendDeleteStreamReply(d, fromNode, &idReply) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeDeleteStreamReply(h, b) }),
			decoded{Msg: idReply}, true},
		{"list streams", wire.CommandListStreams,
			func(d []byte) []byte { return wire.AppendListStreams(d, fromClient, &list) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeListStreams(h, b) }),
			decoded{Msg: list}, true},
		{"list streams reply", wire.CommandListStreamsReply,
			func(d []byte) []byte { return wire.AppendListStreamsReply(d, fromNode, &listReply, testStreams) },
			func(h *wire.Header, b []byte) (decoded, error) {
				m, l, err := wire.DecodeListStreamsReply(h, b)
				return decoded{m, streamsOf(l)}, err
			},
			decoded{listReply, testStreams}, true},
		{"lookup stream", wire.CommandLookupStream,
			func(d []byte) []byte { return wire.AppendLookupStream(d, fromClient, &lookup) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeLookupStream(h, b) }),
			decoded{Msg: lookup}, false},
		{"lookup stream reply", wire.CommandLookupStreamReply,
			func(d []byte) []byte { return wire.AppendLookupStreamReply(d, fromNode, &lookupReply) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeLookupStreamReply(h, b) }),
			decoded{Msg: lookupReply}, false},
		{"produce", wire.CommandProduce,
			func(d []byte) []byte { return wire.AppendProduce(d, fromClient, &produce) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeProduce(h, b) }),
			decoded{Msg: produce}, false},
		{"produce reply", wire.CommandProduceReply,
			func(d []byte) []byte { return wire.AppendProduceReply(d, fromNode, &produceReply) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeProduceReply(h, b) }),
			decoded{Msg: produceReply}, true},
		{"fetch", wire.CommandFetch,
			func(d []byte) []byte { return wire.AppendFetch(d, fromClient, &fetch) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeFetch(h, b) }),
			decoded{Msg: fetch}, true},
		{"fetch reply", wire.CommandFetchReply,
			func(d []byte) []byte { return wire.AppendFetchReply(d, fromNode, &fetchReply) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeFetchReply(h, b) }),
			decoded{Msg: fetchReply}, false},
		{"commit cursor", wire.CommandCommitCursor,
			func(d []byte) []byte { return wire.AppendCommitCursor(d, fromClient, &commitCursor) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeCommitCursor(h, b) }),
			decoded{Msg: commitCursor}, false},
		{"commit cursor reply", wire.CommandCommitCursorReply,
			func(d []byte) []byte { return wire.AppendCommitCursorReply(d, fromNode, &commitCursorReply) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeCommitCursorReply(h, b) }),
			decoded{Msg: commitCursorReply}, true},
		{"get cursor", wire.CommandGetCursor,
			func(d []byte) []byte { return wire.AppendGetCursor(d, fromClient, &getCursor) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeGetCursor(h, b) }),
			decoded{Msg: getCursor}, false},
		{"get cursor reply", wire.CommandGetCursorReply,
			func(d []byte) []byte { return wire.AppendGetCursorReply(d, fromNode, &getCursorReply) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeGetCursorReply(h, b) }),
			decoded{Msg: getCursorReply}, true},
		{"list cursors", wire.CommandListCursors,
			func(d []byte) []byte { return wire.AppendListCursors(d, fromClient, &listCursors) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeListCursors(h, b) }),
			decoded{Msg: listCursors}, false},
		{"list cursors reply", wire.CommandListCursorsReply,
			func(d []byte) []byte {
				return wire.AppendListCursorsReply(d, fromNode, &listCursorsReply, testCursors)
			},
			func(h *wire.Header, b []byte) (decoded, error) {
				m, l, err := wire.DecodeListCursorsReply(h, b)
				return decoded{m, cursorsOf(l)}, err
			},
			decoded{listCursorsReply, testCursors}, true},
		{"delete cursor", wire.CommandDeleteCursor,
			func(d []byte) []byte { return wire.AppendDeleteCursor(d, fromClient, &deleteCursor) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeDeleteCursor(h, b) }),
			decoded{Msg: deleteCursor}, false},
		{"delete cursor reply", wire.CommandDeleteCursorReply,
			func(d []byte) []byte { return wire.AppendDeleteCursorReply(d, fromNode, &deleteCursorReply) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeDeleteCursorReply(h, b) }),
			decoded{Msg: deleteCursorReply}, true},
		{"create streams", wire.CommandCreateStreams,
			func(d []byte) []byte { return wire.AppendCreateStreams(d, fromClient, &creates) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeCreateStreams(h, b) }),
			decoded{Msg: creates}, true},
		{"create streams reply", wire.CommandCreateStreamsReply,
			func(d []byte) []byte { return wire.AppendCreateStreamsReply(d, fromNode, &streamsReply, outcomes) },
			func(h *wire.Header, b []byte) (decoded, error) {
				m, l, err := wire.DecodeCreateStreamsReply(h, b)
				return decoded{m, l}, err
			},
			decoded{streamsReply, outcomes}, true},
		{"delete streams", wire.CommandDeleteStreams,
			func(d []byte) []byte { return wire.AppendDeleteStreams(d, fromClient, &deletes) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeDeleteStreams(h, b) }),
			decoded{Msg: deletes}, true},
		{"delete streams reply", wire.CommandDeleteStreamsReply,
			func(d []byte) []byte { return wire.AppendDeleteStreamsReply(d, fromNode, &streamsReply, outcomes) },
			func(h *wire.Header, b []byte) (decoded, error) {
				m, l, err := wire.DecodeDeleteStreamsReply(h, b)
				return decoded{m, l}, err
			},
			decoded{streamsReply, outcomes}, true},
		{"error reply", wire.CommandErrorReply,
			func(d []byte) []byte { return wire.AppendErrorReply(d, fromNode, &errReply) },
			one(func(h *wire.Header, b []byte) (any, error) { return wire.DecodeErrorReply(h, b) }),
			decoded{Msg: errReply}, false},
		{"stream assignment", wire.CommandStreamAssignment,
			func(d []byte) []byte { return wire.AppendStreamAssignment(d, fromNode, &assignment, testStarts) },
			func(h *wire.Header, b []byte) (decoded, error) {
				m, l, err := wire.DecodeStreamAssignment(h, b)
				return decoded{m, historyOf(l)}, err
			},
			decoded{assignment, testStarts}, true},
	}
}

// TestEveryCommandRoundTrips encodes every command after some bytes already in the buffer, parses the
// frame and decodes it back to the same values.
func TestEveryCommandRoundTrips(t *testing.T) {
	seen := map[wire.Command]bool{}
	for _, c := range commandCases() {
		t.Run(c.name, func(t *testing.T) {
			prefix := []byte("earlier frame bytes")
			out := c.encode(bytes.Clone(prefix))
			if !bytes.Equal(out[:len(prefix)], prefix) {
				t.Fatal("encoder changed the bytes before its frame")
			}
			h, body := parse(t, out[len(prefix):])
			if h.Command != c.command {
				t.Fatalf("command %v, want %v", h.Command, c.command)
			}
			got, err := c.decode(&h, body)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("round trip\n got %+v\nwant %+v", got, c.want)
			}
			seen[c.command] = true
		})
	}
	// Every command this package defines outside the VSR range has a case.
	for c := wire.Command(1); c < 100; c++ {
		if c.Known() && !(c >= wire.CommandVSRMin && c <= wire.CommandVSRMax) && !seen[c] {
			t.Errorf("no round trip for %v", c)
		}
	}
}

// TestEveryCommandFlippedBitCaught flips each bit of each command's frame; ParseFrame must refuse all.
func TestEveryCommandFlippedBitCaught(t *testing.T) {
	for _, c := range commandCases() {
		frame := c.encode(nil)
		for i := range frame {
			for bit := 0; bit < 8; bit++ {
				frame[i] ^= 1 << bit
				_, _, err := wire.ParseFrame(frame)
				frame[i] ^= 1 << bit
				if !errors.Is(err, wire.ErrChecksum) {
					t.Fatalf("%s: byte %d bit %d: got %v", c.name, i, bit, err)
				}
			}
		}
	}
}

// TestEveryDecoderTruncated cuts each frame and each body at every length: ParseFrame refuses every
// cut frame, and decoders given a cut body never panic and refuse it when the body is structured.
func TestEveryDecoderTruncated(t *testing.T) {
	for _, c := range commandCases() {
		frame := c.encode(nil)
		for n := 0; n < len(frame); n++ {
			if _, _, err := wire.ParseFrame(frame[:n]); !errors.Is(err, wire.ErrShortFrame) {
				t.Fatalf("%s: frame cut at %d: got %v", c.name, n, err)
			}
		}
		h, body := parse(t, frame)
		for n := 0; n < len(body); n++ {
			_, err := c.decode(&h, body[:n])
			if c.listBody && err == nil {
				t.Fatalf("%s: body cut at %d accepted", c.name, n)
			}
		}
	}
}

// TestEveryDecoderChecksCommandAndArea: a decoder refuses another command's frame, and a set byte at
// the end of the per-command area (which no command uses).
func TestEveryDecoderChecksCommandAndArea(t *testing.T) {
	for _, c := range commandCases() {
		h, body := parse(t, c.encode(nil))
		other := h
		if other.Command == wire.CommandErrorReply {
			other.Command = wire.CommandFetch
		} else {
			other.Command = wire.CommandErrorReply
		}
		if _, err := c.decode(&other, body); !errors.Is(err, wire.ErrCommand) {
			t.Errorf("%s: decoder took %v: %v", c.name, other.Command, err)
		}
		spoiled := h
		spoiled.Area[wire.AreaSize-1] = 1
		if _, err := c.decode(&spoiled, body); !errors.Is(err, wire.ErrReserved) {
			t.Errorf("%s: area byte set: got %v", c.name, err)
		}
	}
}

// TestDecodersRefuseBadFields changes one field at a time to a value its command forbids.
func TestDecodersRefuseBadFields(t *testing.T) {
	prepare := func(mut func(m *wire.StreamPrepare)) error {
		m := wire.StreamPrepare{Stream: 1, Epoch: 2, PrevEpoch: 1, Log: wire.LogRecords, BaseOffset: 5, Count: 1, Batches: []byte{1}}
		mut(&m)
		h, body, err := wire.ParseFrame(wire.AppendStreamPrepare(nil, fromNode, &m))
		if err != nil {
			return err
		}
		_, err = wire.DecodeStreamPrepare(&h, body)
		return err
	}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"prepare epoch 0", prepare(func(m *wire.StreamPrepare) { m.Epoch, m.PrevEpoch = 0, 0 }), wire.ErrMalformed},
		{"prepare prev after epoch", prepare(func(m *wire.StreamPrepare) { m.PrevEpoch = 3 }), wire.ErrMalformed},
		{"prepare prev at offset 0", prepare(func(m *wire.StreamPrepare) { m.BaseOffset = 0 }), wire.ErrMalformed},
		{"prepare offset overflow", prepare(func(m *wire.StreamPrepare) { m.BaseOffset = 1<<64 - 1 }), wire.ErrMalformed},
		{"prepare good", prepare(func(m *wire.StreamPrepare) {}), nil},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) || (c.want == nil && c.err != nil) {
			t.Errorf("%s: got %v, want %v", c.name, c.err, c.want)
		}
	}

	// Lists: out-of-order epochs, reserved bytes, a history start at the fence.
	seal := wire.StreamSeal{Stream: 1, FenceEpoch: 5, TransitionID: 1}
	frame := wire.AppendStreamSeal(nil, fromNode, &seal, []wire.HistoryStart{{Epoch: 4, Node: 1}})
	h, body := parse(t, frame)
	h.Area[0] = 4 // fence epoch 4: the start at epoch 4 is not below it
	if _, _, err := wire.DecodeStreamSeal(&h, body); !errors.Is(err, wire.ErrMalformed) {
		t.Errorf("start at the fence: got %v", err)
	}
	frame = wire.AppendStreamSealReply(nil, fromNode, &wire.StreamSealReply{Stream: 1, Status: wire.SealStale}, testEpochs)
	h, body = parse(t, frame)
	body = bytes.Clone(body)
	copy(body[24:28], body[0:4]) // second epoch equal to the first
	if _, _, err := wire.DecodeStreamSealReply(&h, body); !errors.Is(err, wire.ErrMalformed) {
		t.Errorf("epochs out of order: got %v", err)
	}
	h, body = parse(t, frame)
	body = bytes.Clone(body)
	body[4] = 1
	if _, _, err := wire.DecodeStreamSealReply(&h, body); !errors.Is(err, wire.ErrEntryReserved) {
		t.Errorf("log epoch reserved: got %v", err)
	}

	// Client names and codes.
	create := wire.CreateStream{RequestID: 1, Name: []byte("x"), Copies: 1, Policy: wire.PolicyMajority}
	h, _ = parse(t, wire.AppendCreateStream(nil, fromClient, &create))
	for _, name := range [][]byte{nil, []byte("a\x00b"), []byte("\xff\xfe"), bytes.Repeat([]byte("n"), wire.NameSizeMax+1)} {
		if _, err := wire.DecodeCreateStream(&h, name); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("name %q: got %v", name, err)
		}
	}
	h.Area[10] = 2 // a confirm count with the majority policy
	if _, err := wire.DecodeCreateStream(&h, []byte("x")); !errors.Is(err, wire.ErrMalformed) {
		t.Errorf("count without PolicyCount: got %v", err)
	}
	h, body = parse(t, wire.AppendErrorReply(nil, fromNode, &wire.ErrorReply{Code: wire.CodeInternal}))
	h.Area[8] = 0
	if _, err := wire.DecodeErrorReply(&h, body); !errors.Is(err, wire.ErrMalformed) {
		t.Errorf("error code 0: got %v", err)
	}
	h, body = parse(t, wire.AppendErrorReply(nil, fromNode, &wire.ErrorReply{Code: wire.CodeInternal}))
	h.Area[10] = 3 // an owner on a refusal that is not CodeNotOwner
	if _, err := wire.DecodeErrorReply(&h, body); !errors.Is(err, wire.ErrMalformed) {
		t.Errorf("owner without CodeNotOwner: got %v", err)
	}
	h, body = parse(t, wire.AppendFetchReply(nil, fromNode, &wire.FetchReply{Stream: 1, BaseOffset: 10, Count: 1, ConfirmedTail: 11, Batches: []byte{1}}))
	h.Area[16] = 10 // confirmed tail 10: the record at 10 is not confirmed
	if _, err := wire.DecodeFetchReply(&h, body); !errors.Is(err, wire.ErrMalformed) {
		t.Errorf("record past the confirmed tail: got %v", err)
	}
}

// TestNodeHeartbeatBadCopySkipped: one bad copy entry is reported alone and the others still read.
func TestNodeHeartbeatBadCopySkipped(t *testing.T) {
	for i, spoil := range []struct {
		off    int
		val    byte
		reason error
	}{{0, 0, wire.ErrEntryGroup}, {32, 4, wire.ErrEntryRole}, {39, 1, wire.ErrEntryReserved}} {
		frame := wire.AppendNodeHeartbeat(nil, fromNode, &wire.NodeHeartbeat{Sequence: 1}, testCopies)
		entry := frame[wire.HeaderSize+wire.CopyTailSize:]
		if spoil.off == 0 {
			clear(entry[:8])
		} else {
			entry[spoil.off] = spoil.val
		}
		refreshChecksums(frame)
		h, body := parse(t, frame)
		_, copies, err := wire.DecodeNodeHeartbeat(&h, body)
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < copies.Len(); j++ {
			c, err := copies.At(j)
			if j == 1 {
				if !errors.Is(err, spoil.reason) || !errors.Is(err, wire.ErrBadEntry) {
					t.Errorf("case %d: got %v, want %v", i, err, spoil.reason)
				}
				continue
			}
			if err != nil || c != testCopies[j] {
				t.Errorf("case %d: copy %d: %+v %v", i, j, c, err)
			}
		}
	}
}

func ExampleBatchWriter() {
	var w wire.BatchWriter
	outbox := make([]byte, 0, 4096)
	outbox = w.Begin(outbox, wire.CommandCommit, 1, 2)
	outbox = w.AppendCommit(outbox, wire.CommitEntry{Group: 10, View: 1, Commit: 5, HeartbeatState: wire.HeartbeatBusy})
	outbox = w.AppendCommit(outbox, wire.CommitEntry{Group: 11, View: 1, Commit: 9, HeartbeatState: wire.HeartbeatEager})
	outbox = w.End(outbox)
	fmt.Println(len(outbox), w.Count())
	// Output: 336 2
}
