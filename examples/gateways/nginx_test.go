//go:build linux

package gateways

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// nginxMain is the main configuration the test wraps the example in, the
// way Debian's nginx.conf includes conf.d/*.conf: its own pid file, logs and
// temporary directories, in the foreground. Run as root, nginx's workers
// drop to an unprivileged user, who must be able to reach the temporary
// directories.
const nginxMain = `daemon off;
worker_processes 1;
pid {{dir}}/nginx.pid;
error_log {{dir}}/error.log warn;
{{user}}
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path {{dir}}/body;
    proxy_temp_path {{dir}}/proxy;
    fastcgi_temp_path {{dir}}/fastcgi;
    uwsgi_temp_path {{dir}}/uwsgi;
    scgi_temp_path {{dir}}/scgi;
    include {{dir}}/tollgated.conf;
}
`

// startNginx runs examples/gateways/nginx/tollgated.conf under nginx,
// listening on listen, in front of tollgated and app; it returns when nginx
// accepts connections.
func startNginx(t *testing.T, siteFile, listen, tollgated, app string) {
	t.Helper()
	bin := requireTool(t, "nginx", "/usr/sbin/nginx")
	dir, err := os.MkdirTemp("", "tollgated-nginx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	user := ""
	if os.Geteuid() == 0 {
		user = "user nobody nogroup;"
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	main := strings.NewReplacer("{{dir}}", dir, "{{user}}", user).Replace(nginxMain)
	site := localize(t, siteFile, listen, tollgated, app)
	for name, content := range map[string]string{"nginx.conf": main, "tollgated.conf": site} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(dir, "nginx.conf")
	if out, err := exec.Command(bin, "-t", "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log")).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	logs := filepath.Join(dir, "nginx.out")
	exited := startProcess(t, exec.Command(bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log")), logs)
	waitListening(t, listen, exited, func() string {
		a, _ := os.ReadFile(logs)
		b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		return string(a) + string(b)
	})
}

// TestNginxInFrontOfTollgated runs the example nginx configuration (with
// its 402/429 handling through auth_request_set + error_page) against a
// real tollgated and service.
func TestNginxInFrontOfTollgated(t *testing.T) {
	requireTool(t, "nginx", "/usr/sbin/nginx")
	d := startTollgated(t)
	app := newUpstream(t, d.listen, d.platformToken())
	listen := freePort(t)
	startNginx(t, "nginx/tollgated.conf", listen, d.listen, strings.TrimPrefix(app.URL, "http://"))
	runGatewayScenarios(t, d, app, "http://"+listen, "nginx", true)
}

// TestNginxMinimalConfig runs the guide's shortest configuration: it admits
// and bills, passes 401 on, and — what the complete one exists for — turns
// a 402 into nginx's 500.
func TestNginxMinimalConfig(t *testing.T) {
	requireTool(t, "nginx", "/usr/sbin/nginx")
	d := startTollgated(t)
	app := newUpstream(t, d.listen, d.platformToken())
	listen := freePort(t)
	startNginx(t, "nginx/minimal.conf", listen, d.listen, strings.TrimPrefix(app.URL, "http://"))
	funded := d.account("minimal-funded", 1_000_000, nil)
	broke := d.account("minimal-broke", 5, nil)
	base := "http://" + listen
	if r := send(t, "POST", base+"/v1/chat", funded, `{}`); r.status != 200 || r.body != "served /v1/chat" {
		t.Fatalf("funded: %d %q", r.status, r.body)
	}
	if r := send(t, "POST", base+"/v1/chat", "", `{}`); r.status != 401 {
		t.Fatalf("no key: %d", r.status)
	}
	if r := send(t, "POST", base+"/v1/chat", broke, `{}`); r.status != 500 || r.header.Get("Retry-After") != "" {
		t.Fatalf("over budget through the minimal config: %d %v (nginx passes only 401 and 403)", r.status, r.header)
	}
	if n := len(app.seen()); n != 1 {
		t.Fatalf("the service saw %d requests, want 1", n)
	}
	if u := d.usage("minimal-funded", 1); len(u) != 1 || u[0] != 10 {
		t.Fatalf("billed %v, want [10]", u)
	}
}
