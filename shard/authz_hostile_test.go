package shard

import (
	"math/bits"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/route"
)

// The direct half of the hostile-gateway corpus (the other half runs the
// example gateways: examples/gateways/hostile_test.go). Each case is a
// request a client can make a gateway send, that a service may serve as a
// costlier or denied route than tollgated would price it as.

// routedWithDefault is routedSnapshot with a cheap default (one request,
// 10 units): what an unmatched request costs, so a form that hides a
// costly or denied route behind an unmatched path is priced at 10.
func routedWithDefault(t testing.TB, id core.AccountID, uri route.URIRules) *core.Snapshot {
	snap := routedSnapshot(t, id)
	table := snap.Routes.(*route.Table)
	table.Default = &route.Rule{Op: 1, Count: 1}
	table.URI = uri
	if uri.CaseInsensitive {
		for i := range table.Rules {
			table.Rules[i].Pattern.FoldCase()
		}
	}
	return snap
}

// TestAuthzRefusesFormsTheServiceMayReadDifferently: under the default
// rules, every original request some gateway or service reads as another
// route is refused 400, with the header at fault and a detail naming the
// policy field that would allow it — never priced at the default.
func TestAuthzRefusesFormsTheServiceMayReadDifferently(t *testing.T) {
	h := newHarnessWith(t, Config{ID: 0, Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4,
		FundingWait: NoFundingWait}, 1024)
	h.provisionSnap(routedWithDefault(t, "acme", route.URIRules{}), "key-acme", 100_000)
	h.drainOut()
	uri := func(u string) []string { return []string{"X-Original-URI: " + u} }
	cases := []struct {
		name, method string
		headers      []string
		code, field  string
		detail       route.Fault
	}{
		{"raw '#' hiding a denied path", "GET", uri("/x#/../admin/secret"), "invalid-original-uri", hdrOriginalURI, route.FaultSyntax},
		{"raw '#' hiding a costly path", "POST", uri("/x#/../v1/completions/a"), "invalid-original-uri", hdrOriginalURI, route.FaultSyntax},
		{"path parameter", "POST", uri("/v1/completions;x=1/a"), "invalid-original-uri", hdrOriginalURI, route.FaultParams},
		{"..; (Tomcat's parent)", "GET", uri("/x/..;/admin/secret"), "invalid-original-uri", hdrOriginalURI, route.FaultParams},
		{"backslash", "GET", uri(`/admin\secret`), "invalid-original-uri", hdrOriginalURI, route.FaultBackslash},
		{"encoded dots", "POST", uri("/admin/%2e%2e/v1/chat"), "invalid-original-uri", hdrOriginalURI, route.FaultEncoded},
		{"encoded slash", "GET", uri("/admin%2Fsecret"), "invalid-original-uri", hdrOriginalURI, route.FaultEncoded},
		{"double encoding", "GET", uri("/v1/%252e%252e/admin/secret"), "invalid-original-uri", hdrOriginalURI, route.FaultEncoded},
		{"trailing dot", "POST", uri("/v1/completions./a"), "invalid-original-uri", hdrOriginalURI, route.FaultTrailingDot},
		{"trailing dot on a denied prefix", "GET", uri("/admin./secret"), "invalid-original-uri", hdrOriginalURI, route.FaultTrailingDot},
		{"trailing space", "GET", uri("/admin%20/secret"), "invalid-original-uri", hdrOriginalURI, route.FaultTrailingDot},
		{"_method parameter", "GET", uri("/v1/completions/a?_method=POST"), "invalid-original-uri", hdrOriginalURI, route.FaultMethodOverride},
		{"escaped _method parameter", "GET", uri("/v1/completions/a?x=1&%5Fmethod=POST"), "invalid-original-uri", hdrOriginalURI, route.FaultMethodOverride},
		{"X-HTTP-Method-Override", "GET", append(uri("/v1/completions/a"), "X-HTTP-Method-Override: POST"), "invalid-original-method", "X-HTTP-Method-Override", route.FaultMethodOverride},
		{"X-HTTP-Method", "GET", append(uri("/v1/completions/a"), "X-HTTP-Method: POST"), "invalid-original-method", "X-HTTP-Method", route.FaultMethodOverride},
		{"X-Method-Override", "GET", append(uri("/v1/completions/a"), "X-Method-Override: POST"), "invalid-original-method", "X-Method-Override", route.FaultMethodOverride},
		{"lower-case method (Caddy forwards it)", "post", uri("/v1/completions/a"), "invalid-original-method", hdrOriginalMethod, route.FaultMethodCase},
	}
	for _, c := range cases {
		resp := h.authz("GET", "/v1/authz", append(c.headers, bearerAcme, "X-Original-Method: "+c.method)...)
		m := problem(t, c.name, resp)
		if resp.StatusCode() != 400 || m["code"] != c.code || m["field"] != c.field || m["detail"] != c.detail.Detail() {
			t.Errorf("%s: %d %v, want 400 %s on %s (%s)", c.name, resp.StatusCode(), m, c.code, c.field, c.detail.Detail())
		}
	}
	// Envoy's shape: the suffix is read the same way.
	for _, suffix := range []string{"/x;y/../admin/secret", "/admin%2fsecret", "/v1/completions./a"} {
		resp := h.authz("GET", "/v1/authz"+suffix, bearerAcme)
		if m := problem(t, suffix, resp); resp.StatusCode() != 400 || m["code"] != "invalid-original-uri" || m["field"] != "path" {
			t.Errorf("envoy %s: %d %v", suffix, resp.StatusCode(), m)
		}
	}
	if u := h.usageUnits(); len(u) != 0 {
		t.Fatalf("refused forms billed %v", u)
	}
	if h.s.usageReserved != 0 || h.s.acks.claimed != 0 || h.s.engine.InFlight() != 0 {
		t.Fatalf("refusals leaked: %d usage slots, %d ack claims, %d reservations",
			h.s.usageReserved, h.s.acks.claimed, h.s.engine.InFlight())
	}
}

