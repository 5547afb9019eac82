package wire_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

// Fuzz targets: one per decoder, one for ParseFrame and one for FrameReader. The seed corpora live in
// testdata/fuzz/<target>/ and are written by TestWriteFuzzSeeds (WIRE_WRITE_FUZZ_SEEDS=1).
//
// A decoder's target reads the first HeaderSize bytes as a header without checking its checksums (so
// the fuzzer reaches the decoder instead of stopping at ParseFrame), sets the command, and decodes the
// rest as the body. It must never panic, and whatever it accepts must survive encode and decode
// unchanged: a decoder accepts nothing its encoder would assert on.

// plausibleHeader reports whether h passes the header rules ParseHeader enforces before a decoder runs.
func plausibleHeader(h *wire.Header) bool {
	if h.Sender == 0 && !h.Command.Client() {
		return false
	}
	return !h.Command.NodeLevel() || (h.Group == 0 && h.Incarnation == 0)
}

// reencode encodes a decoded message again, as the node that relays it would.
func reencode(c wire.Command, d decoded, h *wire.Header) []byte {
	from := wire.From{Cluster: h.Cluster, Node: h.Sender}
	switch m := d.Msg.(type) {
	case wire.Handshake:
		return wire.AppendHandshake(nil, m)
	case wire.Proof:
		return wire.AppendHandshakeProof(nil, h.Cluster, h.Sender, m)
	case wire.ClientHello:
		return wire.AppendClientHello(nil, &m)
	case wire.ClientChallenge:
		return wire.AppendClientChallenge(nil, &m)
	case wire.ClientProof:
		return wire.AppendClientProof(nil, h.Cluster, &m)
	case wire.StreamPrepare:
		return wire.AppendStreamPrepare(nil, from, &m)
	case wire.StreamPrepareOK:
		return wire.AppendStreamPrepareOK(nil, from, &m, d.List.([]wire.LogEpoch))
	case wire.StreamSeal:
		return wire.AppendStreamSeal(nil, from, &m, d.List.([]wire.HistoryStart))
	case wire.StreamSealReply:
		return wire.AppendStreamSealReply(nil, from, &m, d.List.([]wire.LogEpoch))
	case wire.StreamAssignment:
		return wire.AppendStreamAssignment(nil, from, &m, d.List.([]wire.HistoryStart))
	case wire.NodeHeartbeat:
		return wire.AppendNodeHeartbeat(nil, from, &m, d.List.([]wire.CopyTail))
	case wire.CreateStream:
		return wire.AppendCreateStream(nil, from, &m)
	case wire.StreamIDReply:
		if c == wire.CommandCreateStreamReply {
			return wire.AppendCreateStreamReply(nil, from, &m)
		}
		return wire.AppendDeleteStreamReply(nil, from, &m)
	case wire.StreamNameRequest:
		return wire.AppendDeleteStream(nil, from, &m)
	case wire.LookupStream:
		return wire.AppendLookupStream(nil, from, &m)
	case wire.ListStreams:
		return wire.AppendListStreams(nil, from, &m)
	case wire.ListStreamsReply:
		return wire.AppendListStreamsReply(nil, from, &m, d.List.([]wire.StreamInfo))
	case wire.LookupStreamReply:
		return wire.AppendLookupStreamReply(nil, from, &m)
	case wire.Produce:
		return wire.AppendProduce(nil, from, &m)
	case wire.ProduceReply:
		return wire.AppendProduceReply(nil, from, &m)
	case wire.Fetch:
		return wire.AppendFetch(nil, from, &m)
	case wire.FetchReply:
		return wire.AppendFetchReply(nil, from, &m)
	case wire.CursorRequest:
		switch c {
		case wire.CommandCommitCursor:
			return wire.AppendCommitCursor(nil, from, &m)
		case wire.CommandDeleteCursor:
			return wire.AppendDeleteCursor(nil, from, &m)
		}
		return wire.AppendGetCursor(nil, from, &m)
	case wire.CursorReply:
		switch c {
		case wire.CommandCommitCursorReply:
			return wire.AppendCommitCursorReply(nil, from, &m)
		case wire.CommandDeleteCursorReply:
			return wire.AppendDeleteCursorReply(nil, from, &m)
		}
		return wire.AppendGetCursorReply(nil, from, &m)
	case wire.ListCursors:
		return wire.AppendListCursors(nil, from, &m)
	case wire.ListCursorsReply:
		return wire.AppendListCursorsReply(nil, from, &m, d.List.([]wire.CursorInfo))
	case wire.ErrorReply:
		return wire.AppendErrorReply(nil, from, &m)
	case wire.CreateStreams:
		return wire.AppendCreateStreams(nil, from, &m)
	case wire.DeleteStreams:
		return wire.AppendDeleteStreams(nil, from, &m)
	case wire.StreamsReply:
		if c == wire.CommandCreateStreamsReply {
			return wire.AppendCreateStreamsReply(nil, from, &m, d.List.([]wire.StreamOutcome))
		}
		return wire.AppendDeleteStreamsReply(nil, from, &m, d.List.([]wire.StreamOutcome))
	}
	switch l := d.List.(type) {
	case []wire.CommitEntry:
		return wire.AppendCommitBatch(nil, h.Cluster, h.Sender, l)
	case []wire.CommitReplyEntry:
		return wire.AppendCommitReplyBatch(nil, h.Cluster, h.Sender, l)
	}
	panic(fmt.Sprintf("reencode: no encoder for %T", d.Msg))
}

