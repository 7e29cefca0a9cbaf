package agentadmission

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestJSONSinkLine(t *testing.T) {
	var buf bytes.Buffer
	s := NewJSONSink(&buf)
	reset := time.Date(2026, 6, 28, 14, 0, 0, 0, time.UTC)
	full := Event{
		Event: EventDenied, TS: t0, CorrelationID: "9b3d", TaskID: "task-42",
		EntityID: "my-agent", EntityType: "agent", OrgID: "org-7", WorkspaceID: "ws-3",
		Fields: DenyFields{Reason: "cost_limit_exceeded", Scope: "workspace", Window: "daily", ResetAt: &reset},
	}
	bare := Event{
		Event: EventDenied, TS: t0, EntityID: "my-agent", EntityType: "agent",
		Fields: DenyFields{Reason: "r", Scope: "org", Window: "w", Cached: true},
	}
	for _, e := range []Event{full, bare} {
		if err := s.Record(t.Context(), e); err != nil {
			t.Fatal(err)
		}
	}
	want := `{"event":"task_admission_denied","ts":"2026-06-27T08:15:22Z","correlation_id":"9b3d","task_id":"task-42","entity_id":"my-agent","entity_type":"agent","org_id":"org-7","workspace_id":"ws-3","fields":{"reason":"cost_limit_exceeded","scope":"workspace","window":"daily","reset_at":"2026-06-28T14:00:00Z","cached":false}}` + "\n" +
		// Empty ids are left out; a missing reset is null, not left out.
		`{"event":"task_admission_denied","ts":"2026-06-27T08:15:22Z","entity_id":"my-agent","entity_type":"agent","fields":{"reason":"r","scope":"org","window":"w","reset_at":null,"cached":true}}` + "\n"
	if got := buf.String(); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestJSONSinkConcurrentLinesStayWhole(t *testing.T) {
	l := &logs{} // a mutex-guarded buffer
	s := NewJSONSink(l)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				s.Record(t.Context(), Event{Event: EventDenied, EntityID: strings.Repeat("x", g*i)})
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(l.buf.String(), "\n"), "\n")
	if len(lines) != 400 {
		t.Fatalf("%d lines, want 400", len(lines))
	}
	for _, line := range lines {
		var e Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("torn line %q: %v", line, err)
		}
	}
}

type brokenWriter struct{}

func (brokenWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestJSONSinkReportsWriteError(t *testing.T) {
	if err := NewJSONSink(brokenWriter{}).Record(t.Context(), Event{}); err == nil {
		t.Fatal("write error swallowed")
	}
}
