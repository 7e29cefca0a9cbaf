package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestTopInterruptedWhileReadingExitsQuietly: Ctrl-C is how a live top is
// left; one that lands while /metrics is being read is no error.
func TestTopInterruptedWhileReadingExitsQuietly(t *testing.T) {
	var scrapes atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if scrapes.Add(1) > 1 {
			cancel()             // the interrupt, mid-read
			<-r.Context().Done() // the second scrape hangs until the client gives up
			return
		}
		w.Write([]byte("tollgated_admitted_total{shard=\"0\"} 1\n"))
	}))
	defer srv.Close()
	env := map[string]string{"TOLLGATE_ADMIN_URL": srv.URL, "TOLLGATE_ADMIN_TOKEN": "tga_test-token-0123456789"}
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"top", "--interval", "100ms"}, func(k string) string { return env[k] }, &out, &errOut)
	if code != 0 || errOut.Len() > 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
}
