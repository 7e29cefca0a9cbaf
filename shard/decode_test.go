package shard

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/policy"
)

// platformHarness is a shard with a funded customer account "acme" (key
// "key-acme"), the chain org ⊃ ws ⊃ a1 (each with an evidence cell), and
// the platform token; funding waits are off, so every refusal is answered
// at once.
func platformHarness(t testing.TB) (*harness, map[core.AccountID]*core.EvidenceCell) {
	t.Helper()
	h := newHarnessWith(t, Config{ID: 0, Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4,
		FundingWait: NoFundingWait}, 1<<12)
	h.provision("acme", "key-acme", 1<<50)
	cells := map[core.AccountID]*core.EvidenceCell{}
	hs, _ := credential.NewHasher(testSecret)
	d, _ := hs.Digest([]byte(platformToken))
	h.in.Push(message.Inbound{Kind: message.InBindPlatform, Principal: d.Principal(), Digest: d})
	for _, a := range []struct {
		id        core.AccountID
		scope     core.Scope
		ancestors []core.AccountID
	}{{"org", core.ScopeOrg, nil}, {"ws", core.ScopeWorkspace, []core.AccountID{"org"}},
		{"a1", core.ScopeAgent, []core.AccountID{"ws", "org"}}} {
		snap := testSnapshot(a.id)
		snap.Scope, snap.Ancestors = a.scope, a.ancestors
		cells[a.id] = new(core.EvidenceCell)
		h.in.Push(message.Inbound{Kind: message.InInstall, Snap: snap})
		h.in.Push(message.Inbound{Kind: message.InEvidence, Account: a.id, Evidence: cells[a.id]})
	}
	h.s.Poll(t0)
	return h, cells
}

// engineState is what a request refused before the engine must leave as
// it was: the counters (but denials, which count refusals), the lease and
// the shard's claims.
type engineState struct {
	counters      core.Counters
	lease         core.LeaseBalance
	inFlight      int
	usageReserved int
	ackClaimed    int
}

func (h *harness) state(account core.AccountID) engineState {
	c := h.s.engine.Counters()
	c.Denials = [core.NumDenyReasons]uint64{}
	var lb core.LeaseBalance
	if l, err := h.s.engine.Lease(account); err == nil {
		lb = l.Balance()
	}
	return engineState{counters: c, lease: lb, inFlight: h.s.engine.InFlight(),
		usageReserved: h.s.usageReserved, ackClaimed: h.s.acks.claimed}
}

// requireConserved fails t unless the engine's partitions and the lease's
// conservation hold, and every usage slot claimed belongs to a live
// reservation.
func (h *harness) requireConserved(t testing.TB, account core.AccountID) {
	t.Helper()
	c := h.s.engine.Counters()
	notStarted, started := h.s.engine.Outstanding()
	if c.TerminalSum()+uint64(notStarted) != c.Admitted || c.Finished+c.Lapsed+uint64(started) != c.Started {
		t.Fatalf("counters do not partition: %+v, %d not started, %d started", c, notStarted, started)
	}
	if l, err := h.s.engine.Lease(account); err == nil && !l.Balance().Conserved() {
		t.Fatalf("lease not conserved: %+v", l.Balance())
	}
	if h.s.usageReserved != h.s.engine.InFlight() || h.s.acks.claimed != 0 {
		t.Fatalf("%d usage slots claimed for %d reservations, %d acks claimed", h.s.usageReserved,
			h.s.engine.InFlight(), h.s.acks.claimed)
	}
}

// liveReservation admits a reservation for acme and returns its id,
// committed if commit.
func (h *harness) liveReservation(commit bool) string {
	h.t.Helper()
	st, b, _ := h.do("POST", "/v1/admit", "key-acme", `{"workload":[{"op":"requests","count":1}]}`)
	if st != 200 {
		h.t.Fatalf("admit = %d %v", st, b)
	}
	res := b["reservation"].(string)
	if commit {
		if st, b, _ := h.do("POST", "/v1/commit", "key-acme", `{"reservation":"`+res+`"}`); st != 200 {
			h.t.Fatalf("commit = %d %v", st, b)
		}
	}
	return res
}