// TestAuthzReadsAmbiguousFormsAsThePolicySays: a policy that says how its
// service reads a form gets it priced as that service routes it — the
// costly or denied route, not the default.
func TestAuthzReadsAmbiguousFormsAsThePolicySays(t *testing.T) {
	cases := []struct {
		name         string
		uri          route.URIRules
		method, path string
		extra        string
		status       int
		units        core.CostUnits // billed or held
	}{
		{"Tomcat strips parameters", route.URIRules{PathParams: route.Strip}, "GET", "/x/..;/admin/secret", "", 403, 0},
		{"parameters stripped off a costly route", route.URIRules{PathParams: route.Strip}, "POST", "/v1/completions;jsessionid=1/a", "", 200, 500},
		{"Go keeps ';' literal", route.URIRules{PathParams: route.Keep}, "GET", "/x/..;/admin/secret", "", 200, 10},
		{"IIS reads '\\' as '/'", route.URIRules{Backslash: route.AsSlash}, "GET", `/admin\secret`, "", 403, 0},
		{"a decoding service", route.URIRules{EncodedSeparators: route.Decode}, "GET", "/x/%2e%2e/admin/secret", "", 403, 0},
		{"IIS strips trailing dots", route.URIRules{TrailingDot: route.Strip}, "GET", "/admin./secret", "", 403, 0},
		{"a case-insensitive service", route.URIRules{CaseInsensitive: true}, "GET", "/ADMIN/secret", "", 403, 0},
		{"its lower-case method", route.URIRules{CaseInsensitive: true}, "post", "/V1/Completions/a", "", 200, 500},
		{"a case-sensitive service", route.URIRules{}, "GET", "/ADMIN/secret", "", 200, 10},
		{"overrides ignored", route.URIRules{MethodOverride: route.Ignore}, "GET", "/v1/completions/a?_method=POST", "X-HTTP-Method-Override: POST", 200, 10},
	}
	for _, c := range cases {
		h := newHarnessWith(t, Config{ID: 0, Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4,
			FundingWait: NoFundingWait}, 1024)
		h.provisionSnap(routedWithDefault(t, "acme", c.uri), "key-acme", 100_000)
		headers := []string{bearerAcme, "X-Original-Method: " + c.method, "X-Original-URI: " + c.path}
		if c.extra != "" {
			headers = append(headers, c.extra)
		}
		resp := h.authz("GET", "/v1/authz", headers...)
		if resp.StatusCode() != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, resp.StatusCode(), resp.Body(), c.status)
			continue
		}
		if c.status == 200 && string(resp.Header.Peek("X-Tollgate-Units")) != unitsText(c.units) {
			t.Errorf("%s: units %s, want %d", c.name, resp.Header.Peek("X-Tollgate-Units"), c.units)
		}
	}
}

func unitsText(u core.CostUnits) string { return strconv.FormatUint(uint64(u), 10) }

