package agentadmission

import (
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reset time.Time
		secs  int64
		ok    bool
	}{
		{"rounds 1.2s up", t0.Add(1200 * time.Millisecond), 2, true},
		{"one nanosecond is a second", t0.Add(time.Nanosecond), 1, true},
		{"whole seconds stay", t0.Add(7142 * time.Second), 7142, true},
		{"exactly now is 0", t0, 0, true},
		{"past clamps to 0", t0.Add(-90 * time.Second), 0, true},
		{"no reset, no header", time.Time{}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secs, ok := Decision{Denied: true, ResetAt: tc.reset}.RetryAfter(t0)
			if secs != tc.secs || ok != tc.ok {
				t.Fatalf("RetryAfter = %d, %v; want %d, %v", secs, ok, tc.secs, tc.ok)
			}
		})
	}
}

func TestDenyBody(t *testing.T) {
	d := Decision{Denied: true, Reason: "cost_limit_exceeded", Scope: "workspace", Window: "daily",
		ResetAt: time.Date(2026, 6, 28, 14, 0, 0, 0, time.UTC)}
	const want = `{"error":"admission_denied","reason":"cost_limit_exceeded","scope":"workspace","window":"daily","reset_at":"2026-06-28T14:00:00Z"}`
	if got := string(d.body()); got != want {
		t.Fatalf("body\n got %s\nwant %s", got, want)
	}

	d.ResetAt = time.Time{}
	const wantNull = `{"error":"admission_denied","reason":"cost_limit_exceeded","scope":"workspace","window":"daily","reset_at":null}`
	if got := string(d.body()); got != wantNull {
		t.Fatalf("body without reset\n got %s\nwant %s", got, wantNull)
	}
}
