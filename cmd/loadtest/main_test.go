package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// startServer serves h on 127.0.0.1 for the test.
func startServer(t *testing.T, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

func runCmd(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRefusesRemoteTarget(t *testing.T) {
	for _, url := range []string{"http://10.0.0.1:8080", "http://example.com", "http://192.168.0.1:80"} {
		code, _, stderr := runCmd(context.Background(), "--url", url, "-d", "1s")
		if code != exitUsage || !strings.Contains(stderr, "loopback") {
			t.Errorf("%s: exit %d, stderr %q", url, code, stderr)
		}
	}
	// The admin URL is checked the same way.
	code, _, stderr := runCmd(context.Background(), "--admin", "http://10.0.0.1:9091", "--admin-token", "t", "-d", "1s")
	if code != exitUsage || !strings.Contains(stderr, "loopback") {
		t.Errorf("remote admin: exit %d, stderr %q", code, stderr)
	}
}

func TestErrorRateExitsNonZero(t *testing.T) {
	var n atomic.Int64
	url := startServer(t, func(ctx *fasthttp.RequestCtx) {
		if n.Add(1)%10 == 0 {
			ctx.SetStatusCode(500)
			ctx.SetContentType("application/problem+json")
			ctx.SetBodyString(`{"code":"internal"}`)
			return
		}
		ctx.SetBodyString(`{"decision":"admit"}`)
	})
	code, stdout, stderr := runCmd(context.Background(), "--url", url, "-c", "2", "-d", "300ms", "--warmup", "0s", "-q")
	if code != exitFailed {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if strings.Contains(stdout, "req/s") || !strings.Contains(stderr, "RUN FAILED") ||
		!strings.Contains(stdout, "internal: ") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	// With a limit above 10% the same run passes.
	code, stdout, _ = runCmd(context.Background(), "--url", url, "-c", "2", "-d", "300ms", "--warmup", "0s", "-q",
		"--max-error-rate", "0.2")
	if code != exitOK || !strings.Contains(stdout, "req/s") {
		t.Errorf("exit %d:\n%s", code, stdout)
	}
	// --max-error-rate 0 tolerates no error at all.
	code, _, _ = runCmd(context.Background(), "--url", url, "-c", "1", "-d", "200ms", "--warmup", "0s", "-q",
		"--max-error-rate", "0")
	if code != exitFailed {
		t.Errorf("zero tolerance: exit %d", code)
	}
}

func TestJSONAndHistogramFile(t *testing.T) {
	url := startServer(t, func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(`{"decision":"admit"}`) })
	hgrm := filepath.Join(t.TempDir(), "run.hgrm")
	code, stdout, stderr := runCmd(context.Background(), "--url", url, "-c", "2", "-d", "1500ms", "--warmup", "200ms",
		"--json", "--hdr-out", hgrm)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res struct {
		Throughput float64               `json:"throughput_rps"`
		Requests   int64                 `json:"requests"`
		ByStatus   map[string]int64      `json:"by_status"`
		Latency    struct{ P99 float64 } `json:"latency_us"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if res.Throughput <= 0 || res.Requests == 0 || res.ByStatus["200"] != res.Requests || res.Latency.P99 <= 0 {
		t.Errorf("json result %+v", res)
	}
	// Progress lines went to stderr, one a second, warm-up marked.
	if !strings.Contains(stderr, "loadtest:    1s") {
		t.Errorf("no progress line in stderr:\n%s", stderr)
	}
	data, err := os.ReadFile(hgrm)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "Percentile") || !strings.Contains(string(data), fmt.Sprintf("Total count    = %12d", res.Requests)) {
		t.Errorf("histogram file:\n%s", data)
	}
}

func TestInterruptPrintsPartialResult(t *testing.T) {
	url := startServer(t, func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(`{}`) })
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(400*time.Millisecond, cancel)
	start := time.Now()
	code, stdout, stderr := runCmd(ctx, "--url", url, "-c", "2", "-d", "30s", "--warmup", "0s", "-q")
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("took %v after the interrupt", el)
	}
	if code != exitInterrupted || !strings.Contains(stdout, "INTERRUPTED") || !strings.Contains(stdout, "req/s") ||
		!strings.Contains(stderr, "interrupted") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

func TestAccountsFileKeysAreSent(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	url := startServer(t, func(ctx *fasthttp.RequestCtx) {
		mu.Lock()
		seen[string(ctx.Request.Header.Peek("Authorization"))]++
		mu.Unlock()
		ctx.SetBodyString(`{}`)
	})
	dir := t.TempDir()
	file := filepath.Join(dir, "accounts.txt")
	os.WriteFile(file, []byte("# test\na1 key-1\na2 key-2\na3 key-3\n"), 0o600)
	out := filepath.Join(dir, "out.txt")
	code, _, stderr := runCmd(context.Background(), "--url", url, "-c", "2", "-d", "300ms", "--warmup", "0s", "-q",
		"--accounts-file", file, "--accounts", "2", "--accounts-out", out)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen["Bearer key-1"] == 0 || seen["Bearer key-2"] == 0 {
		t.Errorf("authorization headers seen: %v", seen)
	}
	written, _ := os.ReadFile(out)
	if string(written) != "a1 key-1\na2 key-2\n" {
		t.Errorf("accounts-out: %q", written)
	}
	code, _, _ = runCmd(context.Background(), "--url", url, "--accounts-file", file, "--accounts", "9", "-d", "1s")
	if code != exitUsage {
		t.Errorf("too many accounts: exit %d", code)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--scenario", "nope"},
		{"--mix", "check=x", "--scenario", "mix"},
		{"--mix", "check=1"},
		{"--duration", "-1s"},
		{"--connections", "0"},
		{"--body", "not json"},
		{"extra-arg"},
	} {
		code, _, _ := runCmd(context.Background(), append([]string{"-q", "--url", "http://127.0.0.1:1"}, args...)...)
		if code != exitUsage {
			t.Errorf("%v: exit %d", args, code)
		}
	}
}