// TestAuthzTrailingSlashPricesAsItsRoute: the normalised form has no
// trailing slash, so "/v1/chat/" is priced as /v1/chat (services that
// route both alike, Express by default, serve it as that route).
func TestAuthzTrailingSlashPricesAsItsRoute(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.provisionSnap(routedSnapshot(t, "acme"), "key-acme", 100_000)
	h.drainOut()
	for _, u := range []string{"/v1/chat/", "/v1/chat//", "/v1/./chat/."} {
		resp := h.authz("GET", "/v1/authz", bearerAcme, "X-Original-Method: POST", "X-Original-URI: "+u)
		if resp.StatusCode() != 200 || string(resp.Header.Peek("X-Tollgate-Units")) != "10" {
			t.Errorf("%s: %d %s", u, resp.StatusCode(), resp.Body())
		}
	}
}

// TestAuthzEmptyCountCostsNothing: a count header of 0 (an empty upload)
// is admitted and billed 0 (the policy's fixed or minimum cost, when it
// has one), never refused 422 empty-workload.
func TestAuthzEmptyCountCostsNothing(t *testing.T) {
	for _, c := range []struct {
		name           string
		fixed, minimum core.CostUnits
		want           core.CostUnits
	}{{"no fixed cost", 0, 0, 0}, {"fixed cost", 3, 0, 3}, {"minimum cost", 0, 5, 5}} {
		h := newHarness(t, 0, 1024)
		snap := routedSnapshot(t, "acme")
		snap.Costs.Fixed, snap.Costs.Minimum = c.fixed, c.minimum
		h.provisionSnap(snap, "key-acme", 100_000)
		h.drainOut()
		resp := h.authz("GET", "/v1/authz", bearerAcme, "X-Original-Method: PUT", "X-Original-URI: /v1/embeddings", "X-Token-Count: 0")
		if resp.StatusCode() != 200 || string(resp.Header.Peek("X-Tollgate-Units")) != unitsText(c.want) {
			t.Fatalf("%s: %d %q %s", c.name, resp.StatusCode(), resp.Header.Peek("X-Tollgate-Units"), resp.Body())
		}
		if u := h.usageUnits(); len(u) != 1 || u[0] != c.want {
			t.Fatalf("%s: billed %v, want [%d]", c.name, u, c.want)
		}
		if h.s.engine.InFlight() != 0 || h.s.usageReserved != 0 {
			t.Fatalf("%s: left %d reservations, %d usage slots", c.name, h.s.engine.InFlight(), h.s.usageReserved)
		}
	}
}

// TestCaptureIsFinishedByTheServiceNotTheCustomer: a capture's reservation
// answers to a platform token only; the customer's key (which passed the
// gateway with it) cannot finish it at 0 units, nor cancel it.
func TestCaptureIsFinishedByTheServiceNotTheCustomer(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.provisionSnap(routedSnapshot(t, "acme"), "key-acme", 100_000)
	h.bindPlatform()
	h.drainOut()
	resp := h.authz("GET", "/v1/authz", bearerAcme, "X-Original-Method: POST", "X-Original-URI: /v1/completions/gpt")
	res := string(resp.Header.Peek("X-Tollgate-Reservation"))
	if resp.StatusCode() != 200 || res == "" {
		t.Fatalf("capture: %d %s", resp.StatusCode(), resp.Body())
	}
	for _, c := range []struct{ op, body string }{
		{"/v1/finish", `{"reservation":"` + res + `","units":0}`},
		{"/v1/finish", `{"reservation":"` + res + `"}`},
		{"/v1/cancel", `{"reservation":"` + res + `"}`},
		{"/v1/commit", `{"reservation":"` + res + `"}`},
	} {
		if st, b, _ := h.do("POST", c.op, "key-acme", c.body); st != 404 || b["code"] != "unknown-reservation" {
			t.Fatalf("%s %s with the customer's key: %d %v, want 404", c.op, c.body, st, b)
		}
	}
	if u := h.usageUnits(); len(u) != 0 {
		t.Fatalf("billed %v before the service finished", u)
	}
	if st, b, _ := h.do("POST", "/v1/finish", platformToken, `{"reservation":"`+res+`","units":321}`); st != 200 || b["billed"] != float64(321) {
		t.Fatalf("the service's finish: %d %v", st, b)
	}
	if u := h.usageUnits(); len(u) != 1 || u[0] != 321 {
		t.Fatalf("billed %v, want [321]", u)
	}
	// The other way round: /v1/admit's reservation is the customer's, and
	// a platform token is not its owner.
	st, b, _ := h.do("POST", "/v1/admit", "key-acme", `{"workload":[{"op":"requests","count":1}]}`)
	if st != 200 {
		t.Fatalf("admit: %d %v", st, b)
	}
	admitted := b["reservation"].(string)
	if st, b, _ := h.do("POST", "/v1/cancel", platformToken, `{"reservation":"`+admitted+`"}`); st != 404 {
		t.Fatalf("a platform token cancelled a customer's reservation: %d %v", st, b)
	}
	if st, b, _ := h.do("POST", "/v1/cancel", "key-acme", `{"reservation":"`+admitted+`"}`); st != 200 {
		t.Fatalf("the customer's cancel: %d %v", st, b)
	}
}

