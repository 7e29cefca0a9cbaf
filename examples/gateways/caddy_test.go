//go:build linux

package gateways

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// startCaddy runs examples/gateways/caddy/Caddyfile under Caddy, listening
// on listen, in front of tollgated and app; it returns when Caddy accepts
// connections. Caddy keeps its state under a temporary HOME.
func startCaddy(t *testing.T, listen, tollgated, app string) {
	t.Helper()
	bin := requireTool(t, "caddy")
	dir := t.TempDir()
	conf := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(conf, []byte(localize(t, "caddy/Caddyfile", listen, tollgated, app)), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	validate := exec.Command(bin, "validate", "--config", conf, "--adapter", "caddyfile")
	validate.Env = env
	if out, err := validate.CombinedOutput(); err != nil {
		t.Fatalf("caddy validate: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "run", "--config", conf, "--adapter", "caddyfile")
	cmd.Env = env
	logs := filepath.Join(dir, "caddy.log")
	exited := startProcess(t, cmd, logs)
	waitListening(t, listen, exited, func() string { b, _ := os.ReadFile(logs); return string(b) })
}

// TestCaddyInFrontOfTollgated runs the example Caddyfile against a real
// tollgated and service.
func TestCaddyInFrontOfTollgated(t *testing.T) {
	requireTool(t, "caddy")
	d := startTollgated(t)
	app := newUpstream(t, d.listen, d.platformToken())
	listen := freePort(t)
	startCaddy(t, listen, d.listen, strings.TrimPrefix(app.URL, "http://"))
	runGatewayScenarios(t, d, app, "http://"+listen, "caddy", true)
}
