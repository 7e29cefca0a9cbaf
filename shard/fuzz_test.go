package shard

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
)

// Fuzz targets for every data-plane route, through the shard's real
// request path (Shard.Serve with a real fasthttp request and response),
// with every kind of credential. Each asserts, for any input:
//   - no panic, and none recovered either (internal errors stay 0);
//   - a status the route documents (docs/API.md);
//   - every error is problem+json whose code is not empty;
//   - a request refused before the engine leaves the engine, the lease and
//     the shard's claims exactly as they were, and after every request the
//     engine's counters partition, the lease is conserved and every usage
//     slot claimed belongs to a live reservation.
//
// Seeds are the hostile variants of hostile_test.go (every field missing
// in turn, null, wrong types, out of range, duplicates…) with and without
// a valid credential, and the files under testdata/fuzz/<Target>/. go test
// replays them all; `make fuzz` explores (docs/FUZZING.md).

// fuzzCredentials are the Authorization headers an input picks from.
var fuzzCredentials = [...]string{
	"",
	"Bearer key-acme",
	"Bearer " + platformToken,
	"bearer key-acme",
	"BEARER   " + platformToken + "  ",
	"Bearer nope",
	"Basic a2V5LWFjbWU=",
	"Bearer",
	"Bearer key-acme extra",
	"key-acme",
}

const (
	credNone     = 0
	credKey      = 1
	credPlatform = 2
)

// routeStatuses are the statuses each route documents.
var routeStatuses = map[string][]int{
	"/v1/check":     {200, 400, 401, 402, 403, 405, 409, 413, 422, 429, 503},
	"/v1/admit":     {200, 400, 401, 402, 403, 405, 413, 422, 429, 503},
	"/v1/commit":    {200, 400, 401, 404, 405, 409, 413, 503},
	"/v1/finish":    {200, 400, 401, 404, 405, 409, 413, 422, 503},
	"/v1/cancel":    {200, 400, 401, 404, 405, 409, 413, 503},
	"/v1/usage":     {200, 400, 401, 405, 503},
	"/v1/admission": {200, 400, 401, 405},
}

// beforeEngine are the codes of refusals answered before the engine acts.
var beforeEngine = map[string]bool{
	"invalid-body": true, "duplicate-field": true, "unknown-field": true, "body-too-large": true,
	"invalid-query": true, "unknown-principal": true, "method-not-allowed": true, "unknown-reservation": true,
	"missing-permission": true,
}

// fuzzShard is a shard for one fuzz target whose clock moves 1 ms a
// request. Each input sets harness.t to its own *testing.T.
type fuzzShard struct {
	*harness
	now, leaseUntil int64
	token           uint64
	req             *fasthttp.Request
	resp            *fasthttp.Response
	uri             fasthttp.URI
}

func newFuzzShard(f *testing.F) *fuzzShard {
	h, _ := platformHarness(f)
	return &fuzzShard{harness: h, now: t0 + 1, leaseUntil: t0 + 3600e9, token: 1,
		req: &fasthttp.Request{}, resp: &fasthttp.Response{}}
}

// tick moves the clock, renewing acme's funding before its lease lapses
// so long runs keep reaching the admitting paths.
func (z *fuzzShard) tick() {
	z.now += 1e6
	if z.now > z.leaseUntil-60e9 {
		z.token++
		z.leaseUntil = z.now + 3600e9
		z.in.Push(message.Inbound{Kind: message.InGrant, Account: "acme", Token: z.token, Units: 1 << 50, Until: z.leaseUntil})
		z.s.Poll(z.now)
		z.drainOut()
	}
}