func caseFor(command wire.Command) commandCase {
	for _, c := range commandCases() {
		if c.command == command {
			return c
		}
	}
	panic("no case for command")
}

// fuzzDecoder runs the decoder of command on fuzzed header and body bytes.
func fuzzDecoder(f *testing.F, command wire.Command) {
	c := caseFor(command)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < wire.HeaderSize {
			return
		}
		h := wire.DecodeHeaderForTest(data)
		h.Command = command
		h.Revision = wire.Revision
		if !plausibleHeader(&h) {
			return
		}
		body := data[wire.HeaderSize:]
		got, err := c.decode(&h, body)
		if err != nil {
			return
		}
		frame := reencode(command, got, &h)
		h2, body2, err := wire.ParseFrame(frame)
		if err != nil {
			t.Fatalf("re-encoded frame refused: %v", err)
		}
		again, err := c.decode(&h2, body2)
		if err != nil {
			t.Fatalf("re-encoded message refused: %v", err)
		}
		if p, ok := got.Msg.(wire.Produce); ok {
			// The fuzzer's first header was never checked against its body: its body checksum, which
			// DecodeProduce takes as the batch's, is whatever the input held.
			p.BatchSum = again.Msg.(wire.Produce).BatchSum
			got.Msg = p
		}
		if !reflect.DeepEqual(got, again) {
			t.Fatalf("re-encode changed the message\nfirst  %+v\nsecond %+v", got, again)
		}
	})
}

