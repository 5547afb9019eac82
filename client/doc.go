// Package client is the Go client of a ringstream cluster: it connects to any node, finds each
// stream's owner from the cluster's metadata, creates, lists and deletes streams, produces records in
// confirmed batches, fetches them back with long polls, and commits and reads consumer cursors. It
// follows a stream's new owner after a failover by itself, with bounded retries and backoff.
//
// It owns its TCP connections (one per node, requests multiplexed by request id, one reader goroutine
// each), the route cache (stream name to owner), and each Producer's sender goroutine. Client,
// Producer and the package functions are safe for concurrent use; a Consumer is used by one goroutine
// at a time. Every call takes a context.Context; Client.Close ends every goroutine the client started.
// It speaks wire only and imports nothing of the node.
//
// Retries. A request about a stream goes to the owner the client looked up. A refusal that may clear
// (CodeNotOwner, CodeFenced, CodeStaleIncarnation, CodeLogFailed, CodeUnavailable, CodeOverloaded,
// CodeNotYet), a lost connection, a node silent for RequestTimeout and a stream without an owner are
// retried up to Config.Retries times, waiting BackoffMin doubled per attempt up to BackoffMax (with
// jitter), except right after the owner was lost (below); all but CodeOverloaded and CodeNotYet look
// the owner up again first. CodeNotYet is a passing
// state the node names (a new incarnation's copy opening, a metadata primary being elected), retried
// on the same route and returned as ErrNotYet only when the retries run out. Other refusals return at
// once as *Error, which matches its sentinel (ErrUnknownStream, ErrStreamExists, ...) with errors.Is;
// unknown stream is final. Names, copy counts and policies are checked with wire's rules (wire/rules.go)
// before anything is sent, and a node's refusal of one (CodeBadStreamName and the other rule codes) is
// final: ErrInvalidName, ErrInvalidCopies, ... each matching ErrInvalidRequest too. A stream still without
// an owner after the retries is ErrNoOwner; one whose owner the metadata names but the client cannot
// reach (its node is down and the stream was not moved, as a one-copy stream waits for its node) is
// ErrOwnerUnreachable. Both name the stream.
//
// Batches. A produce's body is a batch payload the nodes store without reading, and its record format
// (Format), which they store as the batch header's version. Fetch replies carry batches in the nodes'
// storage format (an 80-byte header with checksums, then that payload); the client checks both
// checksums, the offsets, the version and every record's framing, and reports a mismatch as
// ErrCorruptBatch from Records.Err, and a version it does not know as ErrUnknownFormat.
//
// Record format 1, FormatValues: the records, each a uvarint length and its bytes, compressed whole by
// the batch's codec (CodecNone, CodecZstd, CodecS2; the codec travels in the request and is stored in
// the batch header). A record is a value; its timestamp is its batch's append time.
//
// Record format 2, FormatRecords (the default): eight bytes, the batch's base timestamp (unix ms,
// little endian, the first record's timestamp), left uncompressed; then the records section,
// compressed whole by the codec. The records are laid out as the records inside a Kafka RecordBatch
// of magic 2, so that a Kafka-speaking reader can be served them without re-encoding. Every integer is
// a zigzag varint (encoding/binary's AppendVarint). Each record is:
//
//	length                (varint: the bytes of the record after this field)
//	attributes            (one byte, always 0)
//	timestamp delta       (varint: the record's timestamp minus the base timestamp, in ms; may be negative)
//	offset delta          (varint: the record's index in its batch, 0 first)
//	key length, key       (varint, then that many bytes; length -1 is a null key with no bytes)
//	value length, value   (the same; -1 is a null value)
//	header count          (varint, 0 or more)
//	headers               (each: key length varint and key bytes, never null; value length varint, -1
//	                      for null, and value bytes)
//
// A reader checks every field: attributes 0, the offset delta equal to the record's index, lengths of
// -1 (where null is allowed) or within the record, a header count no larger than the record's bytes could
// hold, and no byte left over in a record or after the batch's last. A record that breaks one is
// ErrCorruptBatch naming the field; the decoder never panics (FuzzRecords).
//
// Decisions where the design is silent:
//   - A Producer keeps one batch in flight while the next one fills, unless InFlight allows up to
//     four. The owner's producer table needs each producer's sequences in order with no gap, and a
//     new owner that does not know the producer accepts any first sequence, so a batch must never
//     reach an owner before an older unconfirmed one. Pipelined batches therefore go out in order on
//     one connection, and after any failure the sender waits until every batch in flight is answered
//     or failed, then resends the window oldest first, one at a time, before it pipelines again; a
//     batch that was not sent holds back every later one. Four is below the table's window of five
//     batches, so each resent batch the owner holds is answered from the table.
//   - No record waits for a timer it does not need. A batch is sent at once when it is full
//     (BatchBytes, or BatchRecords if set), flushed, or when no batch is in flight: a record alone goes
//     out as soon as it is appended, and records appended while a batch is in flight gather into the
//     next one. Linger is waited only while a batch is in flight and the window has room for another
//     (InFlight above 1): it trades a little latency for fuller batches only when the connection is
//     already busy.
//   - A batch is retried with the same producer id and sequence until it is confirmed or the retries
//     run out, so a batch the old owner appended before it died is answered from the new owner's table
//     (Confirmed.Duplicate) rather than appended twice. When the retries run out the Producer fails
//     for good: its error says the batch was not confirmed, and its records may or may not be in the
//     stream. The producer id is random unless set; sequences start at 1 for each Producer.
//   - A record is at most BatchBytes (1 MiB by default, the nodes' default batch limit) as encoded:
//     for FormatValues its value with its length prefix, for FormatRecords the whole record (key,
//     headers and framing) as the first of a batch plus the batch's 8-byte base timestamp. A larger one
//     is ErrRecordTooLarge before anything is sent.
//   - Append of a value alone is a record with a null key, no headers and the time of the call. A nil
//     Record.Value is null (Kafka's tombstone), and an empty non-nil one an empty value; the same for
//     keys and header values, so a reader sees exactly what was written.
//   - The base timestamp of a FormatRecords batch is left outside the compression so that a reader (and
//     a later Kafka listener, whose batch header carries it) has it without decompressing.
//   - Records.Timestamp of a FormatValues record is its batch's append time on the owner (the batch
//     header's first timestamp), the only time such a record has. Client.OffsetForTime searches append
//     times, never record timestamps: producers choose those and need not keep them in order.
//   - A batch of a version this client does not know is ErrUnknownFormat, not ErrCorruptBatch: its
//     checksums hold, it was written by a newer producer, and reading it as either known format would
//     return garbage. Records before it in the fetch are read; Next stops at it.
//   - The owner moving is waited on, not polled. After a request failed on the owner of epoch E (its
//     connection lost or silent, a refusal saying it is not or no longer the owner, or no owner at
//     E), the client remembers E for the stream, and its next lookup (a retry's, or a pipelined
//     producer's resend) asks for an assignment newer than E (wire.LookupStream's AfterEpoch, waiting
//     up to 2 s at the metadata primary): it is answered the moment the new assignment commits. The
//     first retry after such a failure skips its backoff, once per epoch; the memory is dropped by the
//     first answer at or past E, so if the wait ends with nothing newer the backoff applies as
//     before, and a stream whose owner did not move is never asked in a loop.
//   - Requests that name no stream (create, delete, list, lookup) go to any node: the node forwards
//     metadata requests to the metadata primary. The client starts at the next seed address after a
//     lost connection, and at the node a refusal named when it knows that node's address.
//   - A create that got no answer is retried; if the first attempt committed, the retry answers
//     ErrStreamExists for the stream this client created. Check with Lookup when that matters.
//   - A protocol error (a frame that fails its checksum or decoder, a reply of the wrong command, a
//     reply to request id 0) is returned at once and closes that connection: the node's bytes can no
//     longer be trusted, and retrying elsewhere would hide the fault.
//   - Records of a fetch alias the client's buffers and stay valid until the Consumer's next Poll;
//     compressed batches are decoded into one buffer per Consumer that keeps its capacity, so Poll
//     allocates nothing in steady state (TestPollAllocatesNothing), keys and headers included: Key,
//     Value and the HeaderIter of Headers alias the buffers. Nor does Producer.Append or AppendRecord
//     per record (TestAppendAllocatesNothing). Decompressed payloads are capped at 64 MiB per batch.
//   - RequestTimeout is enforced by one watchdog per connection that checks its pending requests
//     every RequestTimeout/10 (10 to 500 ms), not by a timer per request; a request past it fails
//     its whole connection, since a node that stopped answering one request answers none.
//   - A write is bounded by the context's deadline (the socket's write deadline); a context that
//     can only be cancelled interrupts a blocked write through context.AfterFunc. Either way a cut
//     write fails the connection.
//   - The handshake's nonce comes from crypto/rand; with an empty Secret the client sends zero
//     nonces and a node with a secret refuses it (ErrInvalidRequest naming the secret). The client
//     checks the node's proof before it sends its own, so a node with another secret is
//     wire.ErrAuthFailed and the client's proof never reaches it.
package client
