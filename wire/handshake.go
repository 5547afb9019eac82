package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrForeignCluster: the peer's handshake names another cluster id (R18).
var ErrForeignCluster = errors.New("wire: peer belongs to another cluster")

// Handshake is the first frame on every node-to-node connection, sent by both ends (R18). It says who
// the sender is and which cluster and wire revision it speaks. Shard and ShardCount name the sending
// shard when links are per shard; both are 0 on a node-level link.
//
// With a cluster secret, Nonce is the sender's fresh challenge and the acceptor's answer carries Proof
// (AcceptorProof); the dialer then sends a HandshakeProof frame (DialerProof). Without a secret both
// are zero. See auth.go.
type Handshake struct {
	Node       uint16
	Cluster    uint64
	Revision   uint16
	Shard      uint16
	ShardCount uint16
	Nonce      Nonce
	Proof      Proof
}

// Handshake area layout: node u16 | revision u16 | shard u16 | shard_count u16 | cluster u64 |
// nonce [32] | proof [32]; the rest of the area is zero and the body is empty.
const (
	handshakeNode       = 0
	handshakeRevision   = 2
	handshakeShard      = 4
	handshakeShardCount = 6
	handshakeCluster    = 8
	handshakeNonce      = 16
	handshakeProof      = handshakeNonce + NonceSize
	handshakeAreaEnd    = handshakeProof + ProofSize
)

// AppendHandshake appends a handshake frame from hs.Node to dst. hs.Revision is written as given, so a
// caller normally sets it to Revision.
func AppendHandshake(dst []byte, hs Handshake) []byte {
	h := Header{Cluster: hs.Cluster, Sender: hs.Node, Command: CommandHandshake}
	a := h.Area[:]
	binary.LittleEndian.PutUint16(a[handshakeNode:], hs.Node)
	binary.LittleEndian.PutUint16(a[handshakeRevision:], hs.Revision)
	binary.LittleEndian.PutUint16(a[handshakeShard:], hs.Shard)
	binary.LittleEndian.PutUint16(a[handshakeShardCount:], hs.ShardCount)
	binary.LittleEndian.PutUint64(a[handshakeCluster:], hs.Cluster)
	copy(a[handshakeNonce:], hs.Nonce[:])
	copy(a[handshakeProof:], hs.Proof[:])
	start := len(dst)
	dst = BeginFrame(dst, &h)
	EndFrame(dst[start:], 0)
	return dst
}

// DecodeHandshake reads a parsed handshake frame. It checks the frame's own consistency (the area
// repeats the header's sender and cluster); whether this node accepts the peer is Check's job.
func DecodeHandshake(h *Header, body []byte) (Handshake, error) {
	if h.Command != CommandHandshake {
		return Handshake{}, wrongCommand(h.Command, CommandHandshake)
	}
	if len(body) != 0 {
		return Handshake{}, ErrTrailingBytes
	}
	a := h.Area[:]
	if !zero(a[handshakeAreaEnd:]) {
		return Handshake{}, ErrReserved
	}
	hs := Handshake{
		Node:       binary.LittleEndian.Uint16(a[handshakeNode:]),
		Revision:   binary.LittleEndian.Uint16(a[handshakeRevision:]),
		Shard:      binary.LittleEndian.Uint16(a[handshakeShard:]),
		ShardCount: binary.LittleEndian.Uint16(a[handshakeShardCount:]),
		Cluster:    binary.LittleEndian.Uint64(a[handshakeCluster:]),
	}
	copy(hs.Nonce[:], a[handshakeNonce:handshakeProof])
	copy(hs.Proof[:], a[handshakeProof:handshakeAreaEnd])
	if hs.Node != h.Sender {
		return Handshake{}, malformed("handshake node differs from the header's sender")
	}
	if hs.Cluster != h.Cluster {
		return Handshake{}, malformed("handshake cluster differs from the header's cluster")
	}
	if hs.ShardCount != 0 && hs.Shard >= hs.ShardCount {
		return Handshake{}, malformed("handshake shard not below shard_count")
	}
	return hs, nil
}

// Check decides whether this node, of cluster, accepts the peer's handshake. A peer on another revision
// (revision 1 in particular) is refused with ErrRevision, a peer of another cluster with
// ErrForeignCluster, and the message names the node and both values (R18).
func (hs Handshake) Check(cluster uint64) error {
	if hs.Node == 0 {
		return fmt.Errorf("%w: handshake from node 0", ErrSender)
	}
	if hs.Revision != Revision {
		return fmt.Errorf("%w: node %d speaks wire revision %d, this node speaks %d",
			ErrRevision, hs.Node, hs.Revision, Revision)
	}
	if hs.Cluster != cluster {
		return fmt.Errorf("%w: node %d is in cluster %#x, this node is in cluster %#x",
			ErrForeignCluster, hs.Node, hs.Cluster, cluster)
	}
	return nil
}
