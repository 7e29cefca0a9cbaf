package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/daemontest"
)

// TestEnvoyRateLimitLimitsAreReadExactly: each account's limit becomes
// its request rate per second and its burst; what tollgated cannot
// enforce as written is refused, naming the descriptor.
func TestEnvoyRateLimitLimitsAreReadExactly(t *testing.T) {
	got, err := parseEnvoyRateLimit([]byte(`domain: tollgated
descriptors:
  - key: account
    value: acme
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: account
    value: slow
    rate_limit: {unit: minute, requests_per_unit: 120}
  - key: account
    value: free
    rate_limit: {unlimited: true}
`), "tollgated", "account")
	if err != nil {
		t.Fatal(err)
	}
	want := []accountLimit{{"acme", 10, 10}, {"slow", 2, 120}, {"free", 0, 0}}
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%v, want %v", got, want)
		}
	}
	for name, doc := range map[string]string{
		"another domain":     "domain: envoy\ndescriptors: [{key: account, value: a, rate_limit: {unit: second, requests_per_unit: 1}}]",
		"a fractional rate":  "domain: tollgated\ndescriptors: [{key: account, value: a, rate_limit: {unit: minute, requests_per_unit: 100}}]",
		"nested descriptors": "domain: tollgated\ndescriptors: [{key: account, value: a, descriptors: [{key: path, value: /x, rate_limit: {unit: second, requests_per_unit: 1}}]}]",
		"not an account":     "domain: tollgated\ndescriptors: [{key: remote_address, rate_limit: {unit: second, requests_per_unit: 1}}]",
		"no value":           "domain: tollgated\ndescriptors: [{key: account, rate_limit: {unit: second, requests_per_unit: 1}}]",
		"shadow mode":        "domain: tollgated\ndescriptors: [{key: account, value: a, shadow_mode: true, rate_limit: {unit: second, requests_per_unit: 1}}]",
		"an unknown field":   "domain: tollgated\ndescriptors: [{key: account, value: a, rate_limits: {unit: second, requests_per_unit: 1}}]",
		"an unknown unit":    "domain: tollgated\ndescriptors: [{key: account, value: a, rate_limit: {unit: fortnight, requests_per_unit: 1}}]",
		"twice":              "domain: tollgated\ndescriptors: [{key: account, value: a, rate_limit: {unit: second, requests_per_unit: 1}}, {key: account, value: a, rate_limit: {unit: second, requests_per_unit: 2}}]",
	} {
		if _, err := parseEnvoyRateLimit([]byte(doc), "tollgated", "account"); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

// TestImportEnvoyRateLimit: against a real daemon, --dry-run changes
// nothing; the import creates a missing account, keeps an existing
// policy's classes and routes and sets the rates, and the data plane then
// enforces them.
func TestImportEnvoyRateLimit(t *testing.T) {
	d := daemontest.Start(t, "")
	c := newCtl(t, d)
	c.ok("accounts", "create", "acme")
	policy := filepath.Join(t.TempDir(), "policy.json")
	os.WriteFile(policy, []byte(policyDoc), 0o600)
	c.ok("accounts", "policy", "set", "acme", "--file", policy)
	file := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(file, []byte(`domain: tollgated
descriptors:
  - key: account
    value: acme
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: account
    value: newco
    rate_limit: {unit: minute, requests_per_unit: 60}
`), 0o600)

	out := c.ok("import", "envoy-ratelimit", file, "--dry-run")
	contains(t, "dry run", out, "would set acme: request_rate 2/s, request_burst 2, default route added",
		"would set newco: request_rate 1/s, request_burst 60, account created, default route added")
	if code, _, _ := c.run("accounts", "show", "newco"); code == 0 {
		t.Fatal("--dry-run created an account")
	}
	if p := c.json("accounts", "policy", "get", "acme"); p["policy"].(map[string]any)["limits"].(map[string]any)["request_rate"] != float64(1000) {
		t.Fatalf("--dry-run changed the policy: %v", p)
	}

	out = c.ok("import", "envoy-ratelimit", file)
	contains(t, "import", out, "set acme: request_rate 2/s, request_burst 2", "set newco: request_rate 1/s, request_burst 60, account created")
	p := c.json("accounts", "policy", "get", "acme")["policy"].(map[string]any)
	limits := p["limits"].(map[string]any)
	if limits["request_rate"] != float64(2) || limits["request_burst"] != float64(2) || p["operations"].(map[string]any)["requests"] == nil ||
		p["routes"].(map[string]any)["default"].(map[string]any)["op"] != "requests" {
		t.Fatalf("acme's policy after the import: %v", p)
	}
	n := c.json("accounts", "policy", "get", "newco")["policy"].(map[string]any)
	if l := n["limits"].(map[string]any); l["request_rate"] != float64(1) || l["request_burst"] != float64(60) {
		t.Fatalf("newco's policy after the import: %v", n)
	}

	// The data plane enforces the imported rate: however the node splits
	// it over its shards, it admits at most the burst of 2 plus a token a
	// second, so within a few checks one is refused.
	c.ok("deposits", "create", "acme", "--units", "100000", "--idempotency-key", "import")
	key := c.json("keys", "create", "acme")["key"].(string)
	start := time.Now()
	admitted, refused := 0, false
	for i := 0; i < 6 && !refused; i++ {
		switch st, body := check(t, d, key); st {
		case 200:
			admitted++
		case 429:
			refused = true
		default:
			t.Fatalf("check: %d %v", st, body)
		}
	}
	if !refused || admitted > 2+int(time.Since(start)/time.Second) {
		t.Fatalf("%d admitted, refused %v in %v under the imported burst of 2", admitted, refused, time.Since(start))
	}
}
