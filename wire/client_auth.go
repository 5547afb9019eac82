package wire

import (
	"crypto/hmac"
	"encoding/binary"
	"fmt"
)

// The client handshake (commands 76 to 78), for the client listener: the client sends ClientHello with
// its nonce, the node answers ClientChallenge with its nonce and a proof over both, and the client,
// having checked that proof (VerifyClientChallenge), sends ClientProof, which the node checks
// (VerifyClientProof) before it serves a request. Without a cluster secret the nonces and proofs are
// zero and only revision and cluster are checked. The cluster id travels in the frame header.

// ClientHello is a client's first frame. Area: request_id u64 | revision u16 | reserved [6] |
// nonce [32].
type ClientHello struct {
	RequestID uint64
	Cluster   uint64 // the header's cluster id
	Revision  uint16
	Nonce     Nonce
}

// ClientChallenge is the node's answer to a ClientHello. Area: request_id u64 | revision u16 |
// node u16 | reserved [4] | nonce [32] | proof [32].
type ClientChallenge struct {
	RequestID uint64
	Cluster   uint64 // the header's cluster id
	Revision  uint16
	Node      uint16
	Nonce     Nonce
	Proof     Proof
}

// ClientProof is the client's proof of the secret. Area: request_id u64 | reserved [8] | proof [32].
type ClientProof struct {
	RequestID uint64
	Proof     Proof
}

const (
	clientAuthRevision = 8
	clientAuthNode     = 10
	clientAuthNonce    = 16
	clientAuthProof    = clientAuthNonce + NonceSize // in ClientChallenge
	clientHelloEnd     = clientAuthNonce + NonceSize
	clientChallengeEnd = clientAuthProof + ProofSize
	clientProofProof   = 16
	clientProofEnd     = clientProofProof + ProofSize
)

// AppendClientHello appends a client hello; the sender is 0 (a client is not a node).
func AppendClientHello(dst []byte, m *ClientHello) []byte {
	h := Header{Command: CommandClientHello}
	put64(h.Area[:], clientRequestID, m.RequestID)
	put16(h.Area[:], clientAuthRevision, m.Revision)
	copy(h.Area[clientAuthNonce:], m.Nonce[:])
	dst, start := startFrame(dst, From{Cluster: m.Cluster}, &h)
	return endFrame(dst, start, 0)
}

// DecodeClientHello reads a parsed client hello; Check decides whether the node accepts it.
func DecodeClientHello(h *Header, body []byte) (ClientHello, error) {
	if err := checkHeader(h, CommandClientHello, clientHelloEnd); err != nil {
		return ClientHello{}, err
	}
	if len(body) != 0 {
		return ClientHello{}, ErrTrailingBytes
	}
	if !zero(h.Area[clientAuthRevision+2 : clientAuthNonce]) {
		return ClientHello{}, ErrReserved
	}
	m := ClientHello{RequestID: get64(h.Area[:], clientRequestID), Cluster: h.Cluster,
		Revision: get16(h.Area[:], clientAuthRevision)}
	copy(m.Nonce[:], h.Area[clientAuthNonce:clientHelloEnd])
	return m, nil
}

// Check decides whether a node of cluster with secret serves this client: its revision (ErrRevision),
// its cluster (ErrForeignCluster), and whether it authenticates as the secret requires (ErrAuthMissing,
// ErrAuthNoSecret).
func (m ClientHello) Check(cluster uint64, secret []byte) error {
	if m.Revision != Revision {
		return fmt.Errorf("%w: client speaks wire revision %d, this node speaks %d", ErrRevision, m.Revision, Revision)
	}
	if m.Cluster != cluster {
		return fmt.Errorf("%w: client is for cluster %#x, this node is in cluster %#x", ErrForeignCluster,
			m.Cluster, cluster)
	}
	return checkAuthMode(secret, &m.Nonce, "the client")
}

// AppendClientChallenge appends the node's answer to a client hello.
func AppendClientChallenge(dst []byte, m *ClientChallenge) []byte {
	h := Header{Command: CommandClientChallenge}
	put64(h.Area[:], clientRequestID, m.RequestID)
	put16(h.Area[:], clientAuthRevision, m.Revision)
	put16(h.Area[:], clientAuthNode, m.Node)
	copy(h.Area[clientAuthNonce:], m.Nonce[:])
	copy(h.Area[clientAuthProof:], m.Proof[:])
	dst, start := startFrame(dst, From{Cluster: m.Cluster, Node: m.Node}, &h)
	return endFrame(dst, start, 0)
}

