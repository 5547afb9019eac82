package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A committed offset is one record in the group's internal stream (record format 1, values only),
// its value in this layout (big endian):
//
//	version u8 (1) | group_len u16 | group | topic_len u16 | topic | partition i32 | offset i64 |
//	leader_epoch i32 | metadata_len u16 | metadata | commit_ms i64
//
// The last record of a (group, topic, partition) wins when the coordinator rebuilds from the stream.

const offsetRecordVersion = 1

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
