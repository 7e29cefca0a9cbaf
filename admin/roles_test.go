package admin

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/tollgated/tollgated/ledger"
)

// tokenWithRole creates an admin token of role (with the harness's admin
// token) and returns its secret and id.
func (h *harness) tokenWithRole(role string) (secret, id string) {
	h.t.Helper()
	v := h.ok(http.StatusCreated, "POST", "/v1/admin-tokens", `{"name":"`+role+` token","role":"`+role+`"}`)
	if v["role"] != role {
		h.t.Fatalf("created %v, want the role %s", v, role)
	}
	return v["token"].(string), v["id"].(string)
}

// roleCase is one request and the permission it needs ("" for none);
// closing an account needs account.status first, then account.close.
type roleCase struct {
	method, path, body, need string
}

// lacking is the permission a role lacking c.need is refused for.
func (c roleCase) lacking(allowed []string) string {
	if c.need == "account.close" && !slices.Contains(allowed, "account.status") {
		return "account.status"
	}
	return c.need
}

// roleCases are a request of every route and method of the API.
var roleCases = []roleCase{
	{"GET", "/v1/whoami", "", ""},
	{"GET", "/v1/accounts", "", "read"},
	{"GET", "/v1/accounts/acme", "", "read"},
	{"GET", "/v1/accounts/acme/children", "", "read"},
	{"GET", "/v1/accounts/acme/policy", "", "read"},
	{"GET", "/v1/accounts/acme/keys", "", "read"},
	{"GET", "/v1/accounts/acme/usage", "", "read"},
	{"GET", "/v1/platform-tokens", "", "read"},
	{"GET", "/v1/admin-tokens", "", "read"},
	{"GET", "/v1/leases", "", "read"},
	{"GET", "/v1/audit", "", "read"},
	{"GET", "/metrics", "", "metrics"},
	{"GET", "/v1/metrics/history", "", "metrics"},
	{"GET", "/debug/pprof/cmdline", "", "debug"},
	{"POST", "/v1/accounts", `{"id":"ws-1","parent":"acme"}`, "account.create"},
	{"POST", "/v1/accounts/acme/status", `{"status":"suspended"}`, "account.status"},
	{"POST", "/v1/accounts/acme/status", `{"status":"active"}`, "account.status"},
	{"PUT", "/v1/accounts/acme/policy", `{"permissions":["chat"]}`, "account.policy"},
	{"PUT", "/v1/accounts/acme/budget", `{"allowance":100,"period":"day"}`, "account.budget"},
	{"POST", "/v1/accounts/acme/deposits", `{"units":5,"idempotency_key":"k"}`, "account.deposit"},
	{"POST", "/v1/accounts/acme/keys", `{}`, "key.create"},
	{"POST", "/v1/accounts/acme/keys/key_nope/rotate", `{}`, "key.rotate"},
	{"DELETE", "/v1/accounts/acme/keys/key_nope", "", "key.revoke"},
	{"POST", "/v1/platform-tokens", `{}`, "platform_token.create"},
	{"DELETE", "/v1/platform-tokens/ptk_nope", "", "platform_token.revoke"},
	{"POST", "/v1/admin-tokens", `{"name":"x","role":"viewer"}`, "admin_token.create"},
	{"DELETE", "/v1/admin-tokens/atk_nope", "", "admin_token.revoke"},
	{"POST", "/v1/accounts/other/status", `{"status":"closed"}`, "account.close"},
}