func FuzzHandshake(f *testing.F)          { fuzzDecoder(f, wire.CommandHandshake) }
func FuzzCommitBatch(f *testing.F)        { fuzzDecoder(f, wire.CommandCommit) }
func FuzzCommitReplyBatch(f *testing.F)   { fuzzDecoder(f, wire.CommandCommitReply) }
func FuzzStreamPrepare(f *testing.F)      { fuzzDecoder(f, wire.CommandStreamPrepare) }
func FuzzStreamPrepareOK(f *testing.F)    { fuzzDecoder(f, wire.CommandStreamPrepareOK) }
func FuzzStreamSeal(f *testing.F)         { fuzzDecoder(f, wire.CommandStreamSeal) }
func FuzzStreamSealReply(f *testing.F)    { fuzzDecoder(f, wire.CommandStreamSealReply) }
func FuzzStreamAssignment(f *testing.F)   { fuzzDecoder(f, wire.CommandStreamAssignment) }
func FuzzNodeHeartbeat(f *testing.F)      { fuzzDecoder(f, wire.CommandNodeHeartbeat) }
func FuzzCreateStream(f *testing.F)       { fuzzDecoder(f, wire.CommandCreateStream) }
func FuzzCreateStreamReply(f *testing.F)  { fuzzDecoder(f, wire.CommandCreateStreamReply) }
func FuzzDeleteStream(f *testing.F)       { fuzzDecoder(f, wire.CommandDeleteStream) }
func FuzzDeleteStreamReply(f *testing.F)  { fuzzDecoder(f, wire.CommandDeleteStreamReply) }
func FuzzListStreams(f *testing.F)        { fuzzDecoder(f, wire.CommandListStreams) }
func FuzzListStreamsReply(f *testing.F)   { fuzzDecoder(f, wire.CommandListStreamsReply) }
func FuzzLookupStream(f *testing.F)       { fuzzDecoder(f, wire.CommandLookupStream) }
func FuzzLookupStreamReply(f *testing.F)  { fuzzDecoder(f, wire.CommandLookupStreamReply) }
func FuzzProduce(f *testing.F)            { fuzzDecoder(f, wire.CommandProduce) }
func FuzzProduceReply(f *testing.F)       { fuzzDecoder(f, wire.CommandProduceReply) }
func FuzzFetch(f *testing.F)              { fuzzDecoder(f, wire.CommandFetch) }
func FuzzFetchReply(f *testing.F)         { fuzzDecoder(f, wire.CommandFetchReply) }
func FuzzCommitCursor(f *testing.F)       { fuzzDecoder(f, wire.CommandCommitCursor) }
func FuzzCommitCursorReply(f *testing.F)  { fuzzDecoder(f, wire.CommandCommitCursorReply) }
func FuzzGetCursor(f *testing.F)          { fuzzDecoder(f, wire.CommandGetCursor) }
func FuzzGetCursorReply(f *testing.F)     { fuzzDecoder(f, wire.CommandGetCursorReply) }
func FuzzErrorReply(f *testing.F)         { fuzzDecoder(f, wire.CommandErrorReply) }
func FuzzListCursors(f *testing.F)        { fuzzDecoder(f, wire.CommandListCursors) }
func FuzzListCursorsReply(f *testing.F)   { fuzzDecoder(f, wire.CommandListCursorsReply) }
func FuzzDeleteCursor(f *testing.F)       { fuzzDecoder(f, wire.CommandDeleteCursor) }
func FuzzDeleteCursorReply(f *testing.F)  { fuzzDecoder(f, wire.CommandDeleteCursorReply) }
func FuzzHandshakeProof(f *testing.F)     { fuzzDecoder(f, wire.CommandHandshakeProof) }
func FuzzClientHello(f *testing.F)        { fuzzDecoder(f, wire.CommandClientHello) }
func FuzzClientChallenge(f *testing.F)    { fuzzDecoder(f, wire.CommandClientChallenge) }
func FuzzClientProof(f *testing.F)        { fuzzDecoder(f, wire.CommandClientProof) }
func FuzzCreateStreams(f *testing.F)      { fuzzDecoder(f, wire.CommandCreateStreams) }
func FuzzCreateStreamsReply(f *testing.F) { fuzzDecoder(f, wire.CommandCreateStreamsReply) }
func FuzzDeleteStreams(f *testing.F)      { fuzzDecoder(f, wire.CommandDeleteStreams) }
func FuzzDeleteStreamsReply(f *testing.F) { fuzzDecoder(f, wire.CommandDeleteStreamsReply) }

// FuzzParseFrame: ParseFrame never panics, and a frame it accepts is exactly what BeginFrame and
// EndFrame build from the parsed header and body (the encoding is canonical).
func FuzzParseFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		h, body, err := wire.ParseFrame(data)
		if err != nil {
			return
		}
		frame := wire.BeginFrame(nil, &h)
		frame = append(frame, body...)
		wire.EndFrame(frame, h.EntryCount)
		if !bytes.Equal(frame, data) {
			t.Fatalf("accepted frame is not canonical")
		}
	})
}

// FuzzFrameReader feeds a byte stream to a FrameReader in chunks whose sizes come from the input, and
// compares what it hands on with a plain loop over ParseHeader and ParseFrame.
func FuzzFrameReader(f *testing.F) {
	f.Fuzz(func(t *testing.T, stream []byte, chunks []byte) {
		const limit = 1 << 16
		wantFrames, wantDropped, wantErr := referenceFrames(stream, limit)
		r := wire.NewFrameReader(wire.HeaderSize+int(len(chunks)%512), limit)
		var l frameLog
		var err error
		rest := stream
		for i := 0; len(rest) > 0 && err == nil; i++ {
			n := len(rest)
			if len(chunks) > 0 {
				n = min(n, 1+int(chunks[i%len(chunks)]))
			}
			_, err = r.Write(rest[:n], &l)
			rest = rest[n:]
		}
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("reader error %v, reference error %v", err, wantErr)
		}
		if len(l.dropped) != wantDropped {
			t.Fatalf("reader dropped %d frames, reference %d", len(l.dropped), wantDropped)
		}
		if len(l.frames) != len(wantFrames) {
			t.Fatalf("reader handed on %d frames, reference %d", len(l.frames), len(wantFrames))
		}
		for i := range wantFrames {
			if !bytes.Equal(l.frames[i], wantFrames[i]) {
				t.Fatalf("frame %d differs", i)
			}
		}
	})
}

