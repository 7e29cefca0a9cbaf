package admin

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/policy"
)

// policyResponse answers GET and PUT /v1/accounts/{id}/policy.
type policyResponse struct {
	Account    core.AccountID  `json:"account"`
	Generation uint64          `json:"generation"`
	Revision   string          `json:"revision"` // what the data plane reports as policy_revision
	Default    bool            `json:"default"`  // the account has no policy of its own: this is policy.Default()
	Policy     json.RawMessage `json:"policy"`
	followUp
}

// policyAudit is an audit record's before/after for a policy change.
type policyAudit struct {
	Generation uint64          `json:"generation"`
	Policy     json.RawMessage `json:"policy"` // null: the default policy
}

// describePolicy is a's policy as the API shows it: canonical, with its
// revision at a's generation, or the default policy for an account that
// has none. A stored policy that no longer parses is shown as stored.
func describePolicy(a *ledger.Account) policyResponse {
	resp := policyResponse{Account: a.ID, Generation: a.PolicyGeneration}
	var raw []byte
	if len(a.Policy) == 0 {
		resp.Default = true
		raw = policy.Canonical(policy.Default())
	} else if d, err := policy.Parse(a.Policy); err == nil {
		raw = policy.Canonical(d)
	} else {
		raw = rawOrNull(a.Policy)
	}
	rev := policy.Revision(raw, a.PolicyGeneration)
	resp.Revision = hex.EncodeToString(rev[:])
	resp.Policy = raw
	return resp
}

// getPolicy: GET /v1/accounts/{id}/policy.
func (s *Server) getPolicy(w http.ResponseWriter, r *http.Request) error {
	if _, err := readQuery(r); err != nil {
		return err
	}
	a, err := s.pathAccount(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, describePolicy(&a))
}

// putPolicy: PUT /v1/accounts/{id}/policy with a policy document. It is
// parsed, then compiled against the account as it will be once stored (so
// a policy the data plane could not install is refused here, not after),
// and stored in canonical form: the same policy again is a no-op in the
// ledger, with no new generation.
func (s *Server) putPolicy(w http.ResponseWriter, r *http.Request) error {
	id, err := accountID(r)
	if err != nil {
		return err
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	doc, err := policy.Parse(body)
	if err != nil {
		return policyError(err)
	}
	canonical := policy.Canonical(doc)

	s.mu.Lock()
	defer s.mu.Unlock()
	before, err := s.loadAccount(r, id)
	if err != nil {
		return err
	}
	if before.Status == core.StatusClosed {
		return problemf(codeClosedAccount, "account %s is closed; its policy no longer matters", id)
	}
	repeat := bytes.Equal(before.Policy, canonical)
	probe := before
	probe.Policy = canonical
	if !repeat {
		probe.PolicyGeneration++
	}
	if _, err := policy.Compile(probe); err != nil {
		return fieldProblem("", "the policy does not compile for account %s: %s", id, plain(err))
	}
	after, err := s.store.SetPolicy(r.Context(), id, canonical)
	if err != nil {
		return ledgerError(err, unknownAccount(id))
	}
	var f followUp
	if !repeat {
		s.record(r.Context(), &f, actionAccountPolicy, string(id),
			policyAudit{Generation: before.PolicyGeneration, Policy: rawOrNull(before.Policy)},
			policyAudit{Generation: after.PolicyGeneration, Policy: canonical})
	}
	s.publish(&f, after)
	resp := describePolicy(&after)
	resp.followUp = f
	return writeJSON(w, http.StatusOK, resp)
}

// policyError maps policy.Parse's errors onto the API's codes.
func policyError(err error) error {
	var fe *policy.FieldError
	switch {
	case errors.Is(err, policy.ErrTooLarge):
		return problemf(codeTooLarge, "%s", plain(err))
	case errors.Is(err, policy.ErrDuplicateKey) && errors.As(err, &fe):
		return codeProblem(codeDuplicateField, fieldName(fe.Field), "is given twice; each field once")
	case errors.As(err, &fe):
		return fieldProblem(fe.Field, "%s", fe.Problem)
	case errors.Is(err, policy.ErrMalformed):
		return problemf(codeInvalidJSON, "%s", plain(err))
	}
	return problemf(codeInvalidField, "%s", plain(err))
}

// rawOrNull is a stored JSON document, or null when there is none (or it
// is not JSON, which only a foreign writer could have stored).
func rawOrNull(b []byte) json.RawMessage {
	if len(b) == 0 || !json.Valid(b) {
		return json.RawMessage("null")
	}
	return b
}
