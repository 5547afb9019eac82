package wire

import (
	"bytes"
	"testing"
)

// A header finished apart from its body (EndHeader) is byte for byte the header EndFrame writes over
// the same body, and the two halves parse as one frame.
func TestEndHeaderMatchesEndFrame(t *testing.T) {
	h := Header{Cluster: 9, Sender: 3, Command: CommandStreamPrepare, Group: 77, Incarnation: 2}
	body := bytes.Repeat([]byte("batch"), 1000)
	whole := BeginFrame(nil, &h)
	whole = append(whole, body...)
	EndFrame(whole, 5)
	header := BeginFrame(nil, &h)
	EndHeader(header, body, 5)
	if !bytes.Equal(header, whole[:HeaderSize]) {
		t.Fatal("EndHeader wrote a different header than EndFrame")
	}
	got, gotBody, err := ParseFrame(append(header, body...))
	if err != nil || got.EntryCount != 5 || !bytes.Equal(gotBody, body) {
		t.Fatalf("parse: %+v, %v", got, err)
	}
}

// A stream prepare's header built apart from its batches is the header of the whole frame.
func TestAppendStreamPrepareHeaderMatchesFrame(t *testing.T) {
	m := StreamPrepare{Stream: 5, Incarnation: 2, Epoch: 3, PrevEpoch: 2, Log: LogRecords, BaseOffset: 40,
		Count: 7, ConfirmedTail: 33, Batches: bytes.Repeat([]byte("b"), 3000)}
	from := From{Cluster: 1, Node: 2}
	whole := AppendStreamPrepare(nil, from, &m)
	header := AppendStreamPrepareHeader([]byte("x"), from, &m)
	if !bytes.Equal(header[1:], whole[:HeaderSize]) {
		t.Fatal("AppendStreamPrepareHeader wrote another header than AppendStreamPrepare")
	}
}
