package shard

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ring"
)

const t0 = int64(1_700_000_000e9)

var testSecret = bytes.Repeat([]byte{9}, 32)

// harness is one shard with its two rings, plus helpers to play the control
// plane's part.
type harness struct {
	t       testing.TB
	s       *Shard
	in      *ring.Doorbell[message.Inbound]
	out     *ring.Doorbell[message.Outbound]
	parked  map[uint64]*fasthttp.Response
	tickets uint64
}

func newHarness(t testing.TB, id uint16, outCap int) *harness {
	t.Helper()
	return newHarnessWith(t, Config{ID: id, Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4}, outCap)
}

func newHarnessWith(t testing.TB, cfg Config, outCap int) *harness {
	t.Helper()
	inRing, _ := ring.New[message.Inbound](256)
	outRing, _ := ring.New[message.Outbound](outCap)
	in, err := ring.NewDoorbell(inRing)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ring.NewDoorbell(outRing)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); out.Close() })
	s, err := New(cfg, in, out)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, s: s, in: in, out: out, parked: map[uint64]*fasthttp.Response{}}
	s.SetCompleter(func(ticket uint64, fill func(*fasthttp.Response)) {
		if resp := h.parked[ticket]; resp != nil {
			fill(resp)
			delete(h.parked, ticket)
		}
	})
	s.SetPending(func(ticket uint64) bool { return h.parked[ticket] != nil })
	return h
}

func testSnapshot(id core.AccountID) *core.Snapshot {
	return &core.Snapshot{
		Account: id, Generation: 1, Permissions: 0b01,
		PermissionNames: []string{"chat", "images"},
		Limits:          core.Limits{MaxItems: 10_000, RequestRate: 1000, RequestBurst: 1000, HoldTimeout: 30e9},
		Costs: core.CostTable{Classes: []core.OpClass{
			{Name: "input_tokens", Weight: 1}, {Name: "requests", Weight: 10},
		}},
	}
}

// provision installs account id with key, funded by units, and marks ready.
func (h *harness) provision(id core.AccountID, key string, units core.CostUnits) {
	h.t.Helper()
	h.unfunded(id, key)
	h.grant(id, 1, units, t0)
	if l, err := h.s.engine.Lease(id); err != nil || l.Units() != units {
		h.t.Fatalf("provisioning failed: lease %v", err)
	}
}

// unfunded installs account id with key and no lease, and marks ready: its
// first request is refused for want of funding until a grant arrives.
func (h *harness) unfunded(id core.AccountID, key string) {
	h.t.Helper()
	hs, _ := credential.NewHasher(testSecret)
	d, _ := hs.Digest([]byte(key))
	for _, m := range []message.Inbound{
		{Kind: message.InInstall, Snap: testSnapshot(id)},
		{Kind: message.InBind, Principal: d.Principal(), Digest: d, Account: id},
		{Kind: message.InReady},
	} {
		if !h.in.Push(m) {
			h.t.Fatal("inbox full")
		}
	}
	h.s.Poll(t0)
}

// grant delivers a lease slice of units to id, as the control plane does.
func (h *harness) grant(id core.AccountID, token uint64, units core.CostUnits, now int64) {
	h.t.Helper()
	if !h.in.Push(message.Inbound{Kind: message.InGrant, Account: id, Token: token, Units: units, Until: t0 + 3600e9}) {
		h.t.Fatal("inbox full")
	}
	h.s.Poll(now)
}

// reusedCheck is one /v1/check for key-acme that allocation tests serve
// again and again; its Defer hands out a fresh ticket each time.
func reusedCheck() *Request {
	req := fasthttp.AcquireRequest()
	req.Header.SetMethod("POST")
	req.SetRequestURI("/v1/check")
	req.Header.Set("Authorization", "Bearer key-acme")
	req.SetBodyString(chatBody)
	ticket := uint64(0)
	return &Request{Req: req, Resp: &fasthttp.Response{}, Defer: func() uint64 { ticket++; return ticket }}
}

