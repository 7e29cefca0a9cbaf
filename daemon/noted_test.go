package daemon

import (
	"path/filepath"
	"testing"

	"github.com/tollgated/tollgated/spool"
)

// TestNotedSpoolReportsWhatOnDurableSaid: the plane and the exporter are
// woken by OnDurable before the spool publishes its mark, so what they read
// must already include the batch OnDurable reported, and never go back.
func TestNotedSpoolReportsWhatOnDurableSaid(t *testing.T) {
	var seen, after []uint64
	noted := &notedSpool{}
	s, err := spool.Open(filepath.Join(t.TempDir(), "spool"), spool.Options{OnDurable: func(seq uint64) {
		seen = append(seen, noted.Spool.Durable())
		noted.note(seq)
		after = append(after, noted.Durable())
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	noted.Spool = s
	for range 3 {
		if _, err := s.Append([]byte("usage")); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if len(after) == 0 {
		t.Fatal("OnDurable never ran")
	}
	for i := range after {
		if seen[i] >= after[i] {
			t.Fatalf("call %d: the spool already reported %d, the noted mark %d: the test shows nothing", i, seen[i], after[i])
		}
	}
	if got := noted.Durable(); got != 3 {
		t.Fatalf("Durable %d after three synced records, want 3", got)
	}
	noted.note(1)
	if got := noted.Durable(); got != 3 {
		t.Fatalf("a lower note moved the mark back to %d", got)
	}
}
