package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

func noEnv(string) string { return "" }

func TestHelpAndVersionNeedNoSetUp(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"--help"}, noEnv, &out, &errOut, nil); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	if !strings.Contains(out.String(), "--listen") && !strings.Contains(out.String(), "-listen") {
		t.Fatalf("help lacks flags: %s", out.String())
	}
	out.Reset()
	if code := run([]string{"--version"}, noEnv, &out, &errOut, nil); code != 0 || !strings.HasPrefix(out.String(), "tollgated ") {
		t.Fatalf("--version exit %d: %q", code, out.String())
	}
}

func TestBadArgumentsExit2(t *testing.T) {
	for _, args := range [][]string{{"--nope"}, {"--shards", "-1"}, {"--cpus", "x"}, {"--log-level", "loud"}, {"extra"}} {
		var out, errOut bytes.Buffer
		if code := run(args, noEnv, &out, &errOut, nil); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestEnvironmentSetsFlagsAndFlagsWin(t *testing.T) {
	env := map[string]string{"TOLLGATED_LISTEN": "127.0.0.1:9999", "TOLLGATED_SHARDS": "3", "TOLLGATED_LOG_LEVEL": "warn"}
	c, err := parseConfig([]string{"--shards", "2"}, func(k string) string { return env[k] }, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.listen != "127.0.0.1:9999" || c.shards != 2 || c.logLevel.String() != "warn" {
		t.Fatalf("config = %+v", c)
	}
	env["TOLLGATED_SHARDS"] = "many"
	if _, err := parseConfig(nil, func(k string) string { return env[k] }, &bytes.Buffer{}); err == nil {
		t.Fatal("bad env value accepted")
	}
}

// syncBuffer is a bytes.Buffer safe for the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestStartsReportsShardsAndStops(t *testing.T) {
	dir := t.TempDir()
	var out, logs syncBuffer
	stop := make(chan struct{})
	code := make(chan int, 1)
	go func() {
		code <- run([]string{"--shards", "3", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--data-dir", dir, "--demo-key", "k-demo", "--log-level", "debug"}, noEnv, &out, &logs, stop)
	}()
	if !await.Poll(await.Default, func() bool { return strings.Contains(logs.String(), "tollgated ready") }) {
		t.Fatalf("never ready; logs:\n%s", logs.String())
	}
	if n := strings.Count(logs.String(), `"shard started"`); n != 3 {
		t.Fatalf("%d shards reported, want 3:\n%s", n, logs.String())
	}
	addr := listenAddr(t, logs.String())
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/check", strings.NewReader(`{"workload":[{"op":"requests","count":1}]}`))
	req.Header.Set("Authorization", "Bearer k-demo")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"decision":"admit"`) {
		t.Fatalf("demo check = %d %s", resp.StatusCode, body)
	}
	close(stop)
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit %d", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown hung")
	}
	if !strings.Contains(logs.String(), `"stopped"`) {
		t.Fatalf("no stop line:\n%s", logs.String())
	}
}

// listenAddr finds the address in the "tollgated ready" log line.
func listenAddr(t *testing.T, logs string) string {
	for _, line := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["message"] == "tollgated ready" {
			return m["listen"].(string)
		}
	}
	t.Fatalf("no ready line in:\n%s", logs)
	return ""
}