// do sends one request and returns status and decoded JSON body.
func (h *harness) do(method, path, key, body string) (int, map[string]any, *fasthttp.Response) {
	h.t.Helper()
	req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
	req.Header.SetMethod(method)
	req.SetRequestURI(path)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.SetBodyString(body)
	h.s.Serve(&Request{Req: req, Resp: resp, Now: t0 + 1, Defer: func() uint64 {
		h.tickets++
		h.parked[h.tickets] = resp
		return h.tickets
	}})
	var m map[string]any
	if len(resp.Body()) > 0 {
		if err := json.Unmarshal(resp.Body(), &m); err != nil {
			h.t.Fatalf("%s %s: body is not JSON: %q", method, path, resp.Body())
		}
	}
	return resp.StatusCode(), m, resp
}

// drainOut pops every outbound message.
func (h *harness) drainOut() []message.Outbound {
	var ms []message.Outbound
	for {
		m, ok := h.out.Ring().Pop()
		if !ok {
			return ms
		}
		ms = append(ms, m)
	}
}

const chatBody = `{"permission":"chat","workload":[{"op":"input_tokens","count":1200},{"op":"requests","count":1}]}`

func TestCheckAdmitsAndBills(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.provision("acme", "key-acme", 100_000)
	status, body, resp := h.do("POST", "/v1/check", "key-acme", chatBody)
	if status != 200 || body["decision"] != "admit" || body["units"] != float64(1210) {
		t.Fatalf("check = %d %v", status, body)
	}
	if id, _ := body["request_id"].(string); len(id) != 32 {
		t.Fatalf("request_id %q", id)
	}
	if rev, _ := body["policy_revision"].(string); len(rev) != 64 {
		t.Fatalf("policy_revision %q", rev)
	}
	if ct := string(resp.Header.ContentType()); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	var usage []core.UsageEvent
	for _, m := range h.drainOut() {
		if m.Kind == message.OutUsage {
			usage = append(usage, m.Usage)
		}
	}
	if len(usage) != 1 || usage[0].Units != 1210 || usage[0].Account() != "acme" {
		t.Fatalf("usage = %+v", usage)
	}
	if h.s.usageReserved != 0 {
		t.Fatalf("%d usage slots still reserved", h.s.usageReserved)
	}
}

func TestStagedAdmitCommitFinish(t *testing.T) {
	h := newHarness(t, 3, 1024)
	h.provision("acme", "key-acme", 100_000)
	status, body, _ := h.do("POST", "/v1/admit", "key-acme", `{"workload":[{"op":"input_tokens","count":50}],"ttl_ms":5000}`)
	if status != 200 || body["quote"] != float64(50) {
		t.Fatalf("admit = %d %v", status, body)
	}
	res := body["reservation"].(string)
	if len(res) != reservationLen || res[:4] != "0003" {
		t.Fatalf("reservation %q does not name shard 3", res)
	}
	if exp, _ := body["expires_at"].(string); exp != "2023-11-14T22:13:25.000000001Z" {
		t.Fatalf("expires_at %q", exp)
	}
	if st, b, _ := h.do("POST", "/v1/finish", "key-acme", `{"reservation":"`+res+`"}`); st != 409 || b["code"] != "not-committed" {
		t.Fatalf("finish before commit = %d %v", st, b)
	}
	if st, b, _ := h.do("POST", "/v1/commit", "key-acme", `{"reservation":"`+res+`"}`); st != 200 || b["committed"] != true {
		t.Fatalf("commit = %d %v", st, b)
	}
	if st, b, _ := h.do("POST", "/v1/cancel", "key-acme", `{"reservation":"`+res+`"}`); st != 409 || b["code"] != "already-committed" {
		t.Fatalf("cancel after commit = %d %v", st, b)
	}
	if st, b, _ := h.do("POST", "/v1/finish", "key-acme", `{"reservation":"`+res+`","units":51}`); st != 422 || b["code"] != "billed-above-quote" {
		t.Fatalf("finish above quote = %d %v", st, b)
	}
	if st, b, _ := h.do("POST", "/v1/finish", "key-acme", `{"reservation":"`+res+`","units":20}`); st != 200 || b["billed"] != float64(20) {
		t.Fatalf("finish = %d %v", st, b)
	}
	if st, b, _ := h.do("POST", "/v1/finish", "key-acme", `{"reservation":"`+res+`"}`); st != 404 || b["code"] != "unknown-reservation" {
		t.Fatalf("second finish = %d %v", st, b)
	}
}