// requireRefusal checks one answer against what the variant says.
func requireRefusal(t *testing.T, v variant, st int, m map[string]any, resp *fasthttp.Response) {
	t.Helper()
	if st != 400 || m["code"] != v.code || m["status"] != 400.0 || m["title"] == "" || m["detail"] == "" {
		t.Errorf("%s: %d %v, want 400 %s", v.name, st, m, v.code)
		return
	}
	if f, _ := m["field"].(string); f != v.field {
		t.Errorf("%s: field %q, want %q", v.name, f, v.field)
	}
	if ct := string(resp.Header.ContentType()); ct != "application/problem+json" {
		t.Errorf("%s: content type %q", v.name, ct)
	}
}

func TestAdmitBodiesAreCheckedFieldByField(t *testing.T) {
	h, _ := platformHarness(t)
	for _, path := range []string{"/v1/check", "/v1/admit"} {
		for _, v := range admitVariants() {
			before := h.state("acme")
			st, m, resp := h.do("POST", path, "key-acme", v.body)
			h.drainOut()
			h.s.Quiesce()
			if v.valid {
				if st != 200 {
					t.Errorf("%s %s: %d %v", path, v.name, st, m)
				}
				continue
			}
			requireRefusal(t, v, st, m, resp)
			if after := h.state("acme"); after != before {
				t.Fatalf("%s %s changed the engine:\n%+v\n%+v", path, v.name, before, after)
			}
			h.requireConserved(t, "acme")
		}
	}
}

// TestReservationBodiesAreCheckedBeforeTheKey: the crash was
// POST /v1/commit {} without a key. Every body is decoded before the key
// is looked at, so each refusal needs no credential; a valid body without
// one is 401.
func TestReservationBodiesAreCheckedBeforeTheKey(t *testing.T) {
	h, _ := platformHarness(t)
	for _, op := range []message.Op{message.OpCommit, message.OpFinish, message.OpCancel} {
		path := map[message.Op]string{message.OpCommit: "/v1/commit", message.OpFinish: "/v1/finish", message.OpCancel: "/v1/cancel"}[op]
		for _, v := range reservationVariants(op) {
			res := h.liveReservation(op == message.OpFinish)
			before := h.state("acme")
			st, m, resp := h.do("POST", path, "", strings.ReplaceAll(v.body, "RES", res))
			if v.valid {
				if st != 401 {
					t.Errorf("%s %s: %d %v, want 401", path, v.name, st, m)
				}
			} else {
				requireRefusal(t, v, st, m, resp)
				if after := h.state("acme"); after != before {
					t.Fatalf("%s %s changed the engine:\n%+v\n%+v", path, v.name, before, after)
				}
			}
			h.s.Quiesce()
			h.drainOut()
			h.requireConserved(t, "acme")
		}
	}
	if st, m, _ := h.do("POST", "/v1/commit", "", `{}`); st != 400 || m["field"] != "reservation" {
		t.Fatalf("the issue's POST /v1/commit {} = %d %v", st, m)
	}
}

func TestUsageBodiesAreCheckedFieldByField(t *testing.T) {
	h, _ := platformHarness(t)
	for _, v := range usageVariants() {
		parked := len(h.parked)
		st, m, resp := h.postUsage(v.body, true)
		if v.valid || len(h.parked) > parked {
			t.Fatalf("%s: accepted (%d parked)", v.name, len(h.parked))
		}
		requireRefusal(t, v, st, m, resp)
	}
	if len(h.drainOut()) != 0 {
		t.Fatal("a refused batch reached the plane")
	}
	// The template itself is accepted: events of 1 and 2 are parked for
	// the plane.
	h.postUsage(render(usageTemplate), true)
	if len(h.parked) != 1 {
		t.Fatal("the valid batch was not parked")
	}
}

