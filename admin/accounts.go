package admin

import (
	"net/http"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// accountID is the {id} path value, checked.
func accountID(r *http.Request) (core.AccountID, error) {
	id := core.AccountID(r.PathValue("id"))
	if err := id.Validate(); err != nil {
		// No well-formed account has this id, so it is unknown.
		return "", problemf(codeUnknownAccount, "no account %q: %v", id, err)
	}
	return id, nil
}

func unknownAccount(id core.AccountID) *apiError {
	return problemf(codeUnknownAccount, "no account %q", id)
}

// loadAccount reads an account, answering unknown-account if absent.
func (s *Server) loadAccount(r *http.Request, id core.AccountID) (ledger.Account, error) {
	a, err := s.store.Account(r.Context(), id)
	if err != nil {
		return a, ledgerError(err, unknownAccount(id))
	}
	return a, nil
}

// pathAccount loads the account the request's path names.
func (s *Server) pathAccount(r *http.Request) (ledger.Account, error) {
	id, err := accountID(r)
	if err != nil {
		return ledger.Account{}, err
	}
	return s.loadAccount(r, id)
}

type createAccountRequest struct {
	ID        string  `json:"id"`
	Parent    *string `json:"parent"`
	Capacity  string  `json:"capacity"`
	Unmetered bool    `json:"unmetered"`
}

// createAccount: POST /v1/accounts. Idempotent and never destructive: 201
// with the new account, 200 with the existing one if identical, 409 if the
// id exists with different attributes (which stay as they were).
func (s *Server) createAccount(w http.ResponseWriter, r *http.Request) error {
	var req createAccountRequest
	if err := decodeBody(w, r, &req, false); err != nil {
		return err
	}
	spec := ledger.AccountSpec{ID: core.AccountID(req.ID), Unmetered: req.Unmetered}
	if err := spec.ID.Validate(); err != nil {
		return fieldProblem("id", "%v", err)
	}
	if req.Parent != nil && *req.Parent != "" {
		spec.Parent = core.AccountID(*req.Parent)
		if err := spec.Parent.Validate(); err != nil {
			return fieldProblem("parent", "%v", err)
		}
		if spec.Parent == spec.ID {
			return fieldProblem("parent", "an account cannot be its own parent")
		}
	} else if spec.Unmetered {
		return fieldProblem("unmetered", "a root account must be metered: every charge needs a balance that bounds it")
	}
	switch req.Capacity {
	case "", "assured":
		spec.Capacity = core.CapacityAssured
	case "best_effort":
		spec.Capacity = core.CapacityBestEffort
	default:
		return fieldProblem("capacity", `must be "assured" or "best_effort", not %q`, req.Capacity)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if spec.Parent != "" {
		if _, err := s.store.Account(r.Context(), spec.Parent); err != nil {
			return ledgerError(err, fieldProblem("parent", "no account %q", spec.Parent))
		}
	}
	acct, created, err := s.store.CreateAccount(r.Context(), spec, s.now())
	if err != nil {
		return ledgerError(err, fieldProblem("parent", "no account %q", spec.Parent))
	}
	var f followUp
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/v1/accounts/"+string(acct.ID))
		s.record(r.Context(), &f, actionAccountCreate, string(acct.ID), nil, viewAccount(&acct))
	}
	s.publish(&f, acct)
	return writeJSON(w, status, accountResponse{viewAccount(&acct), f})
}

// getAccount: GET /v1/accounts/{id}.
func (s *Server) getAccount(w http.ResponseWriter, r *http.Request) error {
	a, err := s.pathAccount(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, viewAccount(&a))
}

// change runs one account change under the admin lock: it reads the
// before state, applies do, records the audit record unless do reports a
// repeat (a change already made: nothing to record), and publishes the new
// state, answering it with status.
func (s *Server) change(w http.ResponseWriter, r *http.Request, id core.AccountID, action string,
	do func(before *ledger.Account) (after ledger.Account, status int, repeat bool, err error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	before, err := s.loadAccount(r, id)
	if err != nil {
		return err
	}
	after, status, repeat, err := do(&before)
	if err != nil {
		return ledgerError(err, unknownAccount(id))
	}
	var f followUp
	if !repeat {
		s.record(r.Context(), &f, action, string(id), viewAccount(&before), viewAccount(&after))
	}
	s.publish(&f, after)
	return writeJSON(w, status, accountResponse{viewAccount(&after), f})
}

var statusNames = map[string]core.Status{
	"active": core.StatusActive, "suspended": core.StatusSuspended, "closed": core.StatusClosed,
}

// setStatus: POST /v1/accounts/{id}/status {"status":"active|suspended|closed"}.
// Closed is terminal: leaving it is 409 closed-account.
func (s *Server) setStatus(w http.ResponseWriter, r *http.Request) error {
	id, err := accountID(r)
	if err != nil {
		return err
	}
	var req struct {
		Status string `json:"status"`
	}
	if err := decodeBody(w, r, &req, false); err != nil {
		return err
	}
	st, ok := statusNames[req.Status]
	if !ok {
		return fieldProblem("status", `must be "active", "suspended" or "closed", not %q`, req.Status)
	}
	return s.change(w, r, id, actionAccountStatus, func(before *ledger.Account) (ledger.Account, int, bool, error) {
		a, err := s.store.SetStatus(r.Context(), id, st)
		return a, http.StatusOK, before.Status == st, err
	})
}

var periodValues = map[string]ledger.Period{
	"none": ledger.PeriodNone, "day": ledger.PeriodDay, "week": ledger.PeriodWeek, "month": ledger.PeriodMonth,
}

// setBudget: PUT /v1/accounts/{id}/budget {"allowance":N,"period":"…"}.
// Both fields are required, so a forgotten one cannot zero a budget.
func (s *Server) setBudget(w http.ResponseWriter, r *http.Request) error {
	id, err := accountID(r)
	if err != nil {
		return err
	}
	var req struct {
		Allowance *core.CostUnits `json:"allowance"`
		Period    *string         `json:"period"`
	}
	if err := decodeBody(w, r, &req, false); err != nil {
		return err
	}
	if req.Allowance == nil {
		return fieldProblem("allowance", "is required (0 for none)")
	}
	if err := checkUnits("allowance", *req.Allowance); err != nil {
		return err
	}
	if req.Period == nil {
		return fieldProblem("period", `is required: "day", "week", "month" or "none"`)
	}
	p, ok := periodValues[*req.Period]
	if !ok {
		return fieldProblem("period", `must be "day", "week", "month" or "none", not %q`, *req.Period)
	}
	if p == ledger.PeriodNone && *req.Allowance != 0 {
		return fieldProblem("allowance", `must be 0 when period is "none": an allowance renews each period`)
	}
	b := ledger.Budget{Allowance: *req.Allowance, Period: p}
	return s.change(w, r, id, actionAccountBudget, func(before *ledger.Account) (ledger.Account, int, bool, error) {
		a, err := s.store.SetBudget(r.Context(), id, b, s.now())
		return a, http.StatusOK, before.Budget == b, err
	})
}

// MaxIdempotencyKeyLen bounds a deposit's idempotency key.
const MaxIdempotencyKeyLen = 128

// deposit: POST /v1/accounts/{id}/deposits {"units":N,"idempotency_key":"…"}.
// 201 when deposited, 200 when the key was already used for the same
// units (nothing changes), 409 conflict when it was used for other units.
func (s *Server) deposit(w http.ResponseWriter, r *http.Request) error {
	id, err := accountID(r)
	if err != nil {
		return err
	}
	var req struct {
		Units          core.CostUnits `json:"units"`
		IdempotencyKey string         `json:"idempotency_key"`
	}
	if err := decodeBody(w, r, &req, false); err != nil {
		return err
	}
	if req.Units == 0 {
		return fieldProblem("units", "is required and must be positive")
	}
	if err := checkUnits("units", req.Units); err != nil {
		return err
	}
	if !validIdempotencyKey(req.IdempotencyKey) {
		return fieldProblem("idempotency_key", "is required: 1 to %d printable ASCII characters", MaxIdempotencyKeyLen)
	}
	return s.change(w, r, id, actionAccountDeposit, func(*ledger.Account) (ledger.Account, int, bool, error) {
		a, dup, err := s.store.Deposit(r.Context(), id, req.Units, req.IdempotencyKey, s.now())
		if dup {
			return a, http.StatusOK, true, err
		}
		return a, http.StatusCreated, false, err
	})
}

func validIdempotencyKey(k string) bool {
	if len(k) == 0 || len(k) > MaxIdempotencyKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < ' ' || k[i] > '~' {
			return false
		}
	}
	return true
}