func TestCancelChargesNothing(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.provision("acme", "key-acme", 100_000)
	_, body, _ := h.do("POST", "/v1/admit", "key-acme", chatBody)
	res := body["reservation"].(string)
	if st, b, _ := h.do("POST", "/v1/cancel", "key-acme", `{"reservation":"`+res+`"}`); st != 200 || b["cancelled"] != true {
		t.Fatalf("cancel = %d %v", st, b)
	}
	for _, m := range h.drainOut() {
		if m.Kind == message.OutUsage {
			t.Fatalf("cancel billed: %+v", m.Usage)
		}
	}
	l, _ := h.s.engine.Lease("acme")
	if b := l.Balance(); b.Available != 100_000 || !b.Conserved() {
		t.Fatalf("lease after cancel: %+v", b)
	}
}

func TestAnotherPrincipalCannotTouchAReservation(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.provision("acme", "key-acme", 100_000)
	h.provision("evil", "key-evil", 100_000)
	_, body, _ := h.do("POST", "/v1/admit", "key-acme", chatBody)
	res := body["reservation"].(string)
	if st, b, _ := h.do("POST", "/v1/cancel", "key-evil", `{"reservation":"`+res+`"}`); st != 404 || b["code"] != "unknown-reservation" {
		t.Fatalf("foreign cancel = %d %v", st, b)
	}
	if st, _, _ := h.do("POST", "/v1/cancel", "key-acme", `{"reservation":"`+res+`"}`); st != 200 {
		t.Fatal("owner could not cancel after a foreign attempt")
	}
}

func TestRefusalsAreProblems(t *testing.T) {
	// Without funding waits, so the lease refusal is answered at once
	// (fundwait_test.go covers waiting).
	h := newHarnessWith(t, Config{ID: 0, Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4,
		FundingWait: NoFundingWait}, 1024)
	h.provision("acme", "key-acme", 2000)
	cases := []struct {
		name, key, path, body string
		status                int
		code                  string
	}{
		{"no key", "", "/v1/check", chatBody, 401, "unknown-principal"},
		{"bad key", "key-nope", "/v1/check", chatBody, 401, "unknown-principal"},
		{"not json", "key-acme", "/v1/check", `{`, 400, "invalid-body"},
		{"array body", "key-acme", "/v1/check", `[]`, 400, "invalid-body"},
		{"bad count", "key-acme", "/v1/check", `{"workload":[{"op":"requests","count":-1}]}`, 400, "invalid-body"},
		{"bad ttl", "key-acme", "/v1/admit", `{"workload":[{"op":"requests","count":1}],"ttl_ms":0}`, 400, "invalid-body"},
		{"unknown op", "key-acme", "/v1/check", `{"workload":[{"op":"video","count":1}]}`, 422, "unpriced-operation"},
		{"empty", "key-acme", "/v1/check", `{"workload":[]}`, 422, "empty-workload"},
		{"too many items", "key-acme", "/v1/check", `{"workload":[{"op":"requests","count":10001}]}`, 413, "request-too-large"},
		{"permission not granted", "key-acme", "/v1/check", `{"permission":"images","workload":[{"op":"requests","count":1}]}`, 403, "missing-permission"},
		{"unknown permission", "key-acme", "/v1/check", `{"permission":"root","workload":[{"op":"requests","count":1}]}`, 403, "missing-permission"},
		{"lease exhausted", "key-acme", "/v1/check", `{"workload":[{"op":"input_tokens","count":5000}]}`, 503, "lease-exhausted"},
		{"bad reservation", "key-acme", "/v1/commit", `{"reservation":"XYZ"}`, 400, "invalid-body"},
		{"unknown route", "key-acme", "/v2/nothing", ``, 404, "not-found"},
		{"wrong method", "key-acme", "/v1/check", ``, 405, "method-not-allowed"},
	}
	for _, c := range cases {
		method := "POST"
		if c.code == "method-not-allowed" {
			method = "GET"
		}
		st, b, resp := h.do(method, c.path, c.key, c.body)
		if st != c.status || b["code"] != c.code || b["status"] != float64(c.status) || b["title"] == "" {
			t.Errorf("%s: %d %v, want %d %s", c.name, st, b, c.status, c.code)
		}
		if ct := string(resp.Header.ContentType()); ct != "application/problem+json" {
			t.Errorf("%s: content type %q", c.name, ct)
		}
		if c.status == 401 && string(resp.Header.Peek("WWW-Authenticate")) != `Bearer realm="tollgated"` {
			t.Errorf("%s: 401 without a Bearer challenge", c.name)
		}
	}
	if h.s.usageReserved != 0 {
		t.Fatalf("refusals leaked %d usage slots", h.s.usageReserved)
	}
}