func TestBodiesOverTheRouteBoundAre413(t *testing.T) {
	h, _ := platformHarness(t)
	pad := strings.Repeat(" ", maxAdmitBody)
	if st, m, _ := h.do("POST", "/v1/check", "key-acme", `{"workload":[]`+pad+`}`); st != 413 || m["code"] != "body-too-large" {
		t.Fatalf("large check = %d %v", st, m)
	}
	if st, m, _ := h.do("POST", "/v1/cancel", "", `{"reservation":"0"`+pad[:maxReservationBody]+`}`); st != 413 || m["code"] != "body-too-large" {
		t.Fatalf("large cancel = %d %v", st, m)
	}
	h.requireConserved(t, "acme")
}

func TestEchoedKeysAreEscapedAndCut(t *testing.T) {
	h, _ := platformHarness(t)
	long := strings.Repeat("k", 100)
	for body, field := range map[string]string{
		`{"a\"b":1}`:                             `a"b`,
		`{"a\\b":1}`:                             `a\b`,
		`{"a\u0001b":1}`:                         "a\u0001b",
		"{\"a\xffb\":1}":                         "a\ufffdb",
		`{"` + long + `":1}`:                     long[:maxEchoedKey],
		`{"reservation":"x","reservation":1}`:    "reservation",
		`{"reservation":1,"re\u0073ervation":1}`: "reservation",
	} {
		st, m, _ := h.do("POST", "/v1/cancel", "", body)
		if st != 400 || m["field"] != field {
			t.Errorf("%s: %d field %q, want %q", body, st, m["field"], field)
		}
	}
}

func TestIntegersArePlainAndBelow2To63(t *testing.T) {
	for s, want := range map[string]bool{"0": true, "1": true, "9223372036854775807": true,
		"9223372036854775808": false, "18446744073709551615": false, "01": false, "-0": false, "": false,
		"1.0": false, "1e3": false, "+1": false, "NaN": false, "99999999999999999999": false} {
		if _, ok := plainUint([]byte(s)); ok != want {
			t.Errorf("plainUint(%q) = %v", s, ok)
		}
	}
	if maxNameLen != policy.MaxNameLen {
		t.Fatalf("names are bounded at %d here and %d in policy", maxNameLen, policy.MaxNameLen)
	}
}

// TestFinishCannotNameTheQuoteSentinel: MaxCostUnits in units means "bill
// the quote"; before the range check, a client sending 2^64−1 reached it.
func TestFinishCannotNameTheQuoteSentinel(t *testing.T) {
	h, _ := platformHarness(t)
	res := h.liveReservation(true)
	st, m, _ := h.do("POST", "/v1/finish", "key-acme", `{"reservation":"`+res+`","units":18446744073709551615}`)
	if st != 400 || m["field"] != "units" {
		t.Fatalf("finish at 2^64-1 = %d %v", st, m)
	}
}

func TestBothCredentialsFollowTheOneBearerRule(t *testing.T) {
	h, cells := platformHarness(t)
	cells["a1"].Store(core.FundingEvidence{Remaining: 100, Scope: core.ScopeAgent})
	for _, c := range []struct {
		header string
		ok     bool
	}{
		{"Bearer KEY", true}, {"bearer KEY", true}, {"BEARER KEY", true}, {"Bearer   KEY  ", true},
		{"BearerKEY", false}, {"Bearer", false}, {"Basic KEY", false}, {"KEY", false}, {"Bearer KEY x", false},
	} {
		for _, r := range []struct{ method, path, key, body string }{
			{"POST", "/v1/check", "key-acme", chatBody},
			{"GET", "/v1/admission?agent_id=a1", platformToken, ""},
		} {
			req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
			req.Header.SetMethod(r.method)
			req.SetRequestURI(r.path)
			req.Header.Set("Authorization", strings.Replace(c.header, "KEY", r.key, 1))
			req.SetBodyString(r.body)
			h.s.Serve(&Request{Req: req, Resp: resp, Now: t0 + 1})
			h.drainOut()
			if got := resp.StatusCode() == 200; got != c.ok {
				t.Errorf("%s %q: %d %s", r.path, c.header, resp.StatusCode(), resp.Body())
			}
		}
	}
}

