package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// The internal group streams hold records of record format 1 (values only), each value one of two
// kinds, told by its first byte (big endian, strings with a u16 length, bytes with a u32 length):
//
//	offset (1): group | topic | partition i32 | offset i64 | leader_epoch i32 | metadata | commit_ms i64
//	group  (2): group | generation i32 | protocol_type | protocol | leader | members u16, each:
//	            id | client_id | client_host | session_ms i32 | rebalance_ms i32 | metadata bytes | assignment bytes
//
// A committed offset is an offset record; the last one of a (group, topic, partition) wins when the
// coordinator rebuilds from the stream. A group record is written when a generation's assignment
// is handed out (and when a group empties): the last one of a group gives a coordinator that takes
// over its members, generation and assignment, so members go on without rejoining.

const (
	offsetRecordVersion = 1 // the offset record's kind
	groupRecordKind     = 2
)

// offsetMetadataMax bounds a committed offset's metadata string (Kafka's offset.metadata.max.bytes).
const offsetMetadataMax = 4096

// groupIDMax bounds a group id (it is stored in every offset record).
const groupIDMax = 255

// offsetRecord is one committed offset.
type offsetRecord struct {
	group       string
	topic       string
	partition   int32
	offset      int64
	leaderEpoch int32
	metadata    string
	commitMs    int64
}

// errOffsetRecord is an internal stream record that is not an offset record of this layout.
var errOffsetRecord = errors.New("kafka: malformed offset record")

func appendOffsetRecord(dst []byte, o *offsetRecord) []byte {
	be := binary.BigEndian
	dst = append(dst, offsetRecordVersion)
	dst = be.AppendUint16(dst, uint16(len(o.group)))
	dst = append(dst, o.group...)
	dst = be.AppendUint16(dst, uint16(len(o.topic)))
	dst = append(dst, o.topic...)
	dst = be.AppendUint32(dst, uint32(o.partition))
	dst = be.AppendUint64(dst, uint64(o.offset))
	dst = be.AppendUint32(dst, uint32(o.leaderEpoch))
	dst = be.AppendUint16(dst, uint16(len(o.metadata)))
	dst = append(dst, o.metadata...)
	return be.AppendUint64(dst, uint64(o.commitMs))
}

// decodeOffsetRecord reads one record's value (the layout above); the validation of a record read
// back from the internal stream.
func decodeOffsetRecord(b []byte) (offsetRecord, error) {
	be := binary.BigEndian
	var o offsetRecord
	str := func(what string) (string, error) {
		if len(b) < 2 || int(be.Uint16(b)) > len(b)-2 {
			return "", fmt.Errorf("%w: %s cut short", errOffsetRecord, what)
		}
		n := int(be.Uint16(b))
		s := string(b[2 : 2+n])
		b = b[2+n:]
		return s, nil
	}
	if len(b) < 1 || b[0] != offsetRecordVersion {
		return o, fmt.Errorf("%w: not version %d", errOffsetRecord, offsetRecordVersion)
	}
	b = b[1:]
	var err error
	if o.group, err = str("group"); err != nil {
		return o, err
	}
	if o.topic, err = str("topic"); err != nil {
		return o, err
	}
	if len(b) < 16 {
		return o, fmt.Errorf("%w: offset cut short", errOffsetRecord)
	}
	o.partition, o.offset, o.leaderEpoch = int32(be.Uint32(b)), int64(be.Uint64(b[4:])), int32(be.Uint32(b[12:]))
	b = b[16:]
	if o.metadata, err = str("metadata"); err != nil {
		return o, err
	}
	if len(b) != 8 {
		return o, fmt.Errorf("%w: %d bytes after the metadata, not 8", errOffsetRecord, len(b))
	}
	o.commitMs = int64(be.Uint64(b))
	return o, nil
}

// appendValue appends one record of record format 1: a uvarint length and the value.
func appendValue(dst, value []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(value)))
	return append(dst, value...)
}

