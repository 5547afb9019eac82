package main

import (
	"strings"
	"testing"
	"time"
)

// A template compiles to its literal text and tokens; every escape and %% is literal; anything else
// after a '%' or '\' is refused naming the flag.
func TestParseTemplate(t *testing.T) {
	tm, err := parseTemplate(`a%%b%k\t%v\n\\%h%T%o%S%K%s\r`)
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for _, p := range tm {
		if p.token != 0 {
			got.WriteString("<" + string(p.token) + ">")
		} else {
			got.WriteString(p.lit)
		}
	}
	if want := "a%b<k>\t<v>\n\\<h><T><o><S><K><s>\r"; got.String() != want {
		t.Fatalf("compiled %q, want %q", got.String(), want)
	}
	for _, bad := range []string{"%", `\`, "%x", `\x`, "ok%"} {
		if _, err := parseTemplate(bad); err == nil || !strings.Contains(err.Error(), "--format") {
			t.Errorf("template %q: %v, want a refusal naming --format", bad, err)
		}
	}
}

// --from-time reads digits as unix ms and anything else as RFC 3339.
func TestParseFromTime(t *testing.T) {
	if got, err := parseFromTime("1700000000123"); err != nil || got.UnixMilli() != 1700000000123 {
		t.Fatalf("unix ms: %v %v", got, err)
	}
	if got, err := parseFromTime("2026-12-03T10:55:00.5+01:00"); err != nil ||
		!got.Equal(time.Date(2026, 12, 3, 9, 55, 0, 5e8, time.UTC)) {
		t.Fatalf("RFC 3339: %v %v", got, err)
	}
	for _, bad := range []string{"", "yesterday", "2026-12-03", "99999999999999999999", "-5"} {
		if _, err := parseFromTime(bad); err == nil || !strings.Contains(err.Error(), "--from-time") {
			t.Errorf("--from-time %q: %v, want a refusal naming the flag", bad, err)
		}
	}
}

// --header splits at the first '='; a value may be empty or hold '='; a key may not be empty.
func TestParseHeaderFlags(t *testing.T) {
	hs, err := parseHeaderFlags([]string{"a=1", "b=", "c=x=y"})
	if err != nil || len(hs) != 3 || string(hs[0].Value) != "1" || hs[1].Value == nil || len(hs[1].Value) != 0 ||
		string(hs[2].Key) != "c" || string(hs[2].Value) != "x=y" {
		t.Fatalf("%+v %v", hs, err)
	}
	for _, bad := range []string{"a", "=v", ""} {
		if _, err := parseHeaderFlags([]string{bad}); err == nil || !strings.Contains(err.Error(), "--header") {
			t.Errorf("--header %q: %v", bad, err)
		}
	}
}