func TestRateRefusalCarriesRetryAfter(t *testing.T) {
	h := newHarness(t, 0, 4096)
	h.provision("acme", "key-acme", 1<<40)
	for range 1000 {
		if st, _, _ := h.do("POST", "/v1/check", "key-acme", `{"workload":[{"op":"requests","count":1}]}`); st != 200 {
			t.Fatalf("within burst refused: %d", st)
		}
		h.drainOut()
	}
	st, b, resp := h.do("POST", "/v1/check", "key-acme", `{"workload":[{"op":"requests","count":1}]}`)
	if st != 429 || b["code"] != "request-rate-limited" || b["retry"] != "transient" || b["retry_after_ms"] != float64(1) {
		t.Fatalf("over rate = %d %v", st, b)
	}
	if ra := string(resp.Header.Peek("Retry-After")); ra != "1" {
		t.Fatalf("Retry-After %q", ra)
	}
}

func TestAccountingBackpressureShedsBeforeTheBody(t *testing.T) {
	h := newHarness(t, 0, 8) // 8 slots, 4 kept as headroom: 4 usage slots
	h.provision("acme", "key-acme", 1<<40)
	h.drainOut()
	var held []string
	for range 4 {
		st, b, _ := h.do("POST", "/v1/admit", "key-acme", chatBody)
		if st != 200 {
			t.Fatalf("admit = %d %v", st, b)
		}
		held = append(held, b["reservation"].(string))
	}
	st, b, _ := h.do("POST", "/v1/admit", "key-acme", chatBody)
	if st != 503 || b["code"] != "accounting-busy" {
		t.Fatalf("over usage capacity = %d %v", st, b)
	}
	h.do("POST", "/v1/cancel", "key-acme", `{"reservation":"`+held[0]+`"}`)
	if st, _, _ := h.do("POST", "/v1/admit", "key-acme", chatBody); st != 200 {
		t.Fatalf("slot freed by cancel not reusable: %d", st)
	}
	if c := h.s.engine.Counters(); c.Denials[core.DenyAccountingBackpressure] != 1 {
		t.Fatalf("backpressure not counted: %v", c.Denials)
	}
}

func TestRevocationStopsACachedKey(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.provision("acme", "key-acme", 100_000)
	if st, _, _ := h.do("POST", "/v1/check", "key-acme", chatBody); st != 200 {
		t.Fatal("first check")
	}
	hs, _ := credential.NewHasher(testSecret)
	d, _ := hs.Digest([]byte("key-acme"))
	h.in.Push(message.Inbound{Kind: message.InUnbind, Principal: d.Principal()})
	h.s.Poll(t0 + 2)
	if st, b, _ := h.do("POST", "/v1/check", "key-acme", chatBody); st != 401 {
		t.Fatalf("revoked key = %d %v", st, b)
	}
}

