package kafka

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringstream/ringstream/shard"
)

// SASL PLAIN over SaslHandshake (v1, then SaslAuthenticate; v0, then a bare token): on a cluster
// with a secret, a Kafka connection authenticates before anything but ApiVersions, with any user
// name and the Kafka password derived from the cluster secret (Password). PLAIN sends the
// password in the clear, so it is not the secret itself, which authenticates peers and clients by
// HMAC and never crosses the wire: a password read off the network opens the Kafka listener, not
// the peer links. Without a secret the listener is open, as the client listener is.

const (
	saslHandshakeKey    int16 = 17
	saslAuthenticateKey int16 = 36

	errUnsupportedSASLMechanism int16 = 33
	errIllegalSASLState         int16 = 34
	errSASLAuthenticationFailed int16 = 58

	saslPlain = "PLAIN"
)

// passwordLabel is what the Kafka password is an HMAC of, keyed by the cluster secret.
const passwordLabel = "ringstream kafka SASL PLAIN password"

// Password is the SASL PLAIN password of a cluster with secret: the hex of HMAC-SHA256 keyed by the
// secret over passwordLabel. `ringstream cluster up` writes it to DIR/kafka-password; with openssl:
// printf %s 'ringstream kafka SASL PLAIN password' | openssl dgst -sha256 -hmac "$(cat SECRETFILE)".
func Password(secret []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(passwordLabel))
	return hex.EncodeToString(m.Sum(nil))
}

// beforeAuth reports whether a request of key may come before the connection authenticated.
func beforeAuth(key int16) bool {
	return key == apiVersionsKey || key == saslHandshakeKey || key == saslAuthenticateKey
}

func serveSASLHandshake(h *Handler, _ *shard.Shard, st *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.SASLHandshakeRequest)
	resp := kmsg.NewPtrSASLHandshakeResponse()
	resp.SetVersion(req.Version)
	r.resp = resp
	resp.SupportedMechanisms = []string{saslPlain}
	c := st.conns[r.conn]
	if req.Mechanism != saslPlain {
		resp.ErrorCode = errUnsupportedSASLMechanism
		h.metrics.errorCode(saslHandshakeKey, resp.ErrorCode)
		return
	}
	c.saslPlain = true
	c.rawSASL = req.Version == 0 // version 0: the token follows as a bare size-prefixed frame
}

// rawSASLToken takes the bare PLAIN token that follows a SaslHandshake v0: an empty token (a size
// of 0) answers a good one; a bad one closes the connection, as Kafka brokers do.
func (h *Handler) rawSASLToken(s *shard.Shard, st *shardState, connID uint64, c *conn, token []byte) error {
	c.rawSASL = false
	if err := checkPlain(token, h.password); err != nil {
		h.metrics.errorCode(saslHandshakeKey, errSASLAuthenticationFailed)
		return fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	c.authed = true
	r := &request{conn: connID, raw: []byte{0, 0, 0, 0}}
	c.queue = append(c.queue, r)
	h.settle(s, st, r)
	return nil
}

func serveSASLAuthenticate(h *Handler, _ *shard.Shard, st *shardState, r *request, kreq kmsg.Request) {
	req := kreq.(*kmsg.SASLAuthenticateRequest)
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	resp.SetVersion(req.Version)
	r.resp = resp
	c := st.conns[r.conn]
	fail := func(code int16, msg string) {
		resp.ErrorCode, resp.ErrorMessage = code, &msg
		h.metrics.errorCode(saslAuthenticateKey, code)
		h.log.Warn("kafka: SASL authentication refused", "conn", r.conn, "err", msg)
	}
	switch {
	case !c.saslPlain:
		fail(errIllegalSASLState, "SaslAuthenticate before a SaslHandshake for PLAIN")
	case c.authed:
		fail(errIllegalSASLState, "the connection authenticated already")
	default:
		if err := checkPlain(req.SASLAuthBytes, h.password); err != nil {
			fail(errSASLAuthenticationFailed, err.Error())
			return
		}
		c.authed = true
	}
}

// checkPlain checks a SASL PLAIN message (RFC 4616: authzid NUL authcid NUL passwd): a user name,
// and password (compared in constant time). The validation of SASL credentials.
func checkPlain(msg, password []byte) error {
	parts := bytes.SplitN(msg, []byte{0}, 3)
	if len(parts) != 3 || len(parts[1]) == 0 {
		return fmt.Errorf("kafka: SASL PLAIN message is not authzid NUL user NUL password")
	}
	if subtle.ConstantTimeCompare(parts[2], password) != 1 {
		return fmt.Errorf("kafka: SASL PLAIN password is not the cluster's Kafka password (user %q)", parts[1])
	}
	return nil
}
