//go:build linux

package gateways

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

// The end-to-end tests start real processes: tollgated (built from this
// module), a gateway, and an httptest upstream, all on 127.0.0.1. Under
// CI=true a missing gateway fails the test; elsewhere it is skipped with a
// message saying how to install it.

const adminToken = "tga_gateway-e2e-admin-token-0123456789"

// requireTool returns the path of a gateway binary, or skips (fails under CI).
func requireTool(t *testing.T, name string, paths ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real processes")
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	msg := name + " is not installed: run scripts/install-gateways.sh (Debian packages)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// tollgatedBinary builds cmd/tollgated once per test binary.
func tollgatedBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tollgated-gateways-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "tollgated")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/tollgated/tollgated/cmd/tollgated").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// daemon is a running tollgated.
type daemon struct {
	t             *testing.T
	listen, admin string
}

// startTollgated starts tollgated with one shard (rate limits are then
// exact on the first request) and waits until it is ready.
func startTollgated(t *testing.T) *daemon {
	t.Helper()
	cmd := exec.Command(tollgatedBinary(t), "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--shards", "1", "--shutdown-grace", "1s")
	cmd.Env = append(os.Environ(), "TOLLGATED_ADMIN_TOKEN="+adminToken)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "tollgated ready") {
				ready <- sc.Text()
			}
		}
	}()
	select {
	case line := <-ready:
		var m struct{ Listen, Admin string }
		if err := json.Unmarshal([]byte(line), &m); err != nil || m.Listen == "" {
			t.Fatalf("ready line %q: %v", line, err)
		}
		return &daemon{t: t, listen: m.Listen, admin: m.Admin}
	case <-time.After(20 * time.Second):
		t.Fatal("tollgated not ready within 20 s")
	}
	return nil
}

// call sends a JSON request to the admin API and decodes the answer.
func (d *daemon) call(method, path string, body any, want int) map[string]any {
	d.t.Helper()
	var rd io.Reader
	if s, ok := body.(string); ok {
		rd = strings.NewReader(s)
	} else if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+d.admin+path, rd)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		d.t.Fatalf("%s %s = %d %s, want %d", method, path, resp.StatusCode, raw, want)
	}
	var m map[string]any
	json.Unmarshal(raw, &m)
	return m
}

// account creates an account with the example policy (policy.json),
// possibly changed by edit, funded by a daily allowance, and returns a key.
func (d *daemon) account(id string, allowance uint64, edit func(policy map[string]any)) string {
	d.t.Helper()
	raw, err := os.ReadFile("policy.json")
	if err != nil {
		d.t.Fatal(err)
	}
	var policy map[string]any
	if err := json.Unmarshal(raw, &policy); err != nil {
		d.t.Fatal(err)
	}
	if edit != nil {
		edit(policy)
	}
	d.call("POST", "/v1/accounts", map[string]any{"id": id}, http.StatusCreated)
	d.call("PUT", "/v1/accounts/"+id+"/budget", map[string]any{"allowance": allowance, "period": "day"}, http.StatusOK)
	d.call("PUT", "/v1/accounts/"+id+"/policy", policy, http.StatusOK)
	k := d.call("POST", "/v1/accounts/"+id+"/keys", nil, http.StatusCreated)
	key, _ := k["key"].(string)
	if key == "" {
		d.t.Fatalf("no key in %v", k)
	}
	return key
}

// usage waits until the ledger holds n usage events for id (the exporter
// bills durable usage asynchronously) and returns their units, oldest first.
func (d *daemon) usage(id string, n int) []float64 {
	d.t.Helper()
	var events []any
	// Short of n after the bound, the caller's check of what came says
	// what is missing.
	await.Poll(await.Default, func() bool {
		m := d.call("GET", "/v1/accounts/"+id+"/usage", nil, http.StatusOK)
		events, _ = m["items"].([]any) // a page of 100, newest first
		return len(events) >= n
	})
	units := make([]float64, len(events))
	for i, e := range events {
		units[len(events)-1-i], _ = e.(map[string]any)["units"].(float64)
	}
	return units
}

