package admin

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgated/tollgated/policy"
)

const examplePolicy = `{"permissions":["chat","embed"],
 "operations":{"input_tokens":{"weight":1,"permission":"chat"},"requests":{"weight":10}},
 "fixed_cost":0, "minimum_cost":0,
 "limits":{"max_items":100000,"request_rate":0,"request_burst":0,"unit_rate":0,"unit_burst":0,
           "max_concurrent":0,"principal_max_concurrent":0,"hold_timeout_ms":30000},
 "mode":"strict", "overage_cap":0, "deny_threshold":25}`

func canonicalOf(t *testing.T, doc string) string {
	t.Helper()
	d, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return string(policy.Canonical(d))
}

func TestGetDefaultPolicy(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	v := h.ok(http.StatusOK, "GET", "/v1/accounts/acme/policy", "")
	if v["account"] != "acme" || v["default"] != true || v["generation"] != 1.0 {
		t.Fatalf("default policy: %v", v)
	}
	if got := mustJSON(v["policy"]); got != mustJSON(jsonValue(t, policy.Canonical(policy.Default()))) {
		t.Fatalf("policy %s", got)
	}
	rev := policy.Revision(policy.Canonical(policy.Default()), 1)
	if v["revision"] != hex.EncodeToString(rev[:]) {
		t.Fatalf("revision %v", v["revision"])
	}
	h.fails(http.StatusNotFound, codeUnknownAccount, "GET", "/v1/accounts/nobody/policy", "")
}

func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestPutPolicy(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	v := h.ok(http.StatusOK, "PUT", "/v1/accounts/acme/policy", examplePolicy)
	canonical := canonicalOf(t, examplePolicy)
	// Decoded and re-encoded, the canonical form compares with any decoded
	// copy of it (maps re-encode sorted).
	same := mustJSON(jsonValue(t, []byte(canonical)))
	if v["generation"] != 2.0 || v["default"] != false || mustJSON(v["policy"]) != same {
		t.Fatalf("put: %v", v)
	}
	rev := policy.Revision([]byte(canonical), 2)
	if v["revision"] != hex.EncodeToString(rev[:]) {
		t.Fatal("revision is not the compiled snapshot's")
	}
	// The ledger holds the canonical bytes, and what was published compiles.
	a := h.pub.lastChanged()
	if string(a.Policy) != canonical || a.PolicyGeneration != 2 {
		t.Fatalf("published %s gen %d", a.Policy, a.PolicyGeneration)
	}
	c, err := policy.Compile(a)
	if err != nil || c.DenyThreshold != 25 || c.Snapshot.Revision != rev {
		t.Fatalf("published policy compiles to %+v, %v", c, err)
	}
	r, before, after := h.lastAudit()
	if r.Action != "account.policy" || r.Target != "acme" || before["policy"] != nil || before["generation"] != 1.0 ||
		after["generation"] != 2.0 || mustJSON(after["policy"]) != same {
		t.Fatalf("audit %+v %v %v", r, before, after)
	}
	if got := h.ok(http.StatusOK, "GET", "/v1/accounts/acme/policy", ""); mustJSON(got["policy"]) != same || got["generation"] != 2.0 {
		t.Fatalf("get after put: %v", got)
	}
	// The wire carries the canonical bytes themselves.
	if _, _, raw := h.call("GET", "/v1/accounts/acme/policy", ""); !strings.Contains(string(raw), `"policy":`+canonical) {
		t.Fatalf("policy is not sent in canonical form: %s", raw)
	}

	// The same policy, written differently: stored bytes identical, so no
	// new generation and no audit record; published again.
	records, published := len(h.auditLog()), h.pub.changes()
	reordered := `{"deny_threshold":25,"operations":{"requests":{"weight":10},"input_tokens":{"permission":"chat","weight":1}},
		"permissions":["chat","embed"],"limits":{"max_items":100000}}`
	if v := h.ok(http.StatusOK, "PUT", "/v1/accounts/acme/policy", reordered); v["generation"] != 2.0 {
		t.Fatalf("identical policy bumped the generation: %v", v)
	}
	if len(h.auditLog()) != records || h.pub.changes() != published+1 {
		t.Fatal("identical policy audited or not republished")
	}
}

