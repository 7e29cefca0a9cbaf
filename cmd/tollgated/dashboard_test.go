//go:build linux

package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/tollgated/tollgated/internal/await"
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

// dashboardView is what the test reads off the rendered page: what is
// displayed (computed style, so a rule that overrides hidden shows up),
// and every table, figure and chart's content.
type dashboardView struct {
	LoginVisible     bool     `json:"loginVisible"`
	DashboardVisible bool     `json:"dashboardVisible"`
	LoginError       string   `json:"loginError"`
	RPS              string   `json:"rps"`
	Accounts         []string `json:"accounts"`
	AccountsShown    bool     `json:"accountsShown"`
	Denials          []string `json:"denials"`
	CheckP99         string   `json:"checkP99"`
	CheckP50         string   `json:"checkP50"`
	Audit            []string `json:"audit"`
	Shards           int      `json:"shards"`
	Leases           int      `json:"leases"`
	AcmeRow          []string `json:"acmeRow"`
	Buttons          []string `json:"buttons"`
	Status           string   `json:"status"`
	Whoami           string   `json:"whoami"`
	Rows             int      `json:"rows"`
	Figures          []string `json:"figures"`
	InkedCharts      int      `json:"inkedCharts"`
	Refreshed        string   `json:"refreshed"`
	History          string   `json:"history"`
}

const readDashboard = `(() => {
  const shown = (e) => !!e && getComputedStyle(e).display !== 'none' && e.getClientRects().length > 0;
  const rows = (id, attr) => [...document.querySelectorAll('#' + id + ' tr')].map((r) => r.dataset[attr]);
  const check = document.querySelector('#latency tr[data-route="/v1/check"]');
  const inked = [...document.querySelectorAll('canvas')].filter((c) =>
    c.getContext('2d').getImageData(0, 0, c.width, c.height).data.some((v, i) => i % 4 === 3 && v !== 0)).length;
  return {
    loginVisible: shown(document.getElementById('login')),
    dashboardVisible: shown(document.getElementById('dashboard')),
    loginError: document.getElementById('login-error').textContent,
    rps: document.getElementById('rps').textContent,
    accounts: rows('accounts', 'account'),
    accountsShown: shown(document.getElementById('accounts')),
    denials: rows('denials', 'reason'),
    checkP50: check ? check.cells[2].textContent : '',
    checkP99: check ? check.cells[4].textContent : '',
    audit: rows('audit', 'action'),
    shards: document.querySelectorAll('#shards tr').length,
    leases: document.querySelectorAll('#leases tr').length,
    acmeRow: [...(document.querySelector('#accounts tr[data-account="acme"]') || {cells: []}).cells].map((c) => c.textContent),
    buttons: [...document.querySelectorAll('#dashboard button')].filter(shown).map((b) => b.textContent),
    status: document.getElementById('status').textContent,
    whoami: shown(document.getElementById('whoami')) ? document.getElementById('whoami').textContent : '',
    rows: document.querySelectorAll('#dashboard tbody tr').length,
    figures: ['rps', 'admitted', 'denied'].map((id) => document.getElementById(id).textContent),
    inkedCharts: inked,
    refreshed: document.body.dataset.refreshed || '',
    history: document.body.dataset.history || '',
  };
})()`

// browser is a headless Chromium on a fresh profile, loopback only, with
// the helpers the dashboard tests use.
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 1800),
		// Loopback only: every other host name resolves to nothing.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	t.Cleanup(cancel)
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelBrowser := chromedp.NewContext(ctx)
	t.Cleanup(cancelBrowser)
	return &browser{t: t, ctx: ctx, dir: artifactsDir(t)}
}

func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(b.dir, "dashboard-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
}

func (b *browser) read() dashboardView {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[dashboardView](readDashboard))
	if err != nil {
		b.t.Fatalf("reading the page: %v", err)
	}
	return v
}

func (b *browser) open(url string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(url)); err != nil {
		b.t.Fatalf("loading the dashboard: %v", err)
	}
}

func (b *browser) signIn(token string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx,
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.CSS("#login-form button[type=submit]")), // fires the form's submit event
	); err != nil {
		b.t.Fatalf("signing in: %v", err)
	}
}

func (b *browser) click(selector string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(selector))); err != nil {
		b.t.Fatalf("clicking %s: %v", selector, err)
	}
}

// until reads the page until ok holds; name is the screenshot kept when
// it never does.
func (b *browser) until(name string, ok func(v dashboardView) bool) dashboardView {
	b.t.Helper()
	var v dashboardView
	if !await.Poll(await.Default, func() bool { v = b.read(); return ok(v) }) {
		b.shot(name)
		b.t.Fatalf("%s: the page never got there: %+v", name, v)
	}
	return v
}

