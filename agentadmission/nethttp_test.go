package agentadmission

import (
	"net/http"
	"testing"
	"time"
)

func TestHTTPDenyResponse(t *testing.T) {
	r := newRig(t, platform(t, answer(200, denyJSON)).URL)
	rec, ran := r.serve("/a2a")
	if ran {
		t.Fatal("handler ran on deny")
	}
	if rec.Code != http.StatusPaymentRequired {
		t.Fatalf("status %d", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	// From 2026-06-27T08:15:22Z to 2026-06-28T14:00:00Z.
	if ra := rec.Header().Get("Retry-After"); ra != "107078" {
		t.Fatalf("Retry-After %q", ra)
	}
	const want = `{"error":"admission_denied","reason":"cost_limit_exceeded","scope":"workspace","window":"daily","reset_at":"2026-06-28T14:00:00Z"}`
	if got := rec.Body.String(); got != want {
		t.Fatalf("body\n got %s\nwant %s", got, want)
	}
}

func TestHTTPRetryAfter(t *testing.T) {
	deny := func(reset string) string {
		return `{"decision":"deny","reason":"r","scope":"agent","window":"hourly","reset_at":` + reset + `}`
	}
	for _, tc := range []struct {
		name  string
		reset string
		want  []string
	}{
		{"1.2s rounds up", `"` + t0.Add(1200*time.Millisecond).Format(time.RFC3339Nano) + `"`, []string{"2"}},
		{"past clamps to 0", `"` + t0.Add(-time.Hour).Format(time.RFC3339) + `"`, []string{"0"}},
		{"null omits", `null`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, platform(t, answer(200, deny(tc.reset))).URL)
			rec, _ := r.serve("/a2a")
			if rec.Code != http.StatusPaymentRequired {
				t.Fatalf("status %d", rec.Code)
			}
			got := rec.Header().Values("Retry-After")
			if len(got) != len(tc.want) || (len(got) == 1 && got[0] != tc.want[0]) {
				t.Fatalf("Retry-After %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHTTPRetryAfterCountsDown(t *testing.T) {
	// A cached deny reports the time left now, not when it was fetched.
	reset := t0.Add(10 * time.Second).Format(time.RFC3339)
	r := newRig(t, platform(t, answer(200, `{"decision":"deny","reason":"r","scope":"org","window":"w","reset_at":"`+reset+`"}`)).URL)
	r.serve("/a2a")
	r.clock.Set(t0.Add(3500 * time.Millisecond))
	rec, _ := r.serve("/a2a")
	if ra := rec.Header().Get("Retry-After"); ra != "7" {
		t.Fatalf("Retry-After %q after 3.5s of a 10s reset, want 7", ra)
	}
}

func TestHTTPNullResetBody(t *testing.T) {
	r := newRig(t, platform(t, answer(200, `{"decision":"deny","reason":"r","scope":"org","window":"w","reset_at":null}`)).URL)
	rec, _ := r.serve("/a2a")
	const want = `{"error":"admission_denied","reason":"r","scope":"org","window":"w","reset_at":null}`
	if got := rec.Body.String(); got != want {
		t.Fatalf("body\n got %s\nwant %s", got, want)
	}
}

func TestHTTPAdmitPassesThrough(t *testing.T) {
	r := newRig(t, platform(t, answer(200, admitJSON)).URL)
	rec, ran := r.serve("/a2a")
	if !ran || rec.Code != http.StatusOK || rec.Header().Get("Retry-After") != "" {
		t.Fatalf("ran=%v status=%d headers=%v", ran, rec.Code, rec.Header())
	}
}
