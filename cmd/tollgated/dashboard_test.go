//go:build linux

package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium finds the headless browser the dashboard test drives, installing
// it with the project's script when it is missing and this is root. Under
// CI=true a browser that cannot be had fails the test; elsewhere it skips.
func chromium(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	var out []byte
	var err error
	if os.Geteuid() == 0 {
		out, err = exec.Command("bash", "../../scripts/install-chromium.sh").CombinedOutput()
		if p, lerr := exec.LookPath("chromium"); err == nil && lerr == nil {
			return p
		}
	}
	msg := "chromium is not installed and could not be (scripts/install-chromium.sh): " + string(out)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// artifactsDir is where the test keeps its screenshots: TOLLGATED_ARTIFACTS
// if set (.ci/run sets it), else tollgated-artifacts in the system's
// temporary directory. Never the test's own temporary directory, which is
// removed when the test ends: the screenshots are for a person to look at
// afterwards.
func artifactsDir(t *testing.T) string {
	dir := os.Getenv("TOLLGATED_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "tollgated-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// dashboardView is what the test reads off the rendered page.
type dashboardView struct {
	LoginVisible bool     `json:"loginVisible"`
	LoginError   string   `json:"loginError"`
	RPS          string   `json:"rps"`
	Accounts     []string `json:"accounts"`
	Denials      []string `json:"denials"`
	CheckP99     string   `json:"checkP99"`
	CheckP50     string   `json:"checkP50"`
	Audit        []string `json:"audit"`
	Shards       int      `json:"shards"`
	Leases       int      `json:"leases"`
	AcmeRow      []string `json:"acmeRow"`
	Status       string   `json:"status"`
}

const readDashboard = `(() => {
  const rows = (id, attr) => [...document.querySelectorAll('#' + id + ' tr')].map((r) => r.dataset[attr]);
  const check = document.querySelector('#latency tr[data-route="/v1/check"]');
  return {
    loginVisible: !document.getElementById('login').hidden,
    loginError: document.getElementById('login-error').textContent,
    rps: document.getElementById('rps').textContent,
    accounts: rows('accounts', 'account'),
    denials: rows('denials', 'reason'),
    checkP50: check ? check.cells[2].textContent : '',
    checkP99: check ? check.cells[4].textContent : '',
    audit: rows('audit', 'action'),
    shards: document.querySelectorAll('#shards tr').length,
    leases: document.querySelectorAll('#leases tr').length,
    acmeRow: [...(document.querySelector('#accounts tr[data-account="acme"]') || {cells: []}).cells].map((c) => c.textContent),
    status: document.getElementById('status').textContent,
  };
})()`

// TestDashboardInChromium loads /ui in a real headless Chromium against a
// real daemon under a little load: a wrong token is refused, the right one
// signs in, and the page shows the account tree, requests per second, a
// denial reason, /v1/check's percentiles, shard load, leases and the audit
// log. Screenshots are kept.
func TestDashboardInChromium(t *testing.T) {
	browser := chromium(t)
	p := startProc(t, t.TempDir())
	key := p.provision("acme", 100_000_000, 1)
	p.adminCall("POST", "/v1/accounts", map[string]any{"id": "ws-1", "parent": "acme"}, http.StatusCreated)
	p.adminCall("PUT", "/v1/accounts/acme/budget", map[string]any{"allowance": 1_000_000, "period": "day"}, http.StatusOK)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, k := range []string{key, key, "tgk_not-a-key"} { // admitted twice as often as denied
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 5 * time.Second}
			for range 30_000 { // ~2 minutes at most
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("POST", "http://"+p.listen+"/v1/check", strings.NewReader(`{"workload":[{"op":"requests","count":1}]}`))
				req.Header.Set("Authorization", "Bearer "+k)
				if resp, err := client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				time.Sleep(3 * time.Millisecond)
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browser), chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 1800),
		// Loopback only: every other host name resolves to nothing.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	ctx, cancelBrowser := chromedp.NewContext(ctx)
	defer cancelBrowser()

	dir := artifactsDir(t)
	shot := func(name string) {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		path := filepath.Join(dir, "dashboard-"+name+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}
	read := func() dashboardView {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[dashboardView](readDashboard))
		if err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		return v
	}
	signIn := func(token string) {
		if err := chromedp.Do(ctx,
			chromedp.WaitVisible(chromedp.ID("token")),
			chromedp.SendKeys(chromedp.ID("token"), token),
			chromedp.Click(chromedp.CSS("#login-form button[type=submit]")), // fires the form's submit event
		); err != nil {
			t.Fatalf("signing in: %v", err)
		}
	}

	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+p.adm+"/ui")); err != nil {
		t.Fatalf("loading the dashboard: %v", err)
	}
	signIn("tga_wrong-token")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if v := read(); v.LoginVisible && strings.Contains(v.LoginError, "401") {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("a wrong token was not refused: %+v", v)
		}
	}
	shot("refused")
	signIn(testAdminToken)

	var v dashboardView
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		v = read()
		if !v.LoginVisible && v.RPS != "–" && v.RPS != "0" && contains(v.Accounts, "acme") && contains(v.Accounts, "ws-1") &&
			contains(v.Denials, "unknown-principal") && v.CheckP99 != "" && v.CheckP99 != "–" &&
			contains(v.Audit, "account.create") && v.Shards == 2 && v.Leases > 0 && acmeRowComplete(v.AcmeRow) {
			break
		}
		if time.Now().After(deadline) {
			shot("incomplete")
			t.Fatalf("the dashboard never showed the node: %+v", v)
		}
	}
	t.Logf("dashboard: %+v", v)
	shot("live")
	token, err := chromedp.Run(ctx, chromedp.Evaluate[string](`sessionStorage.getItem('tollgated.admin-token')`))
	if err != nil || token != testAdminToken {
		t.Fatalf("the token is not kept in sessionStorage: %q %v", token, err)
	}
}

// acmeRowComplete: acme's row of the account tree shows its spend against
// its budget, its period end and its funds (available, in leases, settled).
func acmeRowComplete(cells []string) bool {
	if len(cells) != 7 || !strings.HasSuffix(cells[2], " / 1,000,000 per day") {
		return false
	}
	for _, c := range cells[3:] {
		if c == "" || c == "–" {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