// DecodeClientChallenge reads a parsed challenge; VerifyClientChallenge decides whether it holds.
func DecodeClientChallenge(h *Header, body []byte) (ClientChallenge, error) {
	if err := checkHeader(h, CommandClientChallenge, clientChallengeEnd); err != nil {
		return ClientChallenge{}, err
	}
	if len(body) != 0 {
		return ClientChallenge{}, ErrTrailingBytes
	}
	if !zero(h.Area[clientAuthNode+2 : clientAuthNonce]) {
		return ClientChallenge{}, ErrReserved
	}
	m := ClientChallenge{RequestID: get64(h.Area[:], clientRequestID), Cluster: h.Cluster,
		Revision: get16(h.Area[:], clientAuthRevision), Node: get16(h.Area[:], clientAuthNode)}
	if m.Node == 0 || m.Node != h.Sender {
		return ClientChallenge{}, malformed("client challenge node is 0 or differs from the header's sender")
	}
	copy(m.Nonce[:], h.Area[clientAuthNonce:clientAuthProof])
	copy(m.Proof[:], h.Area[clientAuthProof:clientChallengeEnd])
	return m, nil
}

// AppendClientProof appends the client's proof.
func AppendClientProof(dst []byte, cluster uint64, m *ClientProof) []byte {
	h := Header{Command: CommandClientProof}
	put64(h.Area[:], clientRequestID, m.RequestID)
	copy(h.Area[clientProofProof:], m.Proof[:])
	dst, start := startFrame(dst, From{Cluster: cluster}, &h)
	return endFrame(dst, start, 0)
}

// DecodeClientProof reads a parsed client proof; VerifyClientProof decides whether it holds.
func DecodeClientProof(h *Header, body []byte) (ClientProof, error) {
	if err := checkHeader(h, CommandClientProof, clientProofEnd); err != nil {
		return ClientProof{}, err
	}
	if len(body) != 0 {
		return ClientProof{}, ErrTrailingBytes
	}
	if !zero(h.Area[clientRequestID+8 : clientProofProof]) {
		return ClientProof{}, ErrReserved
	}
	m := ClientProof{RequestID: get64(h.Area[:], clientRequestID)}
	copy(m.Proof[:], h.Area[clientProofProof:clientProofEnd])
	return m, nil
}

// clientTranscript is the hello and the challenge without its proof.
func clientTranscript(hello *ClientHello, ch *ClientChallenge) []byte {
	b := make([]byte, 0, 2*(12+NonceSize))
	b = binary.LittleEndian.AppendUint64(b, hello.Cluster)
	b = binary.LittleEndian.AppendUint16(b, hello.Revision)
	b = append(b, hello.Nonce[:]...)
	b = binary.LittleEndian.AppendUint64(b, ch.Cluster)
	b = binary.LittleEndian.AppendUint16(b, ch.Revision)
	b = binary.LittleEndian.AppendUint16(b, ch.Node)
	return append(b, ch.Nonce[:]...)
}

// ClientChallengeProof is the node's proof in its challenge: it covers the client's fresh nonce.
func ClientChallengeProof(secret []byte, hello *ClientHello, ch *ClientChallenge) Proof {
	return mac(secret, labelClientServer, clientTranscript(hello, ch))
}

// ClientHelloProof is the client's proof: it covers the node's fresh nonce, so a recorded proof is
// refused on another connection.
func ClientHelloProof(secret []byte, hello *ClientHello, ch *ClientChallenge) Proof {
	return mac(secret, labelClientClient, clientTranscript(hello, ch))
}

// VerifyClientChallenge is the client's check of the node's answer: revision, cluster, and, with a
// secret, the node's proof (ErrAuthFailed for a node with another secret).
func VerifyClientChallenge(secret []byte, hello *ClientHello, ch *ClientChallenge) error {
	if ch.Revision != Revision {
		return fmt.Errorf("%w: node %d speaks wire revision %d, this client speaks %d", ErrRevision, ch.Node,
			ch.Revision, Revision)
	}
	if ch.Cluster != hello.Cluster {
		return fmt.Errorf("%w: node %d is in cluster %#x, this client is for cluster %#x", ErrForeignCluster,
			ch.Node, ch.Cluster, hello.Cluster)
	}
	if err := checkAuthMode(secret, &ch.Nonce, fmt.Sprintf("node %d", ch.Node)); err != nil || len(secret) == 0 {
		return err
	}
	want := ClientChallengeProof(secret, hello, ch)
	if !hmac.Equal(want[:], ch.Proof[:]) {
		return fmt.Errorf("%w: node %d's answer does not prove the cluster secret", ErrAuthFailed, ch.Node)
	}
	return nil
}

// VerifyClientProof is the node's check of the client's proof. Without a secret it passes (Check
// already refused a client that authenticates).
func VerifyClientProof(secret []byte, hello *ClientHello, ch *ClientChallenge, p *ClientProof) error {
	if len(secret) == 0 {
		return nil
	}
	want := ClientHelloProof(secret, hello, ch)
	if !hmac.Equal(want[:], p.Proof[:]) {
		return fmt.Errorf("%w: the client's proof does not match this connection", ErrAuthFailed)
	}
	return nil
}