func TestHealthRoutes(t *testing.T) {
	h := newHarness(t, 0, 64)
	if st, _, _ := h.do("GET", "/livez", "", ""); st != 200 {
		t.Fatal("livez")
	}
	if st, b, _ := h.do("GET", "/readyz", "", ""); st != 503 || b["code"] != "not-ready" {
		t.Fatalf("readyz before state = %d %v", st, b)
	}
	h.provision("acme", "k", 1)
	if st, _, _ := h.do("GET", "/readyz", "", ""); st != 200 {
		t.Fatal("readyz after state")
	}
}

func TestEveryReasonHasAStatusAndTitle(t *testing.T) {
	for r := core.DenyReason(1); int(r) < core.NumDenyReasons; r++ {
		if denyStatus[r] == 0 || denyTitle[r] == "" {
			t.Errorf("%s has no status or title", r)
		}
	}
}

func TestCheckAllocatesNothingWhenWarm(t *testing.T) {
	h := newHarness(t, 0, 1<<16)
	h.provision("acme", "key-acme", 1<<50)
	req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
	req.Header.SetMethod("POST")
	req.SetRequestURI("/v1/check")
	req.Header.Set("Authorization", "Bearer key-acme")
	req.SetBodyString(chatBody)
	now := t0
	r := &Request{Req: req, Resp: resp}
	run := func() {
		now += 2e6
		r.Now = now
		h.s.Serve(r)
		if resp.StatusCode() != 200 {
			t.Fatalf("check = %d %s", resp.StatusCode(), resp.Body())
		}
		h.out.Ring().Pop()
	}
	requireNoAllocsWhenWarm(t, "/v1/check", run)
}

// TestDeadlinesThroughTheAPI: a reservation left pending past its ttl_ms
// expires with no charge; one committed but never finished is billed at
// its quote, marked lapsed — both by the shard's own loop (Poll).
func TestDeadlinesThroughTheAPI(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.provision("acme", "key-acme", 100_000)
	h.drainOut()
	_, b1, _ := h.do("POST", "/v1/admit", "key-acme", `{"workload":[{"op":"requests","count":1}],"ttl_ms":1000}`)
	pending := b1["reservation"].(string)
	_, b2, _ := h.do("POST", "/v1/admit", "key-acme", `{"workload":[{"op":"input_tokens","count":70}],"ttl_ms":1000}`)
	committed := b2["reservation"].(string)
	if st, _, _ := h.do("POST", "/v1/commit", "key-acme", `{"reservation":"`+committed+`"}`); st != 200 {
		t.Fatal("commit")
	}
	h.s.Poll(t0 + 2e9) // past both deadlines and the sweep interval
	if st, b, _ := h.do("POST", "/v1/commit", "key-acme", `{"reservation":"`+pending+`"}`); st != 404 {
		t.Fatalf("expired pending reservation = %d %v", st, b)
	}
	var usage []core.UsageEvent
	for _, m := range h.drainOut() {
		if m.Kind == message.OutUsage {
			usage = append(usage, m.Usage)
		}
	}
	if len(usage) != 1 || !usage[0].Lapsed || usage[0].Units != 70 {
		t.Fatalf("lapsed bill = %+v", usage)
	}
	l, _ := h.s.engine.Lease("acme")
	if b := l.Balance(); b.Held != 0 || b.Billed != 70 || !b.Conserved() {
		t.Fatalf("lease after expiry: %+v", b)
	}
}

// requireNoAllocsWhenWarm runs run 100 times, so every pool and cache is
// warm, then fails t if it still allocates.
func requireNoAllocsWhenWarm(t *testing.T, what string, run func()) {
	t.Helper()
	for range 100 {
		run()
	}
	if a := testing.AllocsPerRun(1000, run); a != 0 {
		t.Fatalf("%s allocates %v per request", what, a)
	}
}
