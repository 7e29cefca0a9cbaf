package packaging_test

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tollgated/tollgated/internal/daemontest"
)

// TestComposeFleet: the compose example is YAML (anchors and merge keys
// resolved here as compose resolves them; compose itself is not installed
// on the test machines): PostgreSQL with
// a health check, and three nodes that wait for it, share the ledger URL,
// the server secret and the admin token (from secret files, never inline),
// have distinct node ids, volumes and host ports on loopback, and set only
// TOLLGATED_ variables the daemon knows.
func TestComposeFleet(t *testing.T) {
	docs := manifests(t, "compose/fleet.yaml")
	if len(docs) != 1 {
		t.Fatalf("%d YAML documents", len(docs))
	}
	services := at(t, docs[0], "services").(map[string]any)
	if at(t, services, "postgres", "healthcheck", "test") == nil {
		t.Error("postgres has no health check for the nodes to wait on")
	}
	known := daemonEnv(t)
	var ids, volumes, ports []string
	for _, name := range []string{"node-a", "node-b", "node-c"} {
		if at(t, services, name, "depends_on", "postgres", "condition") != "service_healthy" {
			t.Errorf("%s does not wait for a healthy PostgreSQL", name)
		}
		env := at(t, services, name, "environment").(map[string]any)
		for k, v := range env {
			if !known[k] {
				t.Errorf("%s sets %s, which tollgated does not read", name, k)
			}
			if s, _ := v.(string); strings.Contains(s, "postgres://") {
				t.Errorf("%s has its ledger URL inline: use TOLLGATED_LEDGER_FILE", name)
			}
		}
		for _, v := range []string{"TOLLGATED_LEDGER_FILE", "TOLLGATED_SECRET_FILE", "TOLLGATED_ADMIN_TOKEN_FILE"} {
			if p, _ := env[v].(string); !strings.HasPrefix(p, "/run/secrets/") {
				t.Errorf("%s: %s=%v is not a secret file", name, v, env[v])
			}
		}
		if env["TOLLGATED_NODE_ID"] == nil {
			t.Errorf("%s has no node id", name)
		}
		ids = append(ids, env["TOLLGATED_NODE_ID"].(string))
		volumes = append(volumes, at(t, services, name, "volumes", 0).(string))
		for _, p := range at(t, services, name, "ports").([]any) {
			if !strings.HasPrefix(p.(string), "127.0.0.1:") {
				t.Errorf("%s publishes %s beyond loopback", name, p)
			}
			ports = append(ports, strings.Split(p.(string), ":")[1])
		}
	}
	for what, list := range map[string][]string{"node ids": ids, "volumes": volumes, "host ports": ports} {
		if len(slices.Compact(slices.Sorted(slices.Values(list)))) != len(list) {
			t.Errorf("%s repeat: %v", what, list)
		}
	}
}

// daemonEnv is every TOLLGATED_ variable the daemon reads: one per flag
// its --help lists.
func daemonEnv(t *testing.T) map[string]bool {
	t.Helper()
	out, _ := exec.Command(filepath.Join(daemontest.Build(t), "tollgated"), "--help").CombinedOutput()
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`).FindAllStringSubmatch(string(out), -1) {
		known["TOLLGATED_"+strings.ToUpper(strings.ReplaceAll(m[1], "-", "_"))] = true
	}
	if !known["TOLLGATED_LEDGER"] || !known["TOLLGATED_NODE_ID"] {
		t.Fatalf("tollgated --help lists no --ledger or --node-id:\n%s", out)
	}
	return known
}
