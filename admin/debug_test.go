package admin

import (
	"net/http"
	"strings"
	"testing"
)

func TestPprofNeedsTheAdminToken(t *testing.T) {
	h := newHarness(t)
	status, _, body := h.call("GET", "/debug/pprof/", "")
	if status != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Fatalf("pprof index: %d %.200s", status, body)
	}
	if status, _, body := h.call("GET", "/debug/pprof/goroutine?debug=1", ""); status != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Fatalf("named profile: %d %.200s", status, body)
	}
	if status, _, _ := h.call("GET", "/debug/pprof/cmdline", ""); status != http.StatusOK {
		t.Fatalf("cmdline: %d", status)
	}
	if status, _, _ := h.call("POST", "/debug/pprof/symbol", "0x1"); status != http.StatusOK {
		t.Fatalf("symbol: %d", status)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=1"} {
		st, hdr, b := h.callAs("", "GET", path, "")
		h.checkProblem(st, hdr, b, http.StatusUnauthorized, codeUnauthorized, "unauthenticated "+path)
	}
	h.fails(http.StatusMethodNotAllowed, codeMethodNotAllowed, "DELETE", "/debug/pprof/", "")
}

func TestPprofIsNotOnTheDefaultMux(t *testing.T) {
	// The admin handler is its own mux: serving it must not depend on, or
	// expose, whatever else registered on http.DefaultServeMux.
	h := newHarness(t)
	if h.srv.Handler() == http.DefaultServeMux {
		t.Fatal("the admin handler is the default mux")
	}
}