// eachValue calls f with each value of a record format 1 payload (uncompressed).
func eachValue(payload []byte, f func([]byte)) error {
	for len(payload) > 0 {
		n, k := binary.Uvarint(payload)
		if k <= 0 || n > uint64(len(payload)-k) {
			return fmt.Errorf("%w: value length cut short", errOffsetRecord)
		}
		f(payload[k : k+int(n)])
		payload = payload[k+int(n):]
	}
	return nil
}

// groupRecord is a group's membership as a group record stores it.
type groupRecord struct {
	group        string
	generation   int32
	protocolType string
	protocol     string
	leader       string
	members      []groupRecordMember
}

// groupRecordMember is one member in a group record: the chosen protocol's metadata and its assignment.
type groupRecordMember struct {
	id, clientID, clientHost string
	sessionMs, rebalanceMs   int32
	metadata, assignment     []byte
}

func appendStr16(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}

func appendBytes32(dst, b []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

func appendGroupRecord(dst []byte, g *groupRecord) []byte {
	be := binary.BigEndian
	dst = append(dst, groupRecordKind)
	dst = appendStr16(dst, g.group)
	dst = be.AppendUint32(dst, uint32(g.generation))
	dst = appendStr16(dst, g.protocolType)
	dst = appendStr16(dst, g.protocol)
	dst = appendStr16(dst, g.leader)
	dst = be.AppendUint16(dst, uint16(len(g.members)))
	for _, m := range g.members {
		dst = appendStr16(dst, m.id)
		dst = appendStr16(dst, m.clientID)
		dst = appendStr16(dst, m.clientHost)
		dst = be.AppendUint32(dst, uint32(m.sessionMs))
		dst = be.AppendUint32(dst, uint32(m.rebalanceMs))
		dst = appendBytes32(dst, m.metadata)
		dst = appendBytes32(dst, m.assignment)
	}
	return dst
}

// recordReader reads a record's fields in order; the first field cut short sets err and every later
// read returns zero values.
type recordReader struct {
	b   []byte
	err error
}

func (r *recordReader) take(n int, what string) []byte {
	if r.err != nil || n > len(r.b) || n < 0 {
		if r.err == nil {
			r.err = fmt.Errorf("%w: %s cut short", errOffsetRecord, what)
		}
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *recordReader) u16(what string) uint16 {
	if v := r.take(2, what); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *recordReader) u32(what string) uint32 {
	if v := r.take(4, what); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *recordReader) str(what string) string { return string(r.take(int(r.u16(what)), what)) }

func (r *recordReader) bytes(what string) []byte {
	n := r.u32(what)
	if uint64(n) > uint64(len(r.b)) {
		r.take(len(r.b)+1, what)
		return nil
	}
	return slices.Clone(r.take(int(n), what))
}

// decodeGroupRecord reads a group record's value; the validation of a group record read back from
// the internal stream.
func decodeGroupRecord(b []byte) (groupRecord, error) {
	var g groupRecord
	if len(b) < 1 || b[0] != groupRecordKind {
		return g, fmt.Errorf("%w: not a group record", errOffsetRecord)
	}
	r := recordReader{b: b[1:]}
	g.group = r.str("group")
	g.generation = int32(r.u32("generation"))
	g.protocolType, g.protocol, g.leader = r.str("protocol type"), r.str("protocol"), r.str("leader")
	n := int(r.u16("members"))
	for i := 0; i < n && r.err == nil; i++ {
		var m groupRecordMember
		m.id, m.clientID, m.clientHost = r.str("member id"), r.str("client id"), r.str("client host")
		m.sessionMs, m.rebalanceMs = int32(r.u32("session")), int32(r.u32("rebalance"))
		m.metadata, m.assignment = r.bytes("metadata"), r.bytes("assignment")
		g.members = append(g.members, m)
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d bytes after the members", errOffsetRecord, len(r.b))
	}
	return g, r.err
}
