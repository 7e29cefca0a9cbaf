package agentadmission

import (
	"testing"

	"github.com/rs/zerolog"
)

func TestFromEnv(t *testing.T) {
	t.Setenv(EnvURL, "http://127.0.0.1:8080/")
	t.Setenv(EnvToken, "tok")
	t.Setenv(EnvOrgID, "org-7")
	t.Setenv(EnvWorkspaceID, "")

	c := FromEnv("my-agent", WithLogger(zerolog.Nop()))
	want := Config{URL: "http://127.0.0.1:8080/", Token: "tok", OrgID: "org-7", AgentID: "my-agent"}
	if c.cfg != want {
		t.Fatalf("config = %+v, want %+v", c.cfg, want)
	}
	if !c.Enabled() {
		t.Fatal("both URL and token set, yet not enabled")
	}
	// The trailing slash must not double up in the path.
	if c.endpoint != "http://127.0.0.1:8080/v1/admission" {
		t.Fatalf("endpoint = %q", c.endpoint)
	}
}

func TestEngaged(t *testing.T) {
	for _, tc := range []struct {
		cfg             Config
		engaged, halfOn bool
	}{
		{Config{}, false, false},
		{Config{URL: "http://x"}, false, true},
		{Config{Token: "t"}, false, true},
		{Config{URL: "http://x", Token: "t"}, true, false},
	} {
		if got := tc.cfg.engaged(); got != tc.engaged {
			t.Errorf("%+v engaged = %v", tc.cfg, got)
		}
		if got := tc.cfg.halfSet(); got != tc.halfOn {
			t.Errorf("%+v halfSet = %v", tc.cfg, got)
		}
	}
}

func TestNilCheckerPassesThrough(t *testing.T) {
	var c *Checker
	if c.Enabled() {
		t.Fatal("nil Checker enabled")
	}
	if d := c.Check(t.Context(), Subject{AgentID: "a"}); d.Denied {
		t.Fatal("nil Checker denied")
	}
}
