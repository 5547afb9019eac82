package kafka

import "testing"

func TestPassword(t *testing.T) {
	// printf %s 'ringstream kafka SASL PLAIN password' | openssl dgst -sha256 -hmac 0123456789abcdef
	const want = "3842e9fcd1c9e149510bbac64213d02c7d0f6e7bfe937b3fd80132319ee93f2c"
	if got := Password([]byte("0123456789abcdef")); got != want {
		t.Fatalf("Password %s, want %s (openssl's)", got, want)
	}
}

func TestCheckPlain(t *testing.T) {
	secret := []byte("0123456789abcdef")
	if err := checkPlain([]byte("\x00ringstream\x000123456789abcdef"), secret); err != nil {
		t.Fatalf("good credentials refused: %v", err)
	}
	if err := checkPlain([]byte("admin\x00anyone\x000123456789abcdef"), secret); err != nil {
		t.Fatalf("an authzid and another user name refused: %v", err)
	}
	for _, bad := range []string{"", "\x00ringstream", "\x00\x000123456789abcdef", "\x00ringstream\x000123456789abcde",
		"\x00ringstream\x000123456789abcdefX", "\x00ringstream\x00"} {
		if checkPlain([]byte(bad), secret) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for key, want := range map[int16]bool{apiVersionsKey: true, saslHandshakeKey: true, saslAuthenticateKey: true,
		metadataKey: false, produceKey: false, fetchKey: false, createTopicsKey: false} {
		if beforeAuth(key) != want {
			t.Errorf("api %d before authentication: %v, want %v", key, !want, want)
		}
	}
}
