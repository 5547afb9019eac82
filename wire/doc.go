// Package wire owns every byte that crosses a socket between ringstream nodes and between a client and a
// node: the 256-byte frame header and its two checksums, the command numbers, the batched Commit and
// CommitReply entries (R10, R13, R15 to R17, R21, R26, R29), the handshake (R18) and its
// authentication, stream replication, the stream seal, the stream assignment, the node heartbeat, the
// client requests and replies, and FrameReader, which cuts frames out of a byte stream.
//
// wire never does I/O, never reads the clock, never starts a goroutine, keeps no package-level mutable
// state and imports nothing of this project but internal/assert. Encoders append into a buffer the caller
// owns (the shard's per-peer outbox) and allocate only when that buffer has to grow. Decoders read the
// caller's bytes in place, return slices that alias them, check every length before reading, and never
// panic: bytes from a socket are input, so a bad frame is an error value, never an assertion. Encoders, which
// are handed this process's own values, assert their invariants with internal/assert.
//
// Decisions where DESIGN.md is silent:
//
//   - The cluster id is a uint64, chosen by the operator; it is not checksummed into anything beyond the
//     header checksum. Node ids are uint16, 1..65535; 0 means "no node".
//   - Header layout (all little endian), pinned by TestHeaderOffsets:
//     0 checksum u64 | 8 checksum_body u64 | 16 cluster u64 | 24 group u64 | 32 incarnation u32 |
//     36 body_size u32 | 40 entry_count u32 | 44 sender u16 | 46 command u16 | 48 revision u16 |
//     50 reserved [14] (zero) | 64 per-command area [192].
//     The header checksum covers bytes 8..256, so it also covers the body checksum.
//   - ParseFrame trusts no header field before the header checksum holds, so a frame from a node on
//     revision 1 is reported as ErrRevision only when its header checksum matches ours; the handshake
//     repeats the revision in its per-command area and refuses it again there.
//   - Commands 20 to 32 belong to the metadata group's VSR messages (wire/vsr*.go). ParseFrame accepts the
//     whole range as known; the VSR decoders reject numbers they do not define.
//   - Node-level frames (handshake, Commit batch, CommitReply batch, node heartbeat) carry Group 0 and
//     Incarnation 0; ParseFrame refuses anything else. Node-to-node commands (below 60) need a sender
//     node id; client frames (60 to 99) may carry sender 0, since a client is not a node.
//   - Fixed fields of a command live in the header's per-command area, and the body holds only the
//     variable part. A stream prepare's or a produce's body is therefore exactly the record batches as the
//     segment stores them, and can be written to disk without a copy. Every decoder requires the area
//     bytes its command does not use to be zero.
//   - Batch frames (Commit, CommitReply) and the node heartbeat check each entry on its own: a bad entry
//     is reported with its index and a reason matching ErrBadEntry, and the others are handed on (R17,
//     R29). Other lists (log epochs, history starts, the stream list) are checked whole, since their
//     entries only mean something together (a history with a hole is not a history).
//   - Stream replication carries the record log and the cursor event log with the same prepare, told
//     apart by its log field; prepare-ok reports both durable tails. A follower that refuses a prepare
//     answers with its log epochs, and the owner resends from where their histories agree.
//   - Client frames carry a request id in the first 8 bytes of the area, and replies echo it. Stream
//     names and consumer names follow StreamNameRule and ConsumerNameRule (rules.go): 1 to 255 bytes of
//     [A-Za-z0-9._-], not "." or "..". Every rule a client's value must hold is one function in rules.go,
//     and a refusal of it carries its own ErrorCode and the rule's text.
//   - FrameReader caps frames at a limit its owner chooses (FrameSizeMax at most) and grows its buffer
//     for a large frame only while that frame is pending, and only as its bytes arrive: doubling when
//     full, up to the frame's size. A header reserves nothing, so a thousand connections that each claim
//     a FrameSizeMax body and go silent hold their own buffers, not 64 GiB; a reader holds at most its
//     buffer size or twice what it received of the pending frame (Reserved). The price is a few
//     allocations and copies (log2 of frame over buffer size) for a frame larger than the buffer; frames
//     within the buffer cost none. Any framing error is sticky: once the stream is misaligned nothing
//     after it can be trusted, so the connection is closed.
//   - Checksums are xxhash64 with seed 0. They detect corruption, not forgery: links inside a cluster
//     are trusted once their handshake authenticated, and the cluster id check keeps nodes of two
//     clusters apart.
//   - Who may connect (auth.go, client_auth.go): with a cluster secret, each handshake is a challenge
//     from both sides. The side that connects sends a 32-byte nonce, the other answers with its own
//     nonce and an HMAC-SHA256 under the secret over both sides' identities and nonces, and the side
//     that connected answers with its own HMAC over the same transcript under another label (peer:
//     Handshake, Handshake, HandshakeProof; client: ClientHello, ClientChallenge, ClientProof). The
//     secret never crosses the wire, each proof covers the other side's fresh nonce so a recorded one
//     is refused, and the labels differ per side and per kind so a proof cannot be reflected. Frames
//     after the handshake carry no MAC (no confidentiality or integrity against an active attacker on
//     the path: that is TLS's job, not this one's). A zero nonce means "no secret": with an empty
//     secret on both ends authentication is off; a mismatch is refused with ErrAuthMissing (the peer
//     has no secret) or ErrAuthNoSecret (this side has none), a wrong proof with ErrAuthFailed. wire
//     draws no nonces (no I/O): callers use crypto/rand.
package wire
