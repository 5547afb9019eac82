package segment

import "github.com/cespare/xxhash/v2"

// runDigest hashes the active segment's bytes as the log queues them, so a segment closed by a roll
// has its digest (the sidecar's, the seal's) without its file being read back through the ring and
// hashed a second time: each byte is hashed where it was just copied, once. It covers a segment only
// from its first byte on (one the log created: the first of a new log, or a roll's); a segment that
// opened with bytes already in it, or that a cut shortened, is read back when it closes, as before.
// The digest is of the bytes the log wrote; Verify still hashes the files and compares.
type runDigest struct {
	h    *xxhash.Digest
	seg  *segment // the segment h covers from its first byte, nil when none
	size int64    // bytes of seg hashed so far
}

// runStart makes s, a new empty segment, the one the running digest covers.
func (l *Log) runStart(s *segment) {
	l.run.h.Reset()
	l.run.seg, l.run.size = s, 0
}

// runAdd hashes b, queued into s at byte pos. Bytes that do not follow what the digest covers (a
// segment it does not cover) leave it as it is.
func (l *Log) runAdd(s *segment, pos int64, b []byte) {
	r := &l.run
	if r.seg != s {
		return
	}
	if pos != r.size {
		r.seg = nil // not contiguous: the closing digest reads the file back
		return
	}
	_, _ = r.h.Write(b)
	r.size += int64(len(b))
}

// runClose records the running digest of s, which a roll closes, and stops covering it.
func (l *Log) runClose(s *segment) {
	r := &l.run
	if r.seg != s {
		return
	}
	s.runSum, s.runSize, s.runKnown = r.h.Sum64(), r.size, true
	r.seg = nil
}

// runForget drops what the running digest knows of s (a cut shortened it).
func (l *Log) runForget(s *segment) {
	s.runKnown = false
	if l.run.seg == s {
		l.run.seg = nil
	}
}

// DigestBytesRead is how many bytes the log's digests (closing and seal) read back from its files
// since it opened.
func (l *Log) DigestBytesRead() int64 { return l.dig.readTotal }
