package admin

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestDashboardIsServedWithoutDataOrToken: the dashboard's files are
// served without the admin token, with a policy that lets the page load
// nothing it did not ship; everything with data still needs the token;
// errors are problems and nothing redirects.
func TestDashboardIsServedWithoutDataOrToken(t *testing.T) {
	h := newHarness(t)
	for path, ctype := range map[string]string{
		"/ui": "text/html", "/ui/": "text/html", "/ui/index.html": "text/html",
		"/ui/app.js": "text/javascript", "/ui/app.css": "text/css",
	} {
		status, hdr, body := h.callAs("", "GET", path, "")
		if status != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), ctype) || len(body) == 0 {
			t.Errorf("GET %s: %d %q (%d bytes)", path, status, hdr.Get("Content-Type"), len(body))
		}
		if !strings.Contains(hdr.Get("Content-Security-Policy"), "script-src 'self'") || hdr.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: security headers %v", path, hdr)
		}
	}
	_, _, page := h.callAs("", "GET", "/ui", "")
	if !strings.Contains(string(page), `src="/ui/app.js"`) {
		t.Fatalf("the page does not load its script:\n%s", page)
	}
	if status, hdr, body := h.callAs("", "HEAD", "/ui/app.js", ""); status != 200 || len(body) != 0 || hdr.Get("Content-Length") == "0" {
		t.Errorf("HEAD: %d %d bytes, length %q", status, len(body), hdr.Get("Content-Length"))
	}
	for _, c := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"POST", "/ui", 405, codeMethodNotAllowed},
		{"GET", "/ui/secrets.json", 404, codeNotFound},
		{"GET", "/ui?token=x", 400, codeInvalidQuery},
		{"GET", "/ui/../v1/accounts", 401, codeUnauthorized}, // not clean: unmatched, behind the token
		{"GET", "/v1/accounts", 401, codeUnauthorized},
		{"GET", "/metrics", 401, codeUnauthorized},
	} {
		req, _ := http.NewRequest(c.method, h.url+c.path, nil)
		req.URL.Opaque = c.path // keep "/ui/../" as sent
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p problem
		json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if resp.StatusCode != c.status || p.Code != c.code || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s: %d %q %q, want %d %s", c.method, c.path, resp.StatusCode, p.Code, resp.Header.Get("Content-Type"), c.status, c.code)
		}
	}
	if n := testutil.ToFloat64(h.srv.metrics.requests.WithLabelValues("/ui", "GET", "200")); n != 6 {
		t.Errorf("dashboard GETs counted %v times, want 6", n)
	}
}