// forgotten: nothing of the node is on the page — only the sign-in form.
func forgotten(v dashboardView) bool {
	return v.LoginVisible && !v.DashboardVisible && v.Rows == 0 && v.InkedCharts == 0 && v.Whoami == "" &&
		slices.Equal(v.Figures, []string{"–", "–", "–"}) && v.Refreshed == "" && v.History == ""
}

// stillForgotten reads the page for longer than the dashboard's refresh
// interval: an answer that was on its way when the session ended must not
// bring anything back.
func (b *browser) stillForgotten(name string) {
	b.t.Helper()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if v := b.read(); !forgotten(v) {
			b.shot(name)
			b.t.Fatalf("%s: the page shows the node again: %+v", name, v)
		}
	}
}

// TestDashboardInChromium loads /ui in a real headless Chromium against a
// real daemon under a little load: before sign-in only the form shows; a
// wrong token is refused; the right one signs in and the page shows the
// recent past at once (the node's history), the account tree, requests per
// second, a denial reason, /v1/check's percentiles, shard load, leases and
// the audit log; signing out empties every table, chart and figure, and
// nothing comes back. Screenshots are kept.
func TestDashboardInChromium(t *testing.T) {
	b := newBrowser(t)
	p := startProc(t, t.TempDir())
	key := p.provision("acme", 100_000_000, 1)
	p.adminCall("POST", "/v1/accounts", map[string]any{"id": "ws-1", "parent": "acme"}, http.StatusCreated)
	p.adminCall("PUT", "/v1/accounts/acme/budget", map[string]any{"allowance": 1_000_000, "period": "day"}, http.StatusOK)
	loadDashboardNode(t, p, key)

	b.open("http://" + p.adm + "/ui")
	if v := b.read(); !forgotten(v) {
		b.shot("before-sign-in")
		t.Errorf("before sign-in the page shows more than the form: %+v", v)
	}
	b.signIn("tga_wrong-token")
	if v := b.until("refused", func(v dashboardView) bool {
		return v.LoginVisible && strings.Contains(v.LoginError, "401")
	}); !forgotten(v) {
		t.Errorf("a refused token leaves more than the form: %+v", v)
	}
	b.shot("refused")
	// The node has sampled its traffic for a few seconds by now: the first
	// refresh after sign-in draws rates from the node's history.
	waitForHistory(t, p, 3)
	b.signIn(testAdminToken)
	first := b.until("first-refresh", func(v dashboardView) bool { return v.Refreshed != "" })
	if h, _ := strconv.Atoi(first.History); h < 3 || first.Refreshed != strconv.Itoa(h+1) || first.RPS == "–" || first.InkedCharts == 0 {
		b.shot("no-history")
		t.Errorf("the first refresh of a new tab does not show the node's recent past: %+v", first)
	}
	v := b.until("incomplete", func(v dashboardView) bool {
		return !v.LoginVisible && v.DashboardVisible && v.RPS != "–" && v.RPS != "0" && contains(v.Accounts, "acme") &&
			contains(v.Accounts, "ws-1") && contains(v.Denials, "unknown-principal") && v.CheckP99 != "" && v.CheckP99 != "–" &&
			contains(v.Audit, "account.create") && v.Shards == 2 && v.Leases > 0 && len(v.AcmeRow) >= 7
	})
	t.Logf("dashboard: %+v", v)
	b.shot("live")
	if !acmeRowComplete(v.AcmeRow, true) || v.Whoami != "bootstrap (admin)" {
		t.Errorf("acme's row %q, signed in as %q", v.AcmeRow, v.Whoami)
	}
	token, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`sessionStorage.getItem('tollgated.admin-token')`))
	if err != nil || token != testAdminToken {
		t.Fatalf("the token is not kept in sessionStorage: %q %v", token, err)
	}

	b.click("#signout")
	b.until("signed-out", forgotten)
	b.stillForgotten("signed-out-later")
	b.shot("signed-out")
	token, err = chromedp.Run(b.ctx, chromedp.Evaluate[string](`sessionStorage.getItem('tollgated.admin-token') || ''`))
	if err != nil || token != "" {
		t.Fatalf("the token outlived the sign-out: %q %v", token, err)
	}
}

