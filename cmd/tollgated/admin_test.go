//go:build linux

package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgated/tollgated/admin"
	"github.com/tollgated/tollgated/internal/await"
)

// TestVersionNamesTheBuild: --version and tollgated_build_info say the
// same version, revision and Go version.
func TestVersionNamesTheBuild(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--version"}, noEnv, &out, io.Discard, nil); code != 0 {
		t.Fatalf("--version exit %d", code)
	}
	ver, revision, goVersion := buildInfo()
	want := "tollgated " + ver + " (revision " + revision + ", " + goVersion + ")\n"
	if out.String() != want || !strings.HasPrefix(goVersion, "go1.") || ver == "" || revision == "" {
		t.Fatalf("--version %q, want %q", out.String(), want)
	}
}

func TestAdminMaxConnsFlag(t *testing.T) {
	c, err := parseConfig([]string{"--admin-max-conns", "7"}, noEnv, io.Discard)
	if err != nil || c.adminLimits.limits().MaxConns != 7 {
		t.Fatalf("%+v %v", c.adminLimits, err)
	}
	c, err = parseConfig(nil, noEnv, io.Discard)
	if err != nil || c.adminLimits.limits() != (admin.Limits{MaxConns: admin.DefaultLimits().MaxConns}) {
		t.Fatalf("default %+v %v", c.adminLimits, err)
	}
	for _, bad := range []string{"0", "-1", "x", "10001"} {
		if _, err := parseConfig([]string{"--admin-max-conns", bad}, noEnv, io.Discard); err == nil {
			t.Errorf("--admin-max-conns %s accepted", bad)
		}
	}
}

// TestAdminListenerOfARealDaemon: the daemon serves the admin API with
// its limits: it holds at most --admin-max-conns sockets, closing the ones
// that waited longest without a request when more arrive (idle sockets
// once starved the data plane of file descriptors), the health check
// needs no token, and the build is in the metrics.
func TestAdminListenerOfARealDaemon(t *testing.T) {
	p := startProc(t, t.TempDir(), "--admin-max-conns", "4")
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 24 {
		c, err := net.Dial("tcp", p.adm)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	// The 20 oldest are closed by the daemon; it keeps the 4 youngest.
	for i, c := range idle[:20] {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := io.ReadAll(c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("idle socket %d of 24 was kept open beyond the cap of 4", i)
		}
	}
	for _, c := range idle {
		c.Close()
	}
	idle = nil
	// Their slots free as the daemon reads their EOFs.
	var err error
	var b []byte
	if !await.Poll(await.Default, func() bool {
		var resp *http.Response
		if resp, err = http.Get("http://" + p.adm + "/healthz"); err != nil {
			return false
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && string(b) == "{\"status\":\"ok\"}\n"
	}) {
		t.Fatalf("health after the idle sockets closed: %v %s", err, b)
	}
	req, _ := http.NewRequest("GET", "http://"+p.adm+"/metrics", nil)
	req.Header.Set("Authorization", "bearer "+testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`(?m)^tollgated_build_info\{goversion="go1\.[^"]+",revision="[^"]+",version="[^"]+"\} 1$`).Match(b) {
		t.Fatalf("no build info in the metrics:\n%s", b)
	}
	p.stop()
}

// TestAdminAnswersBesideManyIdleSockets: 200 sockets opened on the admin
// listener that never send a request do not keep an authenticated request
// out (they once made every request 503 too-many-connections while they
// stayed): it is answered 200, promptly, while they are open.
func TestAdminAnswersBesideManyIdleSockets(t *testing.T) {
	p := startProc(t, t.TempDir())
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 200 {
		c, err := net.Dial("tcp", p.adm)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	for i := range 5 {
		start := time.Now()
		st, _, body := httpCall(t, "GET", "http://"+p.adm+"/v1/leases", "Bearer "+testAdminToken, nil)
		if took := time.Since(start); st != http.StatusOK || took > time.Second {
			t.Fatalf("request %d beside 200 idle sockets: %d %s in %v", i, st, body, took)
		}
	}
	p.stop()
}
