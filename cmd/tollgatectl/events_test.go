package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/tollgated/tollgated/internal/await"
	"github.com/tollgated/tollgated/internal/daemontest"
)

// lockedBuffer is a bytes.Buffer a running command writes while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestEventsListsAndFollowsTheBilledEventStream: tollgatectl events lists
// a real daemon's billed events, and --follow --json prints each new one
// as a CloudEvent line as it is billed, until interrupted.
func TestEventsListsAndFollowsTheBilledEventStream(t *testing.T) {
	d := daemontest.Start(t, "")
	c := newCtl(t, d)
	c.ok("accounts", "create", "acme")
	c.ok("deposits", "create", "acme", "--units", "100000", "--idempotency-key", "inv-1")
	file := t.TempDir() + "/policy.json"
	if err := os.WriteFile(file, []byte(policyDoc), 0o600); err != nil {
		t.Fatal(err)
	}
	c.ok("accounts", "policy", "set", "acme", "--file", file)
	key := c.json("keys", "create", "acme")["key"].(string)

	var out, errOut lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"events", "--follow", "--json", "--interval", "50ms"},
			func(k string) string { return c.env[k] }, &out, &errOut)
	}()
	var ids []string
	for range 3 {
		status, answer := check(t, d, key)
		if status != 200 {
			t.Fatalf("check: %d %v", status, answer)
		}
		ids = append(ids, answer["request_id"].(string))
	}
	// Short of three after the bound, the count below says so.
	await.Poll(await.Default, func() bool { return strings.Count(out.String(), "\n") >= 3 })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("events --follow: exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("events --follow printed %d lines, want 3:\n%s", len(lines), out.String())
	}
	for i, l := range lines {
		var ev struct {
			SpecVersion, ID, Subject string
			Data                     struct{ Units int }
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.SpecVersion != "1.0" || ev.ID != ids[i] ||
			ev.Subject != "acme" || ev.Data.Units != 10 {
			t.Fatalf("line %d: %s (%v), want the event of request %s", i, l, err, ids[i])
		}
	}
	if !strings.Contains(errOut.String(), "cursor: ") {
		t.Fatalf("no cursor on standard error: %q", errOut.String())
	}

	table := c.ok("events", "--all")
	contains(t, "events", table, "SUBJECT", "KIND", "lease", ids[0], ids[2])
	d.Stop()
}