// TestDashboardHonoursRolesAndARevokedToken: a viewer sees every table but
// no button that would fail; an operator suspends an account from its
// row; a metrics token sees the traffic and no account data; a token
// revoked while its dashboard is open is answered 401 at the next refresh,
// and the page forgets everything it showed.
func TestDashboardHonoursRolesAndARevokedToken(t *testing.T) {
	b := newBrowser(t)
	p := startProc(t, t.TempDir())
	key := p.provision("acme", 100_000_000, 1)
	p.adminCall("POST", "/v1/accounts", map[string]any{"id": "ws-1", "parent": "acme"}, http.StatusCreated)
	loadDashboardNode(t, p, key)
	token := func(role string) (secret, id string) {
		v := p.adminCall("POST", "/v1/admin-tokens", map[string]any{"name": role + " on the dashboard", "role": role}, http.StatusCreated)
		return v["token"].(string), v["id"].(string)
	}
	live := func(v dashboardView) bool {
		return v.DashboardVisible && v.RPS != "–" && v.Refreshed != "" && v.Shards == 2
	}

	viewer, viewerID := token("viewer")
	b.open("http://" + p.adm + "/ui")
	b.signIn(viewer)
	v := b.until("viewer", func(v dashboardView) bool {
		return live(v) && contains(v.Accounts, "ws-1") && v.Leases > 0 && contains(v.Audit, "admin_token.create") &&
			acmeRowComplete(v.AcmeRow, false)
	})
	if len(v.Buttons) != 0 || v.Whoami != "viewer on the dashboard (viewer)" {
		b.shot("viewer-buttons")
		t.Fatalf("a viewer is offered %v (%s)", v.Buttons, v.Whoami)
	}
	b.shot("viewer")
	// Revoked while the page is open: the next refresh is a 401.
	p.adminCall("DELETE", "/v1/admin-tokens/"+viewerID, nil, http.StatusOK)
	b.until("revoked", func(v dashboardView) bool { return forgotten(v) && strings.Contains(v.LoginError, "401") })
	b.stillForgotten("revoked-later")
	b.shot("revoked")

	operator, _ := token("operator")
	b.signIn(operator)
	b.until("operator", func(v dashboardView) bool {
		return live(v) && contains(v.Buttons, "Suspend") && !contains(v.Buttons, "Resume")
	})
	b.click(`#accounts tr[data-account="ws-1"] button[data-action="suspended"]`)
	b.until("suspended", func(v dashboardView) bool { return contains(v.Buttons, "Resume") })
	if a := p.adminCall("GET", "/v1/accounts/ws-1", nil, http.StatusOK); a["status"] != "suspended" {
		t.Fatalf("the operator's Suspend left ws-1 %v", a["status"])
	}
	b.shot("operator")
	b.click("#signout")
	b.until("operator-signed-out", forgotten)

	metrics, _ := token("metrics")
	b.signIn(metrics)
	v = b.until("metrics", func(v dashboardView) bool { return live(v) && contains(v.Denials, "unknown-principal") })
	if v.AccountsShown || len(v.Accounts) != 0 || len(v.Audit) != 0 || v.Leases != 0 || len(v.Buttons) != 0 ||
		strings.Contains(v.Status, "403") {
		b.shot("metrics-sees-accounts")
		t.Fatalf("a metrics token is shown account data, buttons or refusals: %+v", v)
	}
	b.shot("metrics")
}

// loadDashboardNode sends the node a little traffic until the test ends:
// admitted checks with key, twice as many as denied ones with an unknown
// key.
func loadDashboardNode(t *testing.T, p *proc, key string) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, k := range []string{key, key, "tgk_not-a-key"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 5 * time.Second}
			pace := time.NewTicker(3 * time.Millisecond) // a little load: at most one check per tick
			defer pace.Stop()
			for range 60_000 { // ~3 minutes at most
				select {
				case <-stop:
					return
				case <-pace.C:
				}
				req, _ := http.NewRequest("POST", "http://"+p.listen+"/v1/check", strings.NewReader(`{"workload":[{"op":"requests","count":1}]}`))
				req.Header.Set("Authorization", "Bearer "+k)
				if resp, err := client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
}

// waitForHistory waits until the node has sampled its traffic n times.
func waitForHistory(t *testing.T, p *proc, n int) {
	t.Helper()
	kept := 0
	if !await.Poll(await.Default, func() bool {
		req, _ := http.NewRequest("GET", "http://"+p.adm+"/v1/metrics/history", nil)
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var h struct{ Samples []any }
		err = json.NewDecoder(resp.Body).Decode(&h)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("the node serves no history: %d %v", resp.StatusCode, err)
		}
		kept = len(h.Samples)
		return kept >= n
	}) {
		t.Fatalf("the node kept %d samples of its history, want %d", kept, n)
	}
}

// acmeRowComplete: acme's row of the account tree shows its spend against
// its budget, its period end and its funds (can spend, in leases, spent,
// owed), and an action button when the role may use one.
func acmeRowComplete(cells []string, action bool) bool {
	want := 8
	if action {
		want = 9
	}
	if len(cells) != want || !strings.HasSuffix(cells[2], " / 1,000,000 per day") && !strings.HasPrefix(cells[2], "–") {
		return false
	}
	for _, c := range cells[3:8] {
		if c == "" || c == "–" && cells[2] != "–" {
			return false
		}
	}
	return !action || cells[8] == "Suspend"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
