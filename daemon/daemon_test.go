//go:build linux

package daemon

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgated/tollgated/admin"
	"github.com/tollgated/tollgated/spool"
)

// testConfig is a one-shard daemon on loopback ports of its own choosing,
// in dir, with a demo account whose key is "k-demo": the defaults of
// cmd/tollgated's flags otherwise.
func testConfig(dir string) Config {
	return Config{
		Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", AdminLimits: admin.DefaultLimits(),
		CPUs: []int{0}, DataDir: dir, UsageHistory: 1000,
		DemoKey: "k-demo", DemoUnits: 1 << 40,
		Durable: true, ShutdownGrace: time.Second, MaxInFlight: 1 << 16,
		LeaseTTL: time.Minute, LeaseGrace: 10 * time.Second, FundingWait: 200 * time.Millisecond,
		EventRetention: time.Hour,
		Events:         EventArchive{MaxBytes: 1 << 30, MaxAge: 7 * 24 * time.Hour, SegmentBytes: spool.DefaultSegmentBytes},
		AuthzKeyHeader: "Authorization",
		Transport: Transport{MaxHeaderBytes: 8 << 10, MaxBodyBytes: 1 << 20, MaxConns: 100, MaxOutput: 64 << 10,
			IdleTimeout: time.Minute, HeaderTimeout: 10 * time.Second, BodyTimeout: 30 * time.Second},
	}
}

func TestValidateNamesWhatIsWrong(t *testing.T) {
	good := testConfig("/d")
	if err := good.Validate(); err != nil {
		t.Fatalf("a sound configuration refused: %v", err)
	}
	good.GRPC = GRPC{Listen: ":8081", Domain: "tollgated", AccountEntry: "account", MaxHeld: 64, MaxConns: 1024, MaxStreams: 256}
	if err := good.Validate(); err != nil {
		t.Fatalf("a sound gRPC listener refused: %v", err)
	}
	for name, change := range map[string]func(*Config){
		"address":          func(c *Config) { c.Admin = "" },
		"data directory":   func(c *Config) { c.DataDir = "" },
		"shards":           func(c *Config) { c.CPUs = nil },
		"lease TTL":        func(c *Config) { c.LeaseTTL = time.Second },
		"shutdown grace":   func(c *Config) { c.ShutdownGrace = 0 },
		"32 bytes":         func(c *Config) { c.Secret = []byte("short") },
		"ledger URL":       func(c *Config) { c.LedgerURL = "mysql://x" },
		"authz key header": func(c *Config) { c.AuthzKeyHeader = "a b" },
		"segment":          func(c *Config) { c.Events.SegmentBytes = 1 },
		"transport":        func(c *Config) { c.Transport.MaxConns = 0 },
		"rate-limit domain": func(c *Config) {
			c.GRPC = GRPC{Listen: ":8081", AccountEntry: "account", MaxHeld: 1, MaxConns: 1, MaxStreams: 1}
		},
		"descriptor entry": func(c *Config) {
			c.GRPC = GRPC{Listen: ":8081", Domain: "tollgated", AccountEntry: "path", MaxHeld: 1, MaxConns: 1, MaxStreams: 1}
		},
		"held-call": func(c *Config) {
			c.GRPC = GRPC{Listen: ":8081", Domain: "tollgated", AccountEntry: "account", MaxConns: 1, MaxStreams: 1}
		},
	} {
		c := testConfig("/d")
		change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
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

// checkAnswer is one /v1/check as a client saw it.
type checkAnswer struct {
	status int
	code   string
	took   time.Duration
}

func timedCheck(t *testing.T, addr, key string) checkAnswer {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/check",
		strings.NewReader(`{"permission":"chat","workload":[{"op":"requests","count":1}]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	start := time.Now()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	defer resp.Body.Close()
	var m struct{ Code string }
	raw, _ := io.ReadAll(resp.Body)
	json.Unmarshal(raw, &m)
	return checkAnswer{resp.StatusCode, m.Code, time.Since(start)}
}

// statusCode is GET url's status and problem code.
func statusCode(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var m struct{ Code string }
	raw, _ := io.ReadAll(resp.Body)
	json.Unmarshal(raw, &m)
	return resp.StatusCode, m.Code
}
