package daemon

import (
	"strings"
	"testing"
)

func TestRedactedHidesThePassword(t *testing.T) {
	if r := redacted("postgresql://u:secret@db.example/ledger"); strings.Contains(r, "secret") || !strings.Contains(r, "db.example") {
		t.Fatalf("redacted URL %q", r)
	}
}
