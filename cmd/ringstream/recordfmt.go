package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ringstream/ringstream/client"
)

// The record options of produce and consume: --header, --format and --from-time.

// parseHeaderFlags reads produce's --header values, each KEY=VALUE split at the first '=' (the value
// may hold more; it may be empty, the key may not).
func parseHeaderFlags(vals []string) ([]client.Header, error) {
	var hs []client.Header
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("--header %q: want KEY=VALUE", v)
		case k == "":
			return nil, fmt.Errorf("--header %q: an empty key", v)
		}
		hs = append(hs, client.Header{Key: []byte(k), Value: []byte(val)})
	}
	return hs, nil
}

// formatTokens is consume --format's help text for its tokens.
const formatTokens = "%k key, %v or %s value, %o offset, %T timestamp (unix ms), %h headers (k=v,k=v), %K key size, " +
	"%S value size (-1 when null), %% a '%'; \\n newline, \\t tab, \\r carriage return, \\\\ a backslash"

// tmplPart is one piece of a --format template: literal text, or the field a token names.
type tmplPart struct {
	lit   string
	token byte // 0: lit
}

// recordTemplate is a compiled --format template.
type recordTemplate []tmplPart

// parseTemplate compiles a --format template (kcat's tokens, formatTokens). A record's line is what
// the template says, with no newline added: end it with \n.
func parseTemplate(s string) (recordTemplate, error) {
	var t recordTemplate
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t = append(t, tmplPart{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' && c != '\\' {
			lit.WriteByte(c)
			continue
		}
		if i+1 == len(s) {
			return nil, fmt.Errorf("--format %q: a %q at the end with nothing after it (tokens: %s)", s, c, formatTokens)
		}
		i++
		n := s[i]
		if c == '\\' {
			switch n {
			case 'n':
				lit.WriteByte('\n')
			case 't':
				lit.WriteByte('\t')
			case 'r':
				lit.WriteByte('\r')
			case '\\':
				lit.WriteByte('\\')
			default:
				return nil, fmt.Errorf("--format %q: unknown escape \\%c at byte %d (tokens: %s)", s, n, i-1, formatTokens)
			}
			continue
		}
		switch n {
		case '%':
			lit.WriteByte('%')
		case 'k', 'v', 's', 'o', 'T', 'h', 'K', 'S':
			flush()
			t = append(t, tmplPart{token: n})
		default:
			return nil, fmt.Errorf("--format %q: unknown token %%%c at byte %d (tokens: %s)", s, n, i-1, formatTokens)
		}
	}
	flush()
	return t, nil
}

// appendRecord appends the current record of recs as the template says.
func (t recordTemplate) appendRecord(dst []byte, recs *client.Records) []byte {
	for _, p := range t {
		switch p.token {
		case 0:
			dst = append(dst, p.lit...)
		case 'k':
			dst = append(dst, recs.Key()...)
		case 'v', 's':
			dst = append(dst, recs.Value()...)
		case 'o':
			dst = strconv.AppendUint(dst, recs.Offset(), 10)
		case 'T':
			dst = strconv.AppendInt(dst, recs.Timestamp().UnixMilli(), 10)
		case 'K':
			dst = strconv.AppendInt(dst, nullableLen(recs.Key()), 10)
		case 'S':
			dst = strconv.AppendInt(dst, nullableLen(recs.Value()), 10)
		case 'h':
			first := true
			for it := recs.Headers(); it.Next(); {
				if !first {
					dst = append(dst, ',')
				}
				first = false
				h := it.Header()
				dst = append(dst, h.Key...)
				if h.Value != nil { // a null value prints as the key alone
					dst = append(dst, '=')
					dst = append(dst, h.Value...)
				}
			}
		}
	}
	return dst
}

// nullableLen is len(b), or -1 when b is null.
func nullableLen(b []byte) int64 {
	if b == nil {
		return -1
	}
	return int64(len(b))
}

// parseFromTime reads consume --from-time: RFC 3339 (with a zone), or unix milliseconds (digits only).
func parseFromTime(s string) (time.Time, error) {
	if s != "" && strings.Trim(s, "0123456789") == "" {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("--from-time %q: unix milliseconds out of range", s)
		}
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--from-time %q: want RFC 3339 (2026-12-03T10:55:00Z) or unix milliseconds", s)
	}
	return t, nil
}

// recordJSON is one record in `consume --json` output (one JSON object a line). A key, value or header
// value that is UTF-8 is a string, else base64 under the _base64 name; a null one is left out.
type recordJSON struct {
	Offset    uint64       `json:"offset"`
	Timestamp int64        `json:"timestamp"` // unix ms: the producer's, or the batch's append time (format 1)
	Key       *string      `json:"key,omitempty"`
	KeyBase64 []byte       `json:"key_base64,omitempty"`
	Value     *string      `json:"value,omitempty"`
	Base64    []byte       `json:"value_base64,omitempty"`
	Headers   []headerJSON `json:"headers,omitempty"`
}

type headerJSON struct {
	Key       *string `json:"key,omitempty"`
	KeyBase64 []byte  `json:"key_base64,omitempty"`
	Value     *string `json:"value,omitempty"`
	Base64    []byte  `json:"value_base64,omitempty"`
}

// textOrBase64 sets the string or base64 form of b (neither when b is null).
func textOrBase64(b []byte, s **string, raw *[]byte) {
	switch {
	case b == nil:
	case utf8.Valid(b):
		v := string(b)
		*s = &v
	default:
		*raw = append([]byte{}, b...)
	}
}

// newRecordJSON is the current record of recs as --json prints it.
func newRecordJSON(recs *client.Records) recordJSON {
	r := recordJSON{Offset: recs.Offset(), Timestamp: recs.Timestamp().UnixMilli()}
	textOrBase64(recs.Key(), &r.Key, &r.KeyBase64)
	textOrBase64(recs.Value(), &r.Value, &r.Base64)
	for it := recs.Headers(); it.Next(); {
		var h headerJSON
		textOrBase64(it.Header().Key, &h.Key, &h.KeyBase64)
		textOrBase64(it.Header().Value, &h.Value, &h.Base64)
		r.Headers = append(r.Headers, h)
	}
	return r
}