// serve sends one request and answers what it parked, playing the
// control plane: a forwarded operation finds no owner, a usage batch is
// billed in full. It returns the answer's status and body.
func (z *fuzzShard) serve(t *testing.T, method string, uri []byte, cred uint8, body []byte, headers ...[]byte) (int, []byte) {
	t.Helper()
	z.tick()
	z.req.Reset()
	z.resp.Reset()
	z.req.Header.SetMethod(method)
	z.req.SetRequestURIBytes(uri)
	if a := fuzzCredentials[int(cred)%len(fuzzCredentials)]; a != "" {
		z.req.Header.Set("Authorization", a)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if v := headerValue(headers[i+1]); len(v) > 0 {
			z.req.Header.SetBytesKV(headers[i], v)
		}
	}
	z.req.SetBody(body)
	parked := false
	z.s.Serve(&Request{Req: z.req, Resp: z.resp, Now: z.now, Defer: func() uint64 {
		parked = true
		z.tickets++
		z.parked[z.tickets] = z.resp
		return z.tickets
	}})
	if parked {
		for _, m := range z.drainOut() {
			switch m.Kind {
			case message.OutForward:
				z.in.Push(message.Inbound{Kind: message.InReply, Op: m.Op, Ticket: m.Ticket, Status: message.ReplyUnknownReservation})
			case message.OutPostPaid:
				m.Batch.Accepted = len(m.Batch.Events)
				z.in.Push(message.Inbound{Kind: message.InPostPaidDone, Ticket: m.Ticket, Batch: m.Batch})
			}
		}
		z.s.Poll(z.now)
		if len(z.parked) != 0 {
			t.Fatalf("%s %s: a parked answer was never given", method, uri)
		}
	}
	return z.resp.StatusCode(), z.resp.Body()
}

// reservation admits a reservation for acme on the fuzz clock and returns
// its id, committed if commit.
func (z *fuzzShard) reservation(t *testing.T, commit bool) string {
	t.Helper()
	status, body := z.serve(t, "POST", []byte("/v1/admit"), credKey, []byte(`{"workload":[{"op":"requests","count":1}]}`))
	var a struct{ Reservation string }
	if err := json.Unmarshal(body, &a); status != 200 || err != nil {
		t.Fatalf("admit = %d %s", status, body)
	}
	if commit {
		if status, body := z.serve(t, "POST", []byte("/v1/commit"), credKey, []byte(`{"reservation":"`+a.Reservation+`"}`)); status != 200 {
			t.Fatalf("commit = %d %s", status, body)
		}
	}
	z.drainOut()
	return a.Reservation
}

// headerValue keeps what the wire could carry in a header value.
func headerValue(v []byte) []byte {
	return bytes.Map(func(r rune) rune {
		if r == '\r' || r == '\n' || r == 0 {
			return -1
		}
		return r
	}, v)
}

// check asserts what every answer must satisfy, and returns its code.
func (z *fuzzShard) check(t *testing.T, route string, status int, body []byte, before engineState) string {
	t.Helper()
	if z.s.internalErrors != 0 {
		t.Fatalf("%s: a decoder panicked (recovered): %s", route, body)
	}
	if !slices.Contains(routeStatuses[route], status) {
		t.Fatalf("%s: status %d is not documented: %s", route, status, body)
	}
	var code string
	if status >= 400 {
		var p struct {
			Code   string
			Status int
		}
		if ct := string(z.resp.Header.ContentType()); ct != "application/problem+json" {
			t.Fatalf("%s: %d as %q: %s", route, status, ct, body)
		}
		if err := json.Unmarshal(body, &p); err != nil || p.Code == "" || p.Status != status {
			t.Fatalf("%s: %d with problem %s (%v)", route, status, body, err)
		}
		code = p.Code
	} else if !json.Valid(body) {
		t.Fatalf("%s: %d with a body that is not JSON: %q", route, status, body)
	}
	if beforeEngine[code] {
		if after := z.state("acme"); after != before {
			t.Fatalf("%s: refused %s but changed the engine:\n%+v\n%+v", route, code, before, after)
		}
	}
	z.requireConserved(t, "acme")
	return code
}