// TestCaptureFromAnotherShardIsFinishedByTheServiceOnly: a finish that
// arrives on another shard is forwarded with its caller; the owner lets a
// platform token end a capture and refuses the customer's key.
func TestCaptureFromAnotherShardIsFinishedByTheServiceOnly(t *testing.T) {
	owner := newHarness(t, 1, 1024)
	owner.provisionSnap(routedSnapshot(t, "acme"), "key-acme", 100_000)
	owner.bindPlatform()
	owner.drainOut()
	res := string(owner.authz("GET", "/v1/authz", bearerAcme, "X-Original-Method: POST",
		"X-Original-URI: /v1/completions/gpt").Header.Peek("X-Tollgate-Reservation"))
	other := newHarness(t, 0, 1024)
	other.provisionSnap(routedSnapshot(t, "acme"), "key-acme", 100_000)
	other.bindPlatform()
	other.drainOut()
	forward := func(key string) message.Outbound {
		t.Helper()
		other.do("POST", "/v1/finish", key, `{"reservation":"`+res+`","units":0}`)
		for _, m := range other.drainOut() {
			if m.Kind == message.OutForward {
				return m
			}
		}
		t.Fatalf("finish with %s not forwarded", key)
		return message.Outbound{}
	}
	for _, c := range []struct {
		key  string
		want outcomeCode
	}{{"key-acme", outcomeUnknown}, {platformToken, outcomeOK}} {
		m := forward(c.key)
		owner.in.Push(message.Inbound{Kind: message.InForward, Op: m.Op, From: m.From, Res: m.Res, Units: m.Units, Principal: m.Principal, Ticket: m.Ticket})
		owner.s.Poll(t0 + 2)
		var reply message.Outbound
		for _, r := range owner.drainOut() {
			if r.Kind == message.OutReply {
				reply = r
			}
		}
		if outcomeCode(reply.Status) != c.want {
			t.Fatalf("forwarded finish with %s: outcome %d, want %d", c.key, reply.Status, c.want)
		}
	}
}

// TestReservationIdsAreUnguessable: consecutive ids share nothing but
// their shard, a bit flipped anywhere in an issued id names no
// reservation, and an id naming another shard's handle is not one that
// shard issued unless this process ciphered it.
func TestReservationIdsAreUnguessable(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.provisionSnap(routedSnapshot(t, "acme"), "key-acme", 1_000_000)
	h.bindPlatform()
	h.drainOut()
	var ids []string
	for range 8 {
		resp := h.authz("GET", "/v1/authz", bearerAcme, "X-Original-Method: POST", "X-Original-URI: /v1/completions/gpt")
		ids = append(ids, string(resp.Header.Peek("X-Tollgate-Reservation")))
		st, b, _ := h.do("POST", "/v1/finish", platformToken, `{"reservation":"`+ids[len(ids)-1]+`","units":1}`)
		if st != 200 {
			t.Fatalf("finish: %d %v", st, b)
		}
	}
	// Each finish freed the slot the next capture took: the engine's
	// handles differ in a generation bit or two. On the wire they must
	// look unrelated (a fair cipher flips about half of 128 bits).
	for i := 1; i < len(ids); i++ {
		if d := hexDistance(ids[i-1][4:], ids[i][4:]); d < 32 {
			t.Fatalf("ids %s and %s differ in %d bits", ids[i-1], ids[i], d)
		}
	}
	resp := h.authz("GET", "/v1/authz", bearerAcme, "X-Original-Method: POST", "X-Original-URI: /v1/completions/gpt")
	live := string(resp.Header.Peek("X-Tollgate-Reservation"))
	for i := 4; i < len(live); i++ {
		for _, bit := range []byte{1, 8} {
			forged := []byte(live)
			forged[i] = "0123456789abcdef"[strings.IndexByte("0123456789abcdef", forged[i])^int(bit)]
			if st, b, _ := h.do("POST", "/v1/finish", platformToken, `{"reservation":"`+string(forged)+`","units":0}`); st == 200 {
				t.Fatalf("forged id %s finished the capture: %v", forged, b)
			}
		}
	}
	if st, _, _ := h.do("POST", "/v1/finish", platformToken, `{"reservation":"`+live+`","units":2}`); st != 200 {
		t.Fatalf("the issued id after the forgeries: %d", st)
	}
}