// platformToken issues a platform token: the service's credential for
// finishing captures.
func (d *daemon) platformToken() string {
	d.t.Helper()
	m := d.call("POST", "/v1/platform-tokens", nil, http.StatusCreated)
	tok, _ := m["token"].(string)
	if tok == "" {
		d.t.Fatalf("no token in %v", m)
	}
	return tok
}

// seen is one request the upstream received.
type seen struct {
	method, path, target string // target: the request-target as sent
	header               http.Header
}

// upstream is the service behind the gateway: it records what it sees and,
// on a capture route, finishes the reservation with its platform token and
// the units it "used": the bytes it received on an upload, 37 otherwise.
// A request carrying X-Test-Unfinished is served without a finish (the
// service died before reporting), X-Test-Status sets the status, and one
// whose body cannot be read whole is failed, unreported.
type upstream struct {
	*httptest.Server
	mu       sync.Mutex
	requests []seen
	finished []string // /v1/finish answers
}

func newUpstream(t *testing.T, tollgated, serviceToken string) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		u.requests = append(u.requests, seen{r.Method, r.URL.Path, r.RequestURI, r.Header.Clone()})
		u.mu.Unlock()
		if err != nil {
			// A body cut off (a gateway refused the rest): the work was
			// not done, and is not reported.
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if res := r.Header.Get("X-Tollgate-Reservation"); res != "" && r.Header.Get("X-Test-Unfinished") == "" {
			// Authorize here, capture later: bill what the work used.
			units := int64(37)
			if strings.HasPrefix(r.URL.Path, "/v1/files/") {
				units = n
			}
			req, _ := http.NewRequest("POST", "http://"+tollgated+"/v1/finish",
				strings.NewReader(fmt.Sprintf(`{"reservation":%q,"units":%d}`, res, units)))
			req.Header.Set("Authorization", "Bearer "+serviceToken)
			resp, err := http.DefaultClient.Do(req)
			answer := fmt.Sprint(err)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				answer = fmt.Sprintf("%d %s", resp.StatusCode, b)
			}
			u.mu.Lock()
			u.finished = append(u.finished, answer)
			u.mu.Unlock()
		}
		if st := r.Header.Get("X-Test-Status"); st != "" {
			code, _ := strconv.Atoi(st)
			w.WriteHeader(code)
		}
		io.WriteString(w, "served "+r.URL.Path)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) seen() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.requests...)
}

// freePort returns a loopback port nothing listens on (for the gateways,
// which take their port from a configuration file).
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitListening waits until addr accepts connections or the process ends.
func waitListening(t *testing.T, addr string, exited <-chan struct{}, logs func() string) {
	t.Helper()
	listening := await.Poll(await.Default, func() bool {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return true
		}
		select {
		case <-exited:
			t.Fatalf("gateway exited before listening on %s:\n%s", addr, logs())
		default:
		}
		return false
	})
	if !listening {
		t.Fatalf("gateway not listening on %s within %v:\n%s", addr, await.Default, logs())
	}
}

