package shard

import (
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/ringstream/ringstream/wire"
)

// The peer handshake on both ends: R18's checks and, with a cluster secret, the proofs (wire/auth.go).

// onProof checks the dialer's proof of the cluster secret, the last frame of its handshake.
func (cn *conn) onProof() {
	h, body, err := wire.ParseFrame(cn.hello.buf[:])
	var p wire.Proof
	if err == nil {
		p, err = wire.DecodeHandshakeProof(&h, body)
	}
	if err == nil && h.Sender != cn.peer.Node {
		err = fmt.Errorf("%w: proof from node %d on node %d's connection", wire.ErrAuthFailed, h.Sender, cn.peer.Node)
	}
	if err == nil {
		err = wire.VerifyDialer(cn.s.cfg.Secret, &cn.peer, &cn.ours, p)
	}
	if err != nil {
		cn.refuse(err)
		return
	}
	cn.handOn()
}

// refuse closes a connection whose handshake was refused, counted and logged with the reason.
func (cn *conn) refuse(err error) {
	s := cn.s
	s.stats.HandshakeErrors.Add(1)
	if isAuthErr(err) {
		s.stats.AuthRefused.Add(1)
	}
	s.cl.closes.note(&s.stats, s.tick.Number, closePeerHandshakeRefused, "peer", cn.peer.Node, "err", err)
	cn.close()
}

// isAuthErr reports whether err refuses a handshake for the cluster secret.
func isAuthErr(err error) bool {
	return errors.Is(err, wire.ErrAuthFailed) || errors.Is(err, wire.ErrAuthMissing) ||
		errors.Is(err, wire.ErrAuthNoSecret)
}

// handshake is this shard's handshake, with a fresh nonce when the node has a secret.
func (s *Shard) handshake() wire.Handshake {
	hs := wire.Handshake{Node: s.cfg.Node, Cluster: s.cfg.Cluster, Revision: wire.Revision,
		Shard: uint16(s.index), ShardCount: uint16(len(s.node.shards))}
	if len(s.cfg.Secret) > 0 {
		_, _ = rand.Read(hs.Nonce[:]) // crypto/rand: never fails (it aborts the process if it cannot)
	}
	return hs
}

// checkHandshake checks the peer's handshake: its cluster, revision (R18), node id and, with a cluster
// secret, its proof; it returns this side's proof to send.
func (l *link) checkHandshake() (wire.Proof, error) {
	h, body, err := wire.ParseFrame(l.hello.buf[:])
	if err != nil {
		return wire.Proof{}, err
	}
	hs, err := wire.DecodeHandshake(&h, body)
	if err != nil {
		return wire.Proof{}, err
	}
	if err := hs.Check(l.s.cfg.Cluster); err != nil {
		return wire.Proof{}, err
	}
	if hs.Node != l.peer.Node {
		return wire.Proof{}, fmt.Errorf("%w: peer at %v says it is node %d, want %d", ErrUnknownPeer, l.peer.Addr,
			hs.Node, l.peer.Node)
	}
	if err := wire.VerifyAcceptor(l.s.cfg.Secret, &l.ours, &hs); err != nil {
		return wire.Proof{}, err
	}
	if len(l.s.cfg.Secret) == 0 {
		return wire.Proof{}, nil
	}
	return wire.DialerProof(l.s.cfg.Secret, &l.ours, &hs), nil
}
