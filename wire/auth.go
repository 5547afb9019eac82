package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// Authentication errors, each with one meaning. A handshake refused with one of them is counted by
// the caller and the connection closed.
var (
	// ErrAuthFailed: the peer's proof does not match: it holds another cluster secret, or it replayed
	// a proof recorded from another connection.
	ErrAuthFailed = errors.New("wire: authentication failed (wrong cluster secret or replayed proof)")
	// ErrAuthMissing: this node has a cluster secret and the peer did not authenticate (it has none).
	ErrAuthMissing = errors.New("wire: peer did not authenticate (it has no cluster secret)")
	// ErrAuthNoSecret: the peer authenticates and this node has no cluster secret to check it with.
	ErrAuthNoSecret = errors.New("wire: peer authenticates but this node has no cluster secret")
)

// NonceSize and ProofSize are the sizes of a handshake nonce and of an HMAC-SHA256 proof.
const (
	NonceSize = 32
	ProofSize = sha256.Size
)

// Nonce is a handshake's fresh random value (crypto/rand, drawn by the caller for each connection: wire
// does no I/O). All zero means the sender has no secret: authentication off.
type Nonce [NonceSize]byte

// Proof is an HMAC-SHA256 under the cluster secret over both sides' nonces and identities.
type Proof [ProofSize]byte

// Proof labels: each side proves under its own label, so a proof cannot be reflected back to its sender,
// and peer and client proofs cannot stand in for each other.
const (
	labelPeerAccept   = "ringstream peer accept v2"
	labelPeerDial     = "ringstream peer dial v2"
	labelClientServer = "ringstream client server v2"
	labelClientClient = "ringstream client client v2"
)

// checkAuthMode decides whether the peer's nonce fits this side's secret: both set, or both unset.
func checkAuthMode(secret []byte, peerNonce *Nonce, who string) error {
	switch authenticates := *peerNonce != (Nonce{}); {
	case len(secret) > 0 && !authenticates:
		return fmt.Errorf("%w: %s sent no challenge; set the cluster secret on it", ErrAuthMissing, who)
	case len(secret) == 0 && authenticates:
		return fmt.Errorf("%w: %s sent a challenge; set the same cluster secret on this node", ErrAuthNoSecret, who)
	}
	return nil
}

// appendIdentity appends a peer handshake's identity to a MAC transcript.
func appendIdentity(b []byte, hs *Handshake) []byte {
	b = binary.LittleEndian.AppendUint16(b, hs.Node)
	b = binary.LittleEndian.AppendUint16(b, hs.Revision)
	b = binary.LittleEndian.AppendUint16(b, hs.Shard)
	b = binary.LittleEndian.AppendUint16(b, hs.ShardCount)
	b = binary.LittleEndian.AppendUint64(b, hs.Cluster)
	return append(b, hs.Nonce[:]...)
}

// mac is HMAC-SHA256 under secret over label and transcript.
func mac(secret []byte, label string, transcript []byte) Proof {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write(transcript)
	var p Proof
	m.Sum(p[:0])
	return p
}

// peerTranscript is both peer handshakes, the dialer's first, without the acceptor's proof.
func peerTranscript(dial, accept *Handshake) []byte {
	b := make([]byte, 0, 2*(16+NonceSize))
	b = appendIdentity(b, dial)
	return appendIdentity(b, accept)
}

// CheckAuth decides whether the peer's handshake fits this node's secret before any proof is looked at:
// with a secret the peer must send a nonce (else ErrAuthMissing); without one it must not (else
// ErrAuthNoSecret). With an empty secret on both ends authentication is off and CheckAuth passes.
func (hs Handshake) CheckAuth(secret []byte) error {
	return checkAuthMode(secret, &hs.Nonce, fmt.Sprintf("node %d", hs.Node))
}

// AcceptorProof is the proof the accepting side puts in its answer (accept.Proof): it covers the
// dialer's fresh nonce, so the dialer knows the answer is new and comes from a holder of the secret.
func AcceptorProof(secret []byte, dial, accept *Handshake) Proof {
	return mac(secret, labelPeerAccept, peerTranscript(dial, accept))
}

// DialerProof is the proof the dialing side sends in its HandshakeProof frame once the answer checked
// out: it covers the acceptor's fresh nonce, so a proof recorded from another connection is refused.
func DialerProof(secret []byte, dial, accept *Handshake) Proof {
	return mac(secret, labelPeerDial, peerTranscript(dial, accept))
}

// VerifyAcceptor is the dialer's check of the acceptor's answer. With authentication off (empty secret,
// and CheckAuth passed) there is nothing to verify.
func VerifyAcceptor(secret []byte, dial, accept *Handshake) error {
	if err := accept.CheckAuth(secret); err != nil || len(secret) == 0 {
		return err
	}
	want := AcceptorProof(secret, dial, accept)
	if !hmac.Equal(want[:], accept.Proof[:]) {
		return fmt.Errorf("%w: node %d's answer does not prove the cluster secret", ErrAuthFailed, accept.Node)
	}
	return nil
}

// VerifyDialer is the acceptor's check of the dialer's proof frame.
func VerifyDialer(secret []byte, dial, accept *Handshake, p Proof) error {
	if len(secret) == 0 {
		return fmt.Errorf("%w: node %d sent a proof", ErrAuthNoSecret, dial.Node)
	}
	want := DialerProof(secret, dial, accept)
	if !hmac.Equal(want[:], p[:]) {
		return fmt.Errorf("%w: node %d's proof does not match this connection", ErrAuthFailed, dial.Node)
	}
	return nil
}

// HandshakeProof area layout: node u16 | reserved [6] | proof [32]; the rest of the area is zero and the
// body is empty.
const (
	proofNode    = 0
	proofProof   = 8
	proofAreaEnd = proofProof + ProofSize
)

// AppendHandshakeProof appends the dialer's proof frame (CommandHandshakeProof), the third and last
// frame of an authenticated peer handshake.
func AppendHandshakeProof(dst []byte, cluster uint64, node uint16, p Proof) []byte {
	h := Header{Cluster: cluster, Sender: node, Command: CommandHandshakeProof}
	binary.LittleEndian.PutUint16(h.Area[proofNode:], node)
	copy(h.Area[proofProof:], p[:])
	start := len(dst)
	dst = BeginFrame(dst, &h)
	EndFrame(dst[start:], 0)
	return dst
}

// DecodeHandshakeProof reads a parsed proof frame. Whether the proof holds is VerifyDialer's job.
func DecodeHandshakeProof(h *Header, body []byte) (Proof, error) {
	if h.Command != CommandHandshakeProof {
		return Proof{}, wrongCommand(h.Command, CommandHandshakeProof)
	}
	if len(body) != 0 {
		return Proof{}, ErrTrailingBytes
	}
	a := h.Area[:]
	if !zero(a[proofNode+2:proofProof]) || !zero(a[proofAreaEnd:]) {
		return Proof{}, ErrReserved
	}
	if binary.LittleEndian.Uint16(a[proofNode:]) != h.Sender {
		return Proof{}, malformed("handshake proof node differs from the header's sender")
	}
	var p Proof
	copy(p[:], a[proofProof:proofAreaEnd])
	return p, nil
}
