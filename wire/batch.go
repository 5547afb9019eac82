package wire

import (
	"github.com/ringstream/ringstream/internal/assert"
)

// BatchWriter builds one Commit or CommitReply batch frame in place at the end of a caller's buffer
// (the per-peer outbox): Begin appends the header, each Append writes one entry straight after the
// previous one, and End fixes the header's count, size and checksums once (R10, R26). Nothing is
// allocated per entry; the buffer grows only when its capacity is short. A BatchWriter is reusable and
// remembers an offset, not a slice, so the buffer may move between calls.
type BatchWriter struct {
	start   int
	count   uint32
	command Command
	open    bool
}

// Begin appends the header of a batch of command (CommandCommit or CommandCommitReply) from node sender
// of cluster to dst and returns dst.
func (w *BatchWriter) Begin(dst []byte, command Command, cluster uint64, sender uint16) []byte {
	assert.True(!w.open, "wire: BatchWriter.Begin on an open batch")
	assert.True(command == CommandCommit || command == CommandCommitReply, "wire: BatchWriter for a non-batch command")
	w.start = len(dst)
	w.count = 0
	w.command = command
	w.open = true
	return BeginFrame(dst, &Header{Cluster: cluster, Sender: sender, Command: command})
}

// AppendCommit appends one Commit entry to the open Commit batch at the end of dst.
func (w *BatchWriter) AppendCommit(dst []byte, e CommitEntry) []byte {
	assert.True(w.open, "wire: AppendCommit without Begin")
	assert.True(w.command == CommandCommit, "wire: AppendCommit on a CommitReply batch")
	assert.True(w.count < CommitEntriesMax, "wire: Commit batch past CommitEntriesMax (R13)")
	assert.True(len(dst) == w.start+HeaderSize+int(w.count)*CommitEntrySize, "wire: batch buffer changed under the writer")
	w.count++
	return AppendCommitEntry(dst, e)
}

// AppendCommitReply appends one CommitReply entry to the open CommitReply batch at the end of dst.
func (w *BatchWriter) AppendCommitReply(dst []byte, e CommitReplyEntry) []byte {
	assert.True(w.open, "wire: AppendCommitReply without Begin")
	assert.True(w.command == CommandCommitReply, "wire: AppendCommitReply on a Commit batch")
	assert.True(w.count < CommitReplyEntriesMax, "wire: CommitReply batch past CommitReplyEntriesMax")
	assert.True(len(dst) == w.start+HeaderSize+int(w.count)*CommitReplyEntrySize, "wire: batch buffer changed under the writer")
	w.count++
	return AppendCommitReplyEntry(dst, e)
}

// Count is the number of entries appended since Begin.
func (w *BatchWriter) Count() uint32 {
	return w.count
}

// End closes the batch: body size, entry count and both checksums, once. It returns dst, whose frame
// starts where Begin was called. A batch with no entries is a valid frame (R11).
func (w *BatchWriter) End(dst []byte) []byte {
	assert.True(w.open, "wire: BatchWriter.End without Begin")
	w.open = false
	EndFrame(dst[w.start:], w.count)
	return dst
}

// AppendCommitBatch appends one whole Commit batch frame holding entries to dst.
func AppendCommitBatch(dst []byte, cluster uint64, sender uint16, entries []CommitEntry) []byte {
	var w BatchWriter
	dst = w.Begin(dst, CommandCommit, cluster, sender)
	for i := range entries {
		dst = w.AppendCommit(dst, entries[i])
	}
	return w.End(dst)
}

// AppendCommitReplyBatch appends one whole CommitReply batch frame holding entries to dst.
func AppendCommitReplyBatch(dst []byte, cluster uint64, sender uint16, entries []CommitReplyEntry) []byte {
	var w BatchWriter
	dst = w.Begin(dst, CommandCommitReply, cluster, sender)
	for i := range entries {
		dst = w.AppendCommitReply(dst, entries[i])
	}
	return w.End(dst)
}

// checkBatch checks a batch frame's command, per-command area and body size against its entry count.
func checkBatch(h *Header, body []byte, command Command, entrySize int) error {
	if h.Command != command {
		return wrongCommand(h.Command, command)
	}
	if !zero(h.Area[:]) {
		return ErrReserved
	}
	if uint64(len(body)) != uint64(h.EntryCount)*uint64(entrySize) {
		return ErrEntryCount
	}
	return nil
}

