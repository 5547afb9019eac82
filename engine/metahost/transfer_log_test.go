package metahost

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestLogTransfer_RepeatsThinnedCausesKept: a refusal that repeats on every repair is logged at its
// 1st, 2nd, 4th... occurrence and whenever its cause changes; an abandon the same; an install always.
func TestLogTransfer_RepeatsThinnedCausesKept(t *testing.T) {
	var out bytes.Buffer
	g := &Group{log: slog.New(slog.NewTextHandler(&out, nil))}
	var prev Status
	step := func(f func(*TransferStats)) {
		now := prev
		f(&now.Transfer)
		g.logTransfer(&now, &prev)
		prev = now
	}
	for range 5 {
		step(func(s *TransferStats) { s.Refused++; s.LastRefusal = "too large" })
	}
	step(func(s *TransferStats) { s.Refused++; s.LastRefusal = "checksum" })
	for range 3 {
		step(func(s *TransferStats) { s.Abandoned++ })
	}
	step(func(s *TransferStats) { s.Installed++ })
	text := out.String()
	if n := strings.Count(text, "state transfer refused"); n != 4 || !strings.Contains(text, "cause=checksum") {
		t.Errorf("%d refusal lines (want 4: the 1st, 2nd and 4th, then the new cause):\n%s", n, text)
	}
	if n := strings.Count(text, "state transfer abandoned"); n != 2 {
		t.Errorf("%d abandon lines, want 2 (the 1st and 2nd of 3):\n%s", n, text)
	}
	if n := strings.Count(text, "checkpoint installed"); n != 1 {
		t.Errorf("%d install lines, want 1:\n%s", n, text)
	}
}