// TestRefusalsAllocateNothingWhenWarm: refusing costs no more than
// admitting. (A body that is not JSON at all allocates in the parser's
// error, and a usage batch allocates by design.)
func TestRefusalsAllocateNothingWhenWarm(t *testing.T) {
	h, _ := platformHarness(t)
	for _, c := range []struct {
		name, method, path, auth, body string
		status                         int
	}{
		{"commit {} without a key", "POST", "/v1/commit", "", `{}`, 400},
		{"finish with a float", "POST", "/v1/finish", "", `{"reservation":"00000000000000000000","units":1.5}`, 400},
		{"check without count", "POST", "/v1/check", "Bearer key-acme", `{"workload":[{"op":"requests"}]}`, 400},
		{"check with a repeated count", "POST", "/v1/check", "Bearer key-acme", `{"workload":[{"op":"requests","count":1,"count":2}]}`, 400},
		{"check with an unknown field", "POST", "/v1/check", "Bearer key-acme", `{"workload":[],"extra":{"a":1}}`, 400},
		{"check with 400 digits", "POST", "/v1/check", "Bearer key-acme", `{"workload":[{"op":"requests","count":` + strings.Repeat("9", 400) + `}]}`, 400},
		{"admit with a null ttl", "POST", "/v1/admit", "Bearer key-acme", `{"workload":[],"ttl_ms":null}`, 400},
		{"unknown agent", "GET", "/v1/admission?agent_id=nobody", "Bearer " + platformToken, ``, 200},
		{"org as agent", "GET", "/v1/admission?agent_id=org", "Bearer " + platformToken, ``, 200},
		{"agent_id twice", "GET", "/v1/admission?agent_id=a1&agent_id=a2", "Bearer " + platformToken, ``, 400},
		{"no agent_id", "GET", "/v1/admission", "Bearer " + platformToken, ``, 400},
		{"admission with a customer key", "GET", "/v1/admission?agent_id=a1", "Bearer key-acme", ``, 401},
	} {
		req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
		req.Header.SetMethod(c.method)
		req.SetRequestURI(c.path)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		req.SetBodyString(c.body)
		r := &Request{Req: req, Resp: resp, Now: t0 + 1}
		requireNoAllocsWhenWarm(t, c.name, func() {
			// Each request is parsed afresh, as off the wire (unescaping
			// and type resolution work in place on the body).
			req.SetBodyString(c.body)
			h.s.Serve(r)
			if resp.StatusCode() != c.status {
				t.Fatalf("%s = %d %s", c.name, resp.StatusCode(), resp.Body())
			}
		})
	}
}

func TestAnswersAreValidJSONForEveryVariant(t *testing.T) {
	h, _ := platformHarness(t)
	for _, v := range append(admitVariants(), usageVariants()...) {
		for _, path := range []string{"/v1/check", "/v1/usage"} {
			key := "key-acme"
			if path == "/v1/usage" {
				key = platformToken
			}
			_, _, resp := h.do("POST", path, key, v.body)
			if !json.Valid(resp.Body()) && len(resp.Body()) > 0 {
				t.Fatalf("%s %s: answer is not JSON: %q", path, v.name, resp.Body())
			}
			h.drainOut()
			h.s.Quiesce()
			h.drainOut()
		}
	}
	if bytes.Contains(h.s.out, []byte("\xff")) {
		t.Fatal("an answer echoed a byte that is not UTF-8")
	}
}