// TestRolesAllowWhatTheyNameAndNothingElse: for every role and every route
// and method, a token of that role is refused 403 forbidden, naming the
// permission, exactly when its role lacks the route's permission; the
// refusal changes nothing and is in the audit log, the token as actor. An
// operator cannot close an account (account.close), a viewer reads
// everything but changes nothing, a metrics token reads /metrics only.
func TestRolesAllowWhatTheyNameAndNothingElse(t *testing.T) {
	want := map[string][]string{
		ledger.RoleAdmin: {"", "read", "metrics", "debug", "account.create", "account.status", "account.policy",
			"account.budget", "account.deposit", "key.create", "key.rotate", "key.revoke", "platform_token.create",
			"platform_token.revoke", "admin_token.create", "admin_token.revoke", "account.close"},
		ledger.RoleOperator: {"", "read", "metrics", "account.create", "account.status", "account.policy",
			"account.budget", "account.deposit", "key.create", "key.rotate", "key.revoke"},
		ledger.RoleViewer:  {"", "read", "metrics"},
		ledger.RoleMetrics: {"", "metrics"},
	}
	for _, role := range ledger.AdminRoles {
		t.Run(role, func(t *testing.T) {
			h := newHarness(t)
			h.createAccount(`{"id":"acme"}`)
			h.createAccount(`{"id":"other"}`)
			secret, id := h.tokenWithRole(role)
			for _, c := range roleCases {
				h.now.Add(refusalEvery) // one refusal a second: each is recorded
				before := len(h.auditLog())
				status, hdr, b := h.callAs("Bearer "+secret, c.method, c.path, c.body)
				what := role + ": " + c.method + " " + c.path + " " + c.body
				if slices.Contains(want[role], c.need) {
					if status == http.StatusForbidden || status == http.StatusUnauthorized {
						t.Errorf("%s: refused %d %s", what, status, b)
					}
					continue
				}
				p := h.checkProblem(status, hdr, b, http.StatusForbidden, codeForbidden, what)
				need := c.lacking(want[role])
				if p.Permission != need || !strings.Contains(p.Detail, need) || !strings.Contains(p.Detail, role) {
					t.Errorf("%s: %+v does not name the permission %s and the role", what, p, need)
				}
				log := h.auditLog()
				if len(log) != before+1 {
					t.Fatalf("%s: %d audit records after the refusal, want %d", what, len(log), before+1)
				}
				r := log[len(log)-1]
				var after forbiddenRecord
				json.Unmarshal(r.After, &after)
				if r.Action != "request.forbidden" || r.Actor != "admin/"+id || r.Target != c.path ||
					after != (forbiddenRecord{Method: c.method, Permission: need, Role: role}) || r.Before != nil {
					t.Errorf("%s: audit record %+v %s", what, r, r.After)
				}
			}
			// Nothing a refused request asked for happened.
			if role != ledger.RoleAdmin {
				if v := h.ok(http.StatusOK, "GET", "/v1/accounts/other", ""); v["status"] != "active" {
					t.Errorf("%s closed an account: %v", role, v)
				}
			}
			if got := h.metricSum("tollgated_admin_forbidden_total"); int(got) != len(roleCases)-countAllowed(want[role]) {
				t.Errorf("tollgated_admin_forbidden_total %v", got)
			}
		})
	}
}

// TestRefusalsAreAuditedAtAPace: a token refused again and again — a
// scraper's metrics token pointed at the API, or a client probing — does
// not grow the audit log without bound: a burst is recorded, then one
// refusal a second, each saying how many before it went unrecorded; every
// refusal is counted all the same, and a long path is recorded cut.
func TestRefusalsAreAuditedAtAPace(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	secret, _ := h.tokenWithRole(ledger.RoleMetrics)
	before := len(h.auditLog())
	long := "/v1/accounts/" + strings.Repeat("a", 6000)
	for range 50 {
		if status, _, b := h.callAs("Bearer "+secret, "GET", long, ""); status != http.StatusForbidden {
			t.Fatalf("refused %d %s", status, b)
		}
	}
	log := h.auditLog()[before:]
	if len(log) != refusalBurst {
		t.Fatalf("%d refusals recorded of 50 at one instant, want the burst of %d", len(log), refusalBurst)
	}
	if n := len(log[0].Target); n > maxAuditedPath+len("…") {
		t.Fatalf("a %d-byte path recorded as %d bytes", len(long), n)
	}
	h.now.Add(refusalEvery)
	h.callAs("Bearer "+secret, "GET", "/v1/accounts/acme", "")
	log = h.auditLog()[before:]
	var after forbiddenRecord
	if len(log) != refusalBurst+1 || json.Unmarshal(log[len(log)-1].After, &after) != nil || after.Unrecorded != 50-refusalBurst {
		t.Fatalf("a second later: %d records, the last %s: want it to say %d went unrecorded", len(log), log[len(log)-1].After, 50-refusalBurst)
	}
	if got := h.metricSum("tollgated_admin_forbidden_total"); got != 51 {
		t.Fatalf("tollgated_admin_forbidden_total %v, want every refusal counted", got)
	}
}