func TestPutPolicyRefusals(t *testing.T) {
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	p := h.fails(http.StatusBadRequest, codeInvalidField, "PUT", "/v1/accounts/acme/policy",
		`{"operations":{"a":{"weight":5}},"limits":{"max_items":10,"unit_rate":1,"unit_burst":49}}`)
	if p.Field != "limits.unit_burst" || !strings.Contains(p.Detail, "50") {
		t.Fatalf("worst case: %+v", p)
	}
	p = h.fails(http.StatusBadRequest, codeInvalidField, "PUT", "/v1/accounts/acme/policy",
		`{"operations":{"a":{"weight":1.5}},"limits":{"max_items":10}}`)
	if p.Field != "operations.weight" {
		t.Fatalf("float weight: %+v", p)
	}
	p = h.fails(http.StatusBadRequest, codeInvalidField, "PUT", "/v1/accounts/acme/policy",
		`{"operations":{"a":{"weight":1}},"limits":{"max_items":10},"colour":"red"}`)
	if p.Field != "colour" {
		t.Fatalf("unknown field: %+v", p)
	}
	h.fails(http.StatusBadRequest, codeInvalidJSON, "PUT", "/v1/accounts/acme/policy", `{"operations":`)
	h.fails(http.StatusBadRequest, codeInvalidJSON, "PUT", "/v1/accounts/acme/policy", ``)
	h.fails(http.StatusRequestEntityTooLarge, codeTooLarge, "PUT", "/v1/accounts/acme/policy",
		`{"operations":{"a":{"weight":1}},"limits":{"max_items":10}}`+strings.Repeat(" ", MaxBodyBytes))
	h.fails(http.StatusNotFound, codeUnknownAccount, "PUT", "/v1/accounts/nobody/policy", examplePolicy)
	if v := h.ok(http.StatusOK, "GET", "/v1/accounts/acme/policy", ""); v["default"] != true || v["generation"] != 1.0 {
		t.Fatalf("refused policies changed the account: %v", v)
	}
	h.ok(http.StatusOK, "POST", "/v1/accounts/acme/status", `{"status":"closed"}`)
	h.fails(http.StatusConflict, codeClosedAccount, "PUT", "/v1/accounts/acme/policy", examplePolicy)
}

func TestPolicyErrorMapping(t *testing.T) {
	for _, c := range []struct {
		err  error
		code string
	}{
		{policy.ErrTooLarge, codeTooLarge},
		{&policy.FieldError{Field: "mode", Problem: "x"}, codeInvalidField},
		{errors.Join(policy.ErrMalformed, errors.New("eof")), codeInvalidJSON},
		{errors.New("other"), codeInvalidField},
	} {
		var e *apiError
		if !errors.As(policyError(c.err), &e) || e.code != c.code {
			t.Errorf("%v: %v", c.err, e)
		}
	}
}

func TestDescribeUnparseableStoredPolicy(t *testing.T) {
	// A policy some other writer stored that no longer parses is shown as
	// stored (or null if it is not JSON), not hidden behind an error.
	h := newHarness(t)
	h.createAccount(`{"id":"acme"}`)
	a, _ := h.store.Account(t.Context(), "acme")
	a.Policy = []byte(`{"legacy":true}`)
	if d := describePolicy(&a); string(d.Policy) != `{"legacy":true}` || d.Default {
		t.Fatalf("%+v", d)
	}
	a.Policy = []byte(`not json`)
	if d := describePolicy(&a); string(d.Policy) != `null` {
		t.Fatalf("%+v", d)
	}
}