// startProcess runs a gateway in its own process group, stopping it (and
// any worker it forked) when the test ends.
func startProcess(t *testing.T, cmd *exec.Cmd, logFile string) <-chan struct{} {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if logFile != "" {
		f, err := os.Create(logFile)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = f, f
		t.Cleanup(func() { f.Close() })
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	return exited
}

// localize rewrites an example configuration's addresses: its listen
// address, tollgated's and the service's.
func localize(t *testing.T, file, listen, tollgated, app string) string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	for _, r := range [][2]string{{"127.0.0.1:8000", listen}, {"127.0.0.1:8080", tollgated}, {"127.0.0.1:9000", app}} {
		if !strings.Contains(s, r[0]) {
			t.Fatalf("%s does not name %s", file, r[0])
		}
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	return s
}

// result is what a client got through the gateway.
type result struct {
	status int
	header http.Header
	body   string
}

func send(t *testing.T, method, url, key string, body string, headers ...string) result {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for _, kv := range headers {
		k, v, _ := strings.Cut(kv, ": ")
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, string(b)}
}

// runGatewayScenarios is what every gateway must do in front of tollgated
// and a service; base is the gateway's URL and name prefixes the accounts.
func runGatewayScenarios(t *testing.T, d *daemon, app *upstream, base, name string, problemBodies bool) {
	funded := d.account(name+"-funded", 1_000_000, nil)
	broke := d.account(name+"-broke", 5, nil)  // less than one request costs
	spent := d.account(name+"-spent", 10, nil) // one request a day
	chunked := d.account(name+"-chunked", 2_000_000, nil)
	limited := d.account(name+"-limited", 1_000_000, func(p map[string]any) {
		p["limits"].(map[string]any)["request_rate"] = 1
		p["limits"].(map[string]any)["request_burst"] = 1
	})

	// A funded key passes; the service learns who pays and nothing a client
	// claimed about it.
	r := send(t, "POST", base+"/v1/chat", funded, `{"hello":1}`,
		"X-Tollgate-Account: someone-else", "X-Tollgate-Reservation: "+strings.Repeat("0", 32)+"ffff")
	if r.status != 200 || r.body != "served /v1/chat" {
		t.Fatalf("funded request: %d %q", r.status, r.body)
	}
	got := app.seen()
	if len(got) != 1 {
		t.Fatalf("upstream saw %d requests, want 1", len(got))
	}
	h := got[0].header
	if h.Get("X-Tollgate-Account") != name+"-funded" || len(h.Get("X-Tollgate-Request-Id")) != 32 ||
		h.Get("X-Tollgate-Units") != "10" || h.Get("X-Tollgate-Reservation") != "" {
		t.Fatalf("upstream saw account %q request %q units %q reservation %q",
			h.Get("X-Tollgate-Account"), h.Get("X-Tollgate-Request-Id"), h.Get("X-Tollgate-Units"), h.Get("X-Tollgate-Reservation"))
	}

	// The day's one request of the spent account.
	if r = send(t, "POST", base+"/v1/chat", spent, `{}`); r.status != 200 {
		t.Fatalf("the spent account's first request: %d %q", r.status, r.body)
	}

	refused := func(what string, r result, status int) {
		t.Helper()
		if r.status != status {
			t.Fatalf("%s: %d %q, want %d", what, r.status, r.body, status)
		}
		if ct := r.header.Get("Content-Type"); problemBodies && !strings.HasPrefix(ct, "application/problem+json") {
			t.Fatalf("%s: content type %q", what, ct)
		}
		var p struct{ Status int }
		if err := json.Unmarshal([]byte(r.body), &p); err != nil || p.Status != status {
			t.Fatalf("%s: body %q is not a problem with status %d", what, r.body, status)
		}
	}
	before := len(app.seen())

	// No key: 401, with tollgated's challenge.
	r = send(t, "POST", base+"/v1/chat", "", `{}`)
	refused("no key", r, 401)
	if c := r.header.Values("WWW-Authenticate"); len(c) != 1 || c[0] != `Bearer realm="tollgated"` {
		t.Fatalf("401 without exactly one Bearer challenge: %v", r.header)
	}

	// A spent budget: 402, with Retry-After until the next day's allowance
	// (once the ledger has billed the first request: until then the shard
	// waits for funding, and may answer 503).
	await.Poll(await.Default, func() bool {
		r = send(t, "POST", base+"/v1/chat", spent, `{}`)
		return r.status != http.StatusServiceUnavailable
	})
	refused("over budget", r, 402)
	if secs, _ := strconv.Atoi(r.header.Get("Retry-After")); secs <= 0 || secs > 86400 {
		t.Fatalf("402 without Retry-After to the next day: %v", r.header)
	}
	// A budget no day's allowance brings enough for: 402, and no reset
	// will do, so no Retry-After.
	r = send(t, "POST", base+"/v1/chat", broke, `{}`)
	refused("beyond any budget", r, 402)
	if secs := r.header.Get("Retry-After"); secs != "" {
		t.Fatalf("402 beyond any period's allowance with Retry-After %q", secs)
	}
	if strings.Contains(r.body, `"code":"balance-`) && !strings.Contains(r.body, `"reset_at":null`) { // a gateway that passes tollgated's body on
		t.Fatalf("402 beyond any period's allowance: %s", r.body)
	}

	// A rate limit: the second request within the second is 429 with
	// Retry-After and the RateLimit fields.
	if r = send(t, "POST", base+"/v1/chat", limited, `{}`); r.status != 200 {
		t.Fatalf("first limited request: %d %q", r.status, r.body)
	}
	// nginx's configuration also hands an allowed answer's RateLimit
	// fields to the client (Caddy's forward_auth cannot).
	if name == "nginx" && (r.header.Get("RateLimit") != `"requests";r=0;t=1` ||
		!strings.HasPrefix(r.header.Get("RateLimit-Policy"), `"requests";q=1;w=1`)) {
		t.Fatalf("allowed limited request's RateLimit fields: %v", r.header)
	}
	r = send(t, "POST", base+"/v1/chat", limited, `{}`)
	refused("over rate", r, 429)
	if r.header.Get("Retry-After") != "1" || r.header.Get("RateLimit") != `"requests";r=0;t=1` ||
		!strings.HasPrefix(r.header.Get("RateLimit-Policy"), `"requests";q=1;w=1`) {
		t.Fatalf("429 headers: %v", r.header)
	}

	// A route the policy denies: 403.
	refused("denied route", send(t, "GET", base+"/admin/users", funded, ""), 403)
	if n := len(app.seen()); n != before+1 {
		t.Fatalf("the service saw %d refused requests", n-before-1)
	}

	// Routes price differently: a file upload holds its size (the gateway
	// sets the count from Content-Length, whatever the client claims) and
	// is billed what the service received, the models list one request.
	upload := strings.Repeat("x", 1234)
	if r = send(t, "PUT", base+"/v1/files/report.csv", funded, upload, "X-Content-Length: 1"); r.status != 200 {
		t.Fatalf("upload: %d %q", r.status, r.body)
	}
	if r = send(t, "GET", base+"/v1/models", funded, ""); r.status != 200 {
		t.Fatalf("models: %d %q", r.status, r.body)
	}

	// A chunked upload has no Content-Length when tollgated is asked: it
	// holds its route's count, the most a body may be (1 MiB), and is
	// billed the bytes the service received.
	req, _ := http.NewRequest("PUT", base+"/v1/files/stream.bin", io.MultiReader(strings.NewReader(upload)))
	req.Header.Set("Authorization", "Bearer "+chunked)
	req.TransferEncoding = []string{"chunked"}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("chunked upload: %d", resp.StatusCode)
	}
	if u := d.usage(name+"-chunked", 1); len(u) != 1 || u[0] != float64(len(upload)) {
		t.Fatalf("a chunked upload was billed %v, want [%d]", u, len(upload))
	}

	// Authorize here, capture later: the completion holds 4000 units; the
	// service finishes it with the 37 it used, and 37 are billed.
	if r = send(t, "POST", base+"/v1/completions", funded, `{"prompt":"hi"}`); r.status != 200 {
		t.Fatalf("completion: %d %q", r.status, r.body)
	}
	app.mu.Lock()
	finished := append([]string(nil), app.finished...)
	app.mu.Unlock()
	want := []string{`200 {"billed":1234}`, `200 {"billed":1234}`, `200 {"billed":37}`}
	if !slices.Equal(finished, want) {
		t.Fatalf("the service's finishes: %v, want %v", finished, want)
	}

	units := d.usage(name+"-funded", 4)
	if slices.Sort(units); !slices.Equal(units, []float64{10, 10, 37, 1234}) {
		t.Fatalf("ledger usage of %s-funded: %v, want [10 10 37 1234]", name, units)
	}
	if u := d.usage(name+"-broke", 0); len(u) != 0 {
		t.Fatalf("the broke account was billed %v", u)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}