func hexDistance(a, b string) int {
	d := 0
	for i := range a {
		x := strings.IndexByte("0123456789abcdef", a[i]) ^ strings.IndexByte("0123456789abcdef", b[i])
		d += bits.OnesCount(uint(x))
	}
	return d
}

// TestUnfinishedCaptureBillsWhatItsRouteSays: a capture route that
// releases bills nothing when its deadline passes unfinished (the service
// failed, or never saw the request: a gateway refused it after asking);
// one that bills, its quote.
func TestUnfinishedCaptureBillsWhatItsRouteSays(t *testing.T) {
	for _, c := range []struct {
		release bool
		want    core.CostUnits
	}{{true, 0}, {false, 500}} {
		h := newHarnessWith(t, Config{Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4, AckDurable: true, AckQueue: 8}, 1024)
		snap := routedSnapshot(t, "acme")
		snap.Routes.(*route.Table).Rules[2].Release = c.release
		h.provisionSnap(snap, "key-acme", 100_000)
		h.drainOut()
		h.authz("GET", "/v1/authz", bearerAcme, "X-Original-Method: POST", "X-Original-URI: /v1/completions/gpt")
		var journal []core.UsageEvent
		for _, m := range h.drainOut() {
			if m.Kind == message.OutCommit {
				journal = append(journal, m.Usage)
			}
		}
		// A node killed now bills on restart what the journal says: the
		// same as the deadline will.
		if len(journal) != 1 || journal[0].Units != c.want || journal[0].Quote != 500 {
			t.Fatalf("release %v: journal %+v, want %d units", c.release, journal, c.want)
		}
		h.s.Poll(t0 + 6e9)
		var lapsed []core.UsageEvent
		for _, m := range h.drainOut() {
			if m.Kind == message.OutUsage {
				lapsed = append(lapsed, m.Usage)
			}
		}
		if len(lapsed) != 1 || !lapsed[0].Lapsed || lapsed[0].Units != c.want {
			t.Fatalf("release %v: at the deadline %+v, want %d units", c.release, lapsed, c.want)
		}
		if l, _ := h.s.engine.Lease("acme"); l.Units() != 100_000-c.want {
			t.Fatalf("release %v: lease left %d", c.release, l.Units())
		}
	}
}

// TestHostileAuthzAllocatesNothingWhenWarm: reading and refusing an
// ambiguous form, reading one a policy allows (folded, stripped, decoded),
// and a platform token's finish of a capture allocate nothing once warm.
func TestHostileAuthzAllocatesNothingWhenWarm(t *testing.T) {
	all := route.URIRules{PathParams: route.Strip, Backslash: route.AsSlash, EncodedSeparators: route.Decode,
		TrailingDot: route.Strip, MethodOverride: route.Ignore, CaseInsensitive: true}
	for _, c := range []struct {
		name    string
		uri     route.URIRules
		headers []string
		status  int
	}{
		{"refused parameter", route.URIRules{}, []string{"X-Original-Method: POST", "X-Original-URI: /v1/chat;x=1"}, 400},
		{"refused override", route.URIRules{}, []string{"X-Original-Method: GET", "X-Original-URI: /v1/chat", "X-HTTP-Method-Override: POST"}, 400},
		{"refused case", route.URIRules{}, []string{"X-Forwarded-Method: post", "X-Forwarded-Uri: /v1/chat"}, 400},
		{"allowed forms", all, []string{"X-Forwarded-Method: post", "X-Forwarded-Uri: /V1/x;a/..%2f.\\Chat.?_method=GET"}, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, 0, 1<<16)
			snap := routedWithDefault(t, "acme", c.uri)
			snap.Limits.RequestRate, snap.Limits.RequestBurst = 1e6, 1e6
			h.provisionSnap(snap, "key-acme", 1<<50)
			req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
			req.Header.SetMethod("GET")
			req.SetRequestURI("/v1/authz")
			for _, kv := range append(c.headers, bearerAcme) {
				k, v, _ := strings.Cut(kv, ": ")
				req.Header.Set(k, v)
			}
			r := &Request{Req: req, Resp: resp, Now: t0}
			requireNoAllocsWhenWarm(t, "/v1/authz ("+c.name+")", func() {
				r.Now += 2e6
				h.s.Serve(r)
				if resp.StatusCode() != c.status {
					t.Fatalf("authz = %d %s", resp.StatusCode(), resp.Body())
				}
				h.out.Ring().Pop()
			})
		})
	}
}
