package wire_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ringstream/ringstream/wire"
)

var (
	secretA = []byte("cluster secret A, 32 bytes long!")
	secretB = []byte("cluster secret B, 32 bytes long!")
)

// peerExchange runs the three frames of a peer handshake through the encoders and decoders: the dialer
// with dialSecret, the acceptor with acceptSecret. It returns the acceptor's and the dialer's verdicts,
// and the frames that crossed the wire.
func peerExchange(t *testing.T, dialSecret, acceptSecret []byte, dialNonce, acceptNonce wire.Nonce) (acceptErr, dialErr error, wireBytes []byte, proof wire.Proof) {
	t.Helper()
	dial := wire.Handshake{Node: 2, Cluster: testCluster, Revision: wire.Revision, Shard: 1, ShardCount: 4}
	if len(dialSecret) > 0 {
		dial.Nonce = dialNonce
	}
	f1 := wire.AppendHandshake(nil, dial)
	h, body := parse(t, f1)
	gotDial, err := wire.DecodeHandshake(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := gotDial.CheckAuth(acceptSecret); err != nil {
		return err, nil, f1, proof
	}
	accept := wire.Handshake{Node: 5, Cluster: testCluster, Revision: wire.Revision}
	if len(acceptSecret) > 0 {
		accept.Nonce = acceptNonce
		accept.Proof = wire.AcceptorProof(acceptSecret, &gotDial, &accept)
	}
	f2 := wire.AppendHandshake(nil, accept)
	h, body = parse(t, f2)
	gotAccept, err := wire.DecodeHandshake(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.VerifyAcceptor(dialSecret, &dial, &gotAccept); err != nil {
		return nil, err, append(f1, f2...), proof
	}
	if len(dialSecret) == 0 {
		return nil, nil, append(f1, f2...), proof
	}
	f3 := wire.AppendHandshakeProof(nil, testCluster, dial.Node, wire.DialerProof(dialSecret, &dial, &gotAccept))
	h, body = parse(t, f3)
	proof, err = wire.DecodeHandshakeProof(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	return wire.VerifyDialer(acceptSecret, &gotDial, &accept, proof), nil, append(append(f1, f2...), f3...), proof
}

func TestPeerAuth(t *testing.T) {
	n1, n2 := wire.Nonce{1, 31: 1}, wire.Nonce{2, 31: 2}
	cases := []struct {
		name                     string
		dialSecret, acceptSecret []byte
		acceptWant, dialWant     error
	}{
		{"same secret", secretA, secretA, nil, nil},
		{"no secret on either end: off", nil, nil, nil, nil},
		{"dialer has another secret", secretB, secretA, wire.ErrAuthFailed, wire.ErrAuthFailed},
		{"dialer has no secret", nil, secretA, wire.ErrAuthMissing, nil},
		{"acceptor has no secret", secretA, nil, wire.ErrAuthNoSecret, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			acceptErr, dialErr, frames, _ := peerExchange(t, tc.dialSecret, tc.acceptSecret, n1, n2)
			if !errors.Is(dialErr, tc.dialWant) || (tc.dialWant == nil && dialErr != nil) {
				t.Fatalf("dialer: %v, want %v", dialErr, tc.dialWant)
			}
			if tc.dialWant == nil && (!errors.Is(acceptErr, tc.acceptWant) || (tc.acceptWant == nil && acceptErr != nil)) {
				t.Fatalf("acceptor: %v, want %v", acceptErr, tc.acceptWant)
			}
			for _, s := range [][]byte{secretA, secretB} {
				if bytes.Contains(frames, s) || bytes.Contains(frames, s[:8]) {
					t.Fatal("the secret crossed the wire")
				}
			}
		})
	}
}

// TestPeerAuthReplayRefused: a dialer's proof recorded on one connection is refused on the next, whose
// acceptor drew a new nonce; a proof is not accepted for the other direction; and a proof binds the
// dialer's identity.
func TestPeerAuthReplayRefused(t *testing.T) {
	n1, n2, n3 := wire.Nonce{1, 31: 1}, wire.Nonce{2, 31: 2}, wire.Nonce{3, 31: 3}
	_, _, _, recorded := peerExchange(t, secretA, secretA, n1, n2)
	dial := wire.Handshake{Node: 2, Cluster: testCluster, Revision: wire.Revision, Shard: 1, ShardCount: 4, Nonce: n1}
	accept := wire.Handshake{Node: 5, Cluster: testCluster, Revision: wire.Revision, Nonce: n2}
	if err := wire.VerifyDialer(secretA, &dial, &accept, recorded); err != nil {
		t.Fatalf("the recorded proof on its own connection: %v", err)
	}
	fresh := accept
	fresh.Nonce = n3
	if err := wire.VerifyDialer(secretA, &dial, &fresh, recorded); !errors.Is(err, wire.ErrAuthFailed) {
		t.Fatalf("replayed proof: %v, want ErrAuthFailed", err)
	}
	accept.Proof = wire.AcceptorProof(secretA, &dial, &accept)
	if err := wire.VerifyDialer(secretA, &dial, &accept, accept.Proof); !errors.Is(err, wire.ErrAuthFailed) {
		t.Fatalf("reflected acceptor proof: %v, want ErrAuthFailed", err)
	}
	other := dial
	other.Node = 3
	if err := wire.VerifyDialer(secretA, &other, &accept, recorded); !errors.Is(err, wire.ErrAuthFailed) {
		t.Fatalf("proof for another node: %v, want ErrAuthFailed", err)
	}
	stale := accept
	stale.Proof[0] ^= 1
	if err := wire.VerifyAcceptor(secretA, &dial, &stale); !errors.Is(err, wire.ErrAuthFailed) {
		t.Fatalf("altered acceptor proof: %v, want ErrAuthFailed", err)
	}
}

// clientExchange runs the client handshake: hello, challenge, proof.
func clientExchange(t *testing.T, clientSecret, nodeSecret []byte) (nodeErr, clientErr error, frames []byte) {
	t.Helper()
	hello := wire.ClientHello{RequestID: 1, Cluster: testCluster, Revision: wire.Revision}
	if len(clientSecret) > 0 {
		hello.Nonce = wire.Nonce{4, 31: 4}
	}
	f1 := wire.AppendClientHello(nil, &hello)
	h, body := parse(t, f1)
	gotHello, err := wire.DecodeClientHello(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := gotHello.Check(testCluster, nodeSecret); err != nil {
		return err, nil, f1
	}
	ch := wire.ClientChallenge{RequestID: 1, Cluster: testCluster, Revision: wire.Revision, Node: 7}
	if len(nodeSecret) > 0 {
		ch.Nonce = wire.Nonce{5, 31: 5}
		ch.Proof = wire.ClientChallengeProof(nodeSecret, &gotHello, &ch)
	}
	f2 := wire.AppendClientChallenge(nil, &ch)
	h, body = parse(t, f2)
	gotCh, err := wire.DecodeClientChallenge(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.VerifyClientChallenge(clientSecret, &hello, &gotCh); err != nil {
		return nil, err, append(f1, f2...)
	}
	p := wire.ClientProof{RequestID: 1}
	if len(clientSecret) > 0 {
		p.Proof = wire.ClientHelloProof(clientSecret, &hello, &gotCh)
	}
	f3 := wire.AppendClientProof(nil, testCluster, &p)
	h, body = parse(t, f3)
	gotP, err := wire.DecodeClientProof(&h, body)
	if err != nil {
		t.Fatal(err)
	}
	return wire.VerifyClientProof(nodeSecret, &gotHello, &ch, &gotP), nil, append(append(f1, f2...), f3...)
}

func TestClientAuth(t *testing.T) {
	cases := []struct {
		name                     string
		clientSecret, nodeSecret []byte
		nodeWant, clientWant     error
	}{
		{"same secret", secretA, secretA, nil, nil},
		{"off", nil, nil, nil, nil},
		{"wrong secret", secretB, secretA, nil, wire.ErrAuthFailed},
		{"client without secret", nil, secretA, wire.ErrAuthMissing, nil},
		{"node without secret", secretA, nil, wire.ErrAuthNoSecret, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nodeErr, clientErr, frames := clientExchange(t, tc.clientSecret, tc.nodeSecret)
			if !errors.Is(clientErr, tc.clientWant) || (tc.clientWant == nil && clientErr != nil) {
				t.Fatalf("client: %v, want %v", clientErr, tc.clientWant)
			}
			if !errors.Is(nodeErr, tc.nodeWant) || (tc.nodeWant == nil && nodeErr != nil) {
				t.Fatalf("node: %v, want %v", nodeErr, tc.nodeWant)
			}
			if bytes.Contains(frames, secretA[:8]) || bytes.Contains(frames, secretB[:8]) {
				t.Fatal("the secret crossed the wire")
			}
		})
	}
	// A client proof made by a holder of another secret, and one replayed against a new node nonce.
	hello := wire.ClientHello{RequestID: 1, Cluster: testCluster, Revision: wire.Revision, Nonce: wire.Nonce{1, 31: 1}}
	ch := wire.ClientChallenge{RequestID: 1, Cluster: testCluster, Revision: wire.Revision, Node: 7, Nonce: wire.Nonce{2, 31: 2}}
	p := wire.ClientProof{RequestID: 1, Proof: wire.ClientHelloProof(secretB, &hello, &ch)}
	if err := wire.VerifyClientProof(secretA, &hello, &ch, &p); !errors.Is(err, wire.ErrAuthFailed) {
		t.Fatalf("client with another secret: %v", err)
	}
	p.Proof = wire.ClientHelloProof(secretA, &hello, &ch)
	ch2 := ch
	ch2.Nonce[0]++
	if err := wire.VerifyClientProof(secretA, &hello, &ch2, &p); !errors.Is(err, wire.ErrAuthFailed) {
		t.Fatalf("replayed client proof: %v", err)
	}
	if err := (wire.ClientHello{Cluster: 99, Revision: wire.Revision}).Check(testCluster, nil); !errors.Is(err, wire.ErrForeignCluster) {
		t.Fatalf("client of another cluster: %v", err)
	}
	if err := (wire.ClientHello{Cluster: testCluster, Revision: 1}).Check(testCluster, nil); !errors.Is(err, wire.ErrRevision) {
		t.Fatalf("client on revision 1: %v", err)
	}
}
