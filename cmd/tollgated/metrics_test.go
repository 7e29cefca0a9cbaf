//go:build linux

package main

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgated/tollgated/internal/await"
)

// scrape returns the daemon's /metrics text.
func (p *proc) scrape() string {
	p.t.Helper()
	req, _ := http.NewRequest("GET", "http://"+p.adm+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		p.t.Fatalf("/metrics = %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// TestMetricsHaveLatencyHistogramsAndRuntime: after a few checks, the
// /v1/check histogram counts them in its buckets (cumulative, up to +Inf,
// with a positive sum); the Go runtime and process collectors are there.
func TestMetricsHaveLatencyHistogramsAndRuntime(t *testing.T) {
	p := startProc(t, t.TempDir())
	key := p.provision("acme", 1_000_000, 1)
	const n = 20
	for range n {
		req, _ := http.NewRequest("POST", "http://"+p.listen+"/v1/check", strings.NewReader(`{"workload":[{"op":"requests","count":1}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("check = %d", resp.StatusCode)
		}
	}
	count := regexp.MustCompile(`(?m)^tollgated_request_duration_seconds_count\{route="/v1/check"\} (\d+)$`)
	var m string
	if !await.Poll(await.Default, func() bool {
		m = p.scrape()
		c := count.FindStringSubmatch(m)
		return c != nil && c[1] == strconv.Itoa(n)
	}) {
		t.Fatalf("/v1/check not counted %d times:\n%s", n, grep(m, "request_duration"))
	}
	for _, want := range []string{
		`tollgated_request_duration_seconds_bucket{route="/v1/check",le="5e-05"} `,
		`tollgated_request_duration_seconds_bucket{route="/v1/check",le="5"} `,
		`tollgated_request_duration_seconds_bucket{route="/v1/check",le="+Inf"} 20`,
		`tollgated_request_duration_seconds_count{route="/v1/authz"} 0`,
		"tollgated_request_duration_untimed_total 0",
		"go_goroutines ", "go_gc_duration_seconds", "process_resident_memory_bytes ", "process_open_fds ",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("no %q in the metrics:\n%s", want, grep(m, "request_duration"))
		}
	}
	sum := regexp.MustCompile(`(?m)^tollgated_request_duration_seconds_sum\{route="/v1/check"\} (\S+)$`).FindStringSubmatch(m)
	if s, err := strconv.ParseFloat(sum[1], 64); err != nil || s <= 0 || s > n*5 {
		t.Errorf("sum %q", sum[1])
	}
	p.stop()
}

// grep is the lines of text containing what.
func grep(text, what string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, what) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