// referenceFrames cuts stream into frames the simple way: the frames before the first bad header, the
// number of frames dropped for a wrong body checksum, and the bad header's error; an incomplete last
// frame is no error.
func referenceFrames(stream []byte, limit int) ([][]byte, int, error) {
	var frames [][]byte
	dropped := 0
	for len(stream) >= wire.HeaderSize {
		h, err := wire.ParseHeader(stream)
		if err != nil {
			return frames, dropped, err
		}
		size := wire.HeaderSize + int(h.BodySize)
		if size > limit {
			return frames, dropped, wire.ErrFrameTooLarge
		}
		if len(stream) < size {
			break
		}
		if _, _, err := wire.ParseFrame(stream[:size]); err != nil {
			dropped++
		} else {
			frames = append(frames, stream[:size])
		}
		stream = stream[size:]
	}
	return frames, dropped, nil
}

// TestWriteFuzzSeeds writes the seed corpora under testdata/fuzz/ when WIRE_WRITE_FUZZ_SEEDS=1. Seeds
// per decoder: its valid frame, the frame with its body cut in half, and the frame with the last area
// byte set; for ParseFrame and FrameReader, every command's frame and a stream of all of them.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("WIRE_WRITE_FUZZ_SEEDS") != "1" {
		t.Skip("set WIRE_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz")
	}
	targets := map[wire.Command]string{}
	for _, name := range []string{"Handshake", "CommitBatch", "CommitReplyBatch", "StreamPrepare", "StreamPrepareOK",
		"StreamSeal", "StreamSealReply", "StreamAssignment", "NodeHeartbeat", "CreateStream", "CreateStreamReply", "DeleteStream",
		"DeleteStreamReply", "ListStreams", "ListStreamsReply", "LookupStream", "LookupStreamReply", "Produce",
		"ProduceReply", "Fetch", "FetchReply", "CommitCursor", "CommitCursorReply", "GetCursor", "GetCursorReply",
		"ErrorReply", "ListCursors", "ListCursorsReply", "DeleteCursor", "DeleteCursorReply", "HandshakeProof", "ClientHello", "ClientChallenge", "ClientProof"} {
		targets[commandByFuzzName(name)] = "Fuzz" + name
	}
	var all [][]byte
	written := map[string]int{} // a target with two cases keeps the first case's seeds
	for _, c := range commandCases() {
		frame := c.encode(nil)
		all = append(all, frame)
		half := frame[:wire.HeaderSize+(len(frame)-wire.HeaderSize)/2]
		area := bytes.Clone(frame)
		area[wire.HeaderSize-1] = 1
		writeSeeds(t, targets[c.command], written[targets[c.command]], [][]any{{frame}, {half}, {area}})
		written[targets[c.command]] += 3
	}
	parseSeeds := make([][]any, 0, len(all)+1)
	for _, fr := range all {
		parseSeeds = append(parseSeeds, []any{fr})
	}
	parseSeeds = append(parseSeeds, []any{[]byte{}})
	writeSeeds(t, "FuzzParseFrame", 0, parseSeeds)
	stream := bytes.Join(all, nil)
	corrupt := bytes.Clone(stream)
	corrupt[len(all[0])+20] ^= 1
	badBody := bytes.Clone(stream)
	badBody[len(all[0])+len(all[1])-1] ^= 1
	writeSeeds(t, "FuzzFrameReader", 0, [][]any{
		{stream, []byte{}},
		{stream, []byte{0, 7, 255, 3}},
		{stream[:len(stream)-5], []byte{100}},
		{corrupt, []byte{1}},
		{badBody, []byte{13, 200}},
	})
}

func commandByFuzzName(name string) wire.Command {
	for _, c := range commandCases() {
		if fuzzName(c.command) == name {
			return c.command
		}
	}
	panic("no command for fuzz target " + name)
}

// fuzzName turns a command's name (commit_reply) into its target's suffix (CommitReply); the two batch
// commands get "Batch" appended.
func fuzzName(c wire.Command) string {
	var out []byte
	up := true
	for _, ch := range []byte(c.String()) {
		if ch == '_' {
			up = true
			continue
		}
		if up && ch >= 'a' && ch <= 'z' {
			ch -= 'a' - 'A'
		}
		up = false
		out = append(out, ch)
	}
	s := string(out)
	s = strings.ReplaceAll(s, "Ok", "OK")
	if c == wire.CommandCommit || c == wire.CommandCommitReply {
		s += "Batch"
	}
	return s
}

// writeSeeds writes one file per seed in the go test fuzz v1 format.
func writeSeeds(t *testing.T, target string, first int, seeds [][]any) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, args := range seeds {
		var b bytes.Buffer
		b.WriteString("go test fuzz v1\n")
		for _, a := range args {
			fmt.Fprintf(&b, "[]byte(%q)\n", a.([]byte))
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", first+i)), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