func countAllowed(perms []string) int {
	n := 0
	for _, c := range roleCases {
		if slices.Contains(perms, c.need) {
			n++
		}
	}
	return n
}

// TestWhoamiSaysTheRoleAndItsPermissions: every token learns its own id,
// name, role and permissions; the bootstrap token is an admin.
func TestWhoamiSaysTheRoleAndItsPermissions(t *testing.T) {
	h := newHarness(t)
	if v := h.ok(http.StatusOK, "GET", "/v1/whoami", ""); v["id"] != "bootstrap" || v["role"] != "admin" ||
		!slices.Contains(toStrings(v["permissions"]), "admin_token.create") {
		t.Fatalf("the bootstrap token: %v", v)
	}
	secret, id := h.tokenWithRole(ledger.RoleViewer)
	status, _, b := h.callAs("Bearer "+secret, "GET", "/v1/whoami", "")
	var v map[string]any
	json.Unmarshal(b, &v)
	if status != http.StatusOK || v["id"] != id || v["name"] != "viewer token" || v["role"] != "viewer" ||
		!slices.Equal(toStrings(v["permissions"]), []string{"read", "metrics"}) {
		t.Fatalf("a viewer: %d %s", status, b)
	}
	h.fails(http.StatusBadRequest, codeInvalidQuery, "GET", "/v1/whoami?x=1", "")
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestAdminTokenRoles: a token is created with the role asked for (admin
// when none is), lists with it, and a role that does not exist is refused;
// the last live admin cannot be revoked while tokens of lesser roles live,
// since nobody could then make another admin.
func TestAdminTokenRoles(t *testing.T) {
	h := newHarness(t)
	ops := h.ok(http.StatusCreated, "POST", "/v1/admin-tokens", `{"name":"ops"}`)
	if ops["role"] != "admin" {
		t.Fatalf("a token without a role: %v", ops)
	}
	for _, body := range []string{`{"name":"x","role":"root"}`, `{"name":"x","role":""}`, `{"name":"x","role":null}`, `{"name":"x","role":1}`} {
		if p := h.fails(http.StatusBadRequest, codeInvalidField, "POST", "/v1/admin-tokens", body); p.Field != "role" {
			t.Errorf("%s: field %q", body, p.Field)
		}
	}
	_, viewer := h.tokenWithRole(ledger.RoleViewer)
	for _, item := range h.ok(http.StatusOK, "GET", "/v1/admin-tokens", "")["items"].([]any) {
		tok := item.(map[string]any)
		if want := map[bool]string{true: "viewer", false: "admin"}[tok["id"] == viewer]; tok["role"] != want {
			t.Errorf("token %v, want the role %s", tok, want)
		}
	}
	h.ok(http.StatusOK, "DELETE", "/v1/admin-tokens/"+ops["id"].(string), "")
	// The bootstrap token is the last admin; the viewer lives on.
	h.fails(http.StatusConflict, codeConflict, "DELETE", "/v1/admin-tokens/bootstrap", "")
	h.ok(http.StatusOK, "DELETE", "/v1/admin-tokens/"+viewer, "")
}

// metricSum is the sum of a counter's series, 0 when it has none.
func (h *harness) metricSum(name string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
