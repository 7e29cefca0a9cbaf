package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/tollgated/tollgated/clock"
)

// The daemon a test starts (startProc: this test binary acting as
// tollgated) runs on a clock the test can advance: "past the lease's
// expiry and grace" is a call, not a sleep. The daemon serves
// POST /advance?by=DURATION for it on a loopback port of its own, and
// names the port on standard error before anything else.

const testClockLine = "tollgated test clock at "

// serveTestClock makes the daemon's clock and serves its advance.
func serveTestClock() *clock.Clock {
	c := clock.New()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(os.Stderr, "test clock: %v\n", err)
		os.Exit(3)
	}
	fmt.Fprintf(os.Stderr, "%s%s\n", testClockLine, ln.Addr())
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("by"))
		if r.Method != http.MethodPost || r.URL.Path != "/advance" || err != nil || d <= 0 {
			http.Error(w, "POST /advance?by=DURATION (positive)", http.StatusBadRequest)
			return
		}
		c.Advance(d)
		w.WriteHeader(http.StatusNoContent)
	}))
	return c
}

var testClockAddr = regexp.MustCompile(regexp.QuoteMeta(testClockLine) + `(127\.0\.0\.1:\d+)`)

// clockNow is the daemon's clock's reading (its offset is what advance
// added).
func (p *proc) clockNow() time.Time { return time.Now().Add(p.clockOffset) }

// advance moves the daemon's clock d forward. When it returns, every
// reading the daemon takes is d later, and its sleepers have been woken.
func (p *proc) advance(d time.Duration) {
	p.t.Helper()
	m := testClockAddr.FindStringSubmatch(p.all.String())
	if m == nil {
		p.t.Fatal("this daemon has no test clock (another build, TOLLGATED_TEST_BINARY?)")
	}
	resp, err := http.Post("http://"+m[1]+"/advance?by="+d.String(), "", nil)
	if err != nil {
		p.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		p.t.Fatalf("advancing the clock %v: %s", d, resp.Status)
	}
	p.clockOffset += d
}

// TestTheDaemonsClockAdvances: an hour passes on the daemon's clock in
// one call, and every part of the node sees it. A reservation open across
// it expires (the shard reads the clock) and its expiry is dated by it; a
// key that expires within it stops authenticating (the admin API's sweep
// reads it); the account's other key is still served (its shard's lease
// expired with the hour and the plane took a new one at the new time);
// and no unit is lost on the way.
func TestTheDaemonsClockAdvances(t *testing.T) {
	p := startProc(t, t.TempDir())
	long := p.provision("clocked", 1_000_000, 1)
	expires := p.clockNow().Add(time.Hour).UTC().Format(time.RFC3339)
	short := p.adminCall("POST", "/v1/accounts/clocked/keys", map[string]any{"expires_at": expires}, http.StatusCreated)["key"].(string)
	awaitStatus(t, p, short, http.StatusOK)
	awaitStatus(t, p, long, http.StatusOK)
	open := p.dataCall(long, "/v1/admit", `{"permission":"chat","workload":[{"op":"requests","count":1}],"ttl_ms":60000}`, http.StatusOK)

	p.advance(time.Hour + time.Second)
	awaitStatus(t, p, short, http.StatusUnauthorized)
	if st, body := checkOnce(t, p, long); st != http.StatusOK {
		t.Fatalf("an hour later: %d %s", st, body)
	}
	p.dataCall(long, "/v1/commit", `{"reservation":"`+open["reservation"].(string)+`"}`, http.StatusNotFound)
	again := p.dataCall(long, "/v1/admit", `{"permission":"chat","workload":[{"op":"requests","count":1}],"ttl_ms":60000}`, http.StatusOK)
	at, err := time.Parse(time.RFC3339Nano, again["expires_at"].(string))
	if err != nil || at.Before(time.Now().Add(time.Hour)) {
		t.Fatalf("a reservation taken an hour later expires at %v (%v), not an hour and a minute from the wall clock", at, err)
	}
	if f := p.funds("clocked"); f["lost"] != 0 || f["spent"] < 3 {
		t.Fatalf("an hour later: %v", f)
	}
}

// dataCall posts body to the data plane's path with key and decodes the
// answer, which must have status want.
func (p *proc) dataCall(key, path, body string, want int) map[string]any {
	p.t.Helper()
	st, _, raw := httpCall(p.t, "POST", "http://"+p.listen+path, "Bearer "+key, []byte(body))
	if st != want {
		p.t.Fatalf("POST %s = %d %s, want %d", path, st, raw, want)
	}
	var m map[string]any
	json.Unmarshal(raw, &m)
	return m
}