// end ends every reservation and drops what the shard sent, so inputs do
// not pile up state.
func (z *fuzzShard) end() {
	z.s.Quiesce()
	z.drainOut()
}

// method is the route's own method for most inputs, another for some.
func method(own string, pick uint8) string {
	if pick%8 != 1 {
		return own
	}
	if own == "GET" {
		return "POST"
	}
	return "GET"
}

func addVariants(f *testing.F, vs []variant, creds ...uint8) {
	for _, v := range vs {
		for _, c := range creds {
			f.Add([]byte(v.body), c, uint8(0))
		}
	}
}

func fuzzAdmitRoute(f *testing.F, route string) {
	addVariants(f, admitVariants(), credNone, credKey, credPlatform)
	f.Add([]byte(`{"workload":[]`+strings.Repeat(" ", maxAdmitBody)+`}`), uint8(credKey), uint8(0))
	f.Add([]byte(chatBody), uint8(credKey), uint8(1))
	z := newFuzzShard(f)
	f.Fuzz(func(t *testing.T, body []byte, cred, pick uint8) {
		z.t = t
		before := z.state("acme")
		status, answer := z.serve(t, method("POST", pick), []byte(route), cred, body)
		z.check(t, route, status, answer, before)
		z.end()
	})
}

func FuzzCheck(f *testing.F) { fuzzAdmitRoute(f, "/v1/check") }
func FuzzAdmit(f *testing.F) { fuzzAdmitRoute(f, "/v1/admit") }

// fuzzReservationRoute fuzzes commit, finish or cancel on a live
// reservation: "RES" in the body stands for its id. setup picks whether
// it is committed first.
func fuzzReservationRoute(f *testing.F, op message.Op, route string) {
	for _, v := range reservationVariants(op) {
		for _, c := range []uint8{credNone, credKey} {
			f.Add([]byte(v.body), c, uint8(0), uint8(0))
			f.Add([]byte(v.body), c, uint8(0), uint8(1))
		}
	}
	f.Add([]byte(`{"reservation":"00070000000000000001"}`), uint8(credKey), uint8(0), uint8(0)) // another shard's
	f.Add([]byte(`{"reservation":"RES","units":1}`), uint8(credKey), uint8(1), uint8(1))
	z := newFuzzShard(f)
	f.Fuzz(func(t *testing.T, body []byte, cred, pick, setup uint8) {
		z.t = t
		res := z.reservation(t, setup%2 == 1)
		body = bytes.ReplaceAll(body, []byte("RES"), []byte(res))
		before := z.state("acme")
		status, answer := z.serve(t, method("POST", pick), []byte(route), cred, body)
		z.check(t, route, status, answer, before)
		z.end()
	})
}

func FuzzCommit(f *testing.F) { fuzzReservationRoute(f, message.OpCommit, "/v1/commit") }
func FuzzFinish(f *testing.F) { fuzzReservationRoute(f, message.OpFinish, "/v1/finish") }
func FuzzCancel(f *testing.F) { fuzzReservationRoute(f, message.OpCancel, "/v1/cancel") }

func FuzzUsage(f *testing.F) {
	addVariants(f, usageVariants(), credNone, credKey, credPlatform)
	f.Add([]byte(render(usageTemplate)), uint8(credPlatform), uint8(1))
	z := newFuzzShard(f)
	f.Fuzz(func(t *testing.T, body []byte, cred, pick uint8) {
		z.t = t
		before := z.state("acme")
		status, answer := z.serve(t, method("POST", pick), []byte("/v1/usage"), cred, body)
		z.check(t, "/v1/usage", status, answer, before)
		if status == 200 {
			var counts struct{ Accepted, Duplicate, Rejected *int }
			if err := json.Unmarshal(answer, &counts); err != nil || counts.Accepted == nil ||
				counts.Duplicate == nil || counts.Rejected == nil || *counts.Accepted+*counts.Rejected == 0 {
				t.Fatalf("usage answer %s (%v)", answer, err)
			}
		}
		z.end()
	})
}

