package kafka

import "testing"

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