// CommitBatch is a decoded Commit batch: the frame's entries, read in place. A wrong frame was already
// refused whole by ParseFrame (R15); here each entry is checked on its own, so one bad entry is
// reported and skipped while the others are handed on (R17).
type CommitBatch struct {
	Cluster uint64
	Sender  uint16
	entries []byte
}

// DecodeCommitBatch checks a parsed Commit frame's header against its body and returns the batch. Its
// entries alias body.
func DecodeCommitBatch(h *Header, body []byte) (CommitBatch, error) {
	if err := checkBatch(h, body, CommandCommit, CommitEntrySize); err != nil {
		return CommitBatch{}, err
	}
	return CommitBatch{Cluster: h.Cluster, Sender: h.Sender, entries: body}, nil
}

// Len is the number of entries, good and bad.
func (b *CommitBatch) Len() int {
	return len(b.entries) / CommitEntrySize
}

// Entry decodes entry i (0 <= i < Len). A bad entry returns a reason that matches ErrBadEntry.
func (b *CommitBatch) Entry(i int) (CommitEntry, error) {
	assert.True(i >= 0 && i < b.Len(), "wire: Commit entry index out of range")
	return decodeCommitEntry(b.entries[i*CommitEntrySize : (i+1)*CommitEntrySize])
}

// CommitVisitor receives a Commit batch's entries in order from CommitBatch.Each.
type CommitVisitor interface {
	// OnCommitEntry receives one good entry.
	OnCommitEntry(e CommitEntry)
	// OnBadCommitEntry receives the index of a bad entry and why it is bad (matches ErrBadEntry).
	OnBadCommitEntry(index int, reason error)
}

// Each hands every good entry to v and reports every bad one, in order, and returns how many of each.
func (b *CommitBatch) Each(v CommitVisitor) (good, bad int) {
	var e CommitEntry
	entries := b.entries
	for i := 0; len(entries) >= CommitEntrySize; i++ {
		err := decodeCommitEntryInto(entries, &e)
		entries = entries[CommitEntrySize:]
		if err != nil {
			v.OnBadCommitEntry(i, err)
			bad++
			continue
		}
		v.OnCommitEntry(e)
		good++
	}
	return good, bad
}

// CommitReplyBatch is a decoded CommitReply batch, read in place; each entry is checked on its own
// (R29).
type CommitReplyBatch struct {
	Cluster uint64
	Sender  uint16
	entries []byte
}

// DecodeCommitReplyBatch checks a parsed CommitReply frame's header against its body and returns the
// batch. Its entries alias body.
func DecodeCommitReplyBatch(h *Header, body []byte) (CommitReplyBatch, error) {
	if err := checkBatch(h, body, CommandCommitReply, CommitReplyEntrySize); err != nil {
		return CommitReplyBatch{}, err
	}
	return CommitReplyBatch{Cluster: h.Cluster, Sender: h.Sender, entries: body}, nil
}

// Len is the number of entries, good and bad.
func (b *CommitReplyBatch) Len() int {
	return len(b.entries) / CommitReplyEntrySize
}

// Entry decodes entry i (0 <= i < Len). A bad entry returns a reason that matches ErrBadEntry.
func (b *CommitReplyBatch) Entry(i int) (CommitReplyEntry, error) {
	assert.True(i >= 0 && i < b.Len(), "wire: CommitReply entry index out of range")
	return decodeCommitReplyEntry(b.entries[i*CommitReplyEntrySize : (i+1)*CommitReplyEntrySize])
}

// CommitReplyVisitor receives a CommitReply batch's entries in order from CommitReplyBatch.Each.
type CommitReplyVisitor interface {
	// OnCommitReplyEntry receives one good entry.
	OnCommitReplyEntry(e CommitReplyEntry)
	// OnBadCommitReplyEntry receives the index of a bad entry and why it is bad (matches ErrBadEntry).
	OnBadCommitReplyEntry(index int, reason error)
}

// Each hands every good entry to v and reports every bad one, in order, and returns how many of each.
func (b *CommitReplyBatch) Each(v CommitReplyVisitor) (good, bad int) {
	var e CommitReplyEntry
	entries := b.entries
	for i := 0; len(entries) >= CommitReplyEntrySize; i++ {
		err := decodeCommitReplyEntryInto(entries, &e)
		entries = entries[CommitReplyEntrySize:]
		if err != nil {
			v.OnBadCommitReplyEntry(i, err)
			bad++
			continue
		}
		v.OnCommitReplyEntry(e)
		good++
	}
	return good, bad
}