// FuzzAdmission fuzzes the query and the tenancy headers. A 200 must be a
// seed-000 decision an agent can read: five fields, a known decision, and
// for a deny a known reason, scope and window, reset_at RFC 3339 or null.
func FuzzAdmission(f *testing.F) {
	for _, q := range []string{"agent_id=a1", "agent_id=ws", "agent_id=org", "agent_id=nobody", "", "agent_id=",
		"agent_id=a1&agent_id=a1", "agent_id=%ff", "agent_id=a%00", "agent_id=" + strings.Repeat("a", 65),
		"cb=1&agent_id=a1", "agent_id=a1#frag", "agent_id=%", "agent_id=a+b", "&&&=", "agent_id=UPPER"} {
		for _, c := range []uint8{credNone, credKey, credPlatform} {
			f.Add([]byte(q), []byte("org"), []byte("ws"), c, uint8(0))
			f.Add([]byte(q), []byte(""), []byte(""), c, uint8(0))
		}
	}
	f.Add([]byte("agent_id=a1"), []byte("other"), []byte(""), uint8(credPlatform), uint8(0))
	f.Add([]byte("agent_id=a1"), []byte("org"), []byte("ws2"), uint8(credPlatform), uint8(1))
	z := newFuzzShard(f)
	z.in.Push(message.Inbound{Kind: message.InEvidence, Account: "a1", Evidence: new(core.EvidenceCell)})
	z.s.Poll(z.now)
	cell := z.s.engine.Evidence("a1")
	f.Fuzz(func(t *testing.T, query, org, workspace []byte, cred, pick uint8) {
		z.t = t
		// The agent's funding follows the input too, so denies with a
		// period and a reset are reached.
		if pick%4 == 2 {
			cell.Store(core.FundingEvidence{Remaining: 0, ResetAt: z.now + 3600e9, Scope: core.ScopeWorkspace, Period: core.PeriodDay,
				PeriodEnd: z.now + 3600e9, Next: 1000, Ceiling: core.MaxCostUnits})
		} else {
			cell.Store(core.FundingEvidence{Remaining: 1000, Scope: core.ScopeAgent})
		}
		uri := append([]byte("/v1/admission?"), query...)
		if z.uri.Parse(nil, uri); string(z.uri.Path()) != "/v1/admission" {
			return // a control byte: fasthttp reads another path, not this route's input
		}
		before := z.state("acme")
		status, answer := z.serve(t, method("GET", pick), uri, cred, nil,
			[]byte("Org-Id"), org, []byte("Workspace-Id"), workspace)
		z.check(t, "/v1/admission", status, answer, before)
		if status == 200 {
			requireDecision(t, answer)
		}
	})
}

func requireDecision(t *testing.T, answer []byte) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(answer, &m); err != nil || len(m) != 5 {
		t.Fatalf("decision %s: not five fields (%v)", answer, err)
	}
	switch m["decision"] {
	case "admit":
		if m["reason"] != nil || m["scope"] != nil || m["window"] != nil || m["reset_at"] != nil {
			t.Fatalf("admit with fields: %s", answer)
		}
	case "deny":
		reason, _ := m["reason"].(string)
		if !slices.Contains(admissionReasons[1:], reason) ||
			!slices.Contains([]any{"agent", "workspace", "org"}, m["scope"]) ||
			!slices.Contains([]any{"daily", "weekly", "monthly", "none"}, m["window"]) {
			t.Fatalf("deny %s", answer)
		}
		if at, isText := m["reset_at"].(string); isText {
			if _, err := time.Parse(time.RFC3339, at); err != nil {
				t.Fatalf("deny %s: reset_at %v", answer, err)
			}
		} else if m["reset_at"] != nil {
			t.Fatalf("deny %s: reset_at", answer)
		}
	default:
		t.Fatalf("decision %s", answer)
	}
}
