package admin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsEndpoint(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	h.fails(http.StatusNotFound, codeUnknownAccount, "GET", "/v1/accounts/nobody", "")

	status, hdr, body := h.call("GET", "/metrics", "")
	if status != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics: %d %q", status, hdr.Get("Content-Type"))
	}
	for _, want := range []string{
		`tollgated_admin_requests_total{code="201",method="POST",route="/v1/accounts"} 1`,
		`tollgated_admin_requests_total{code="404",method="GET",route="/v1/accounts/{id}"} 1`,
		`tollgated_admin_mutations_total{action="account.create"} 1`,
		`tollgated_admin_errors_total{code="unknown-account"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("missing %s in\n%s", want, body)
		}
	}
	st, hdr, b := h.callAs("", "GET", "/metrics", "")
	h.checkProblem(st, hdr, b, http.StatusUnauthorized, codeUnauthorized, "unauthenticated /metrics")
}

func TestFollowUpFailuresAreCounted(t *testing.T) {
	h := newHarness(t)
	h.pub.setErr(errTest)
	h.createAccount(`{"id":"acme"}`)
	if got := testutil.ToFloat64(h.srv.metrics.errors.WithLabelValues(codePublishFailed)); got != 1 {
		t.Fatalf("publish-failed = %v", got)
	}
}

func TestMethodLabelIsBounded(t *testing.T) {
	for m, want := range map[string]string{"GET": "GET", "DELETE": "DELETE", "BREW": "other", "get": "other"} {
		if got := methodLabel(m); got != want {
			t.Errorf("%s: %s", m, got)
		}
	}
}

func TestStatusRecorder(t *testing.T) {
	w := httptest.NewRecorder()
	r := &statusRecorder{ResponseWriter: w}
	r.Write([]byte("x"))
	r.WriteHeader(http.StatusTeapot) // too late: the first status stands
	r.Flush()
	if r.status != http.StatusOK || r.Unwrap() != w || !w.Flushed {
		t.Fatalf("status %d flushed %v", r.status, w.Flushed)
	}
	r = &statusRecorder{ResponseWriter: httptest.NewRecorder()}
	r.WriteHeader(http.StatusConflict)
	if r.status != http.StatusConflict {
		t.Fatal(r.status)
	}
}
