package admin

import (
	"errors"
	"net/http"
	"strconv"

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

// maxIDLen bounds an id field before it is validated (core.AccountID is
// at most 64 bytes; this only keeps the refusal's detail short).
const maxIDLen = 256

// createAccount: POST /v1/accounts. Idempotent and never destructive: 201
// with the new account, 200 with the existing one if identical, 409 if the
// id exists with different attributes (which stay as they were).
func (s *Server) createAccount(w http.ResponseWriter, r *http.Request) error {
	o, err := decodeObject(w, r, false)
	if err != nil {
		return err
	}
	if err := o.only("id", "parent", "capacity", "unmetered"); err != nil {
		return err
	}
	id, _, err := o.str("id", true, maxIDLen)
	if err != nil {
		return err
	}
	spec := ledger.AccountSpec{ID: core.AccountID(id)}
	if err := spec.ID.Validate(); err != nil {
		return fieldProblem("id", "%s", plain(err))
	}
	parent, _, err := o.nullableStr("parent", maxIDLen)
	if err != nil {
		return err
	}
	capacity, _, err := o.str("capacity", false, maxIDLen)
	if err != nil {
		return err
	}
	if spec.Unmetered, _, err = o.boolean("unmetered", false); err != nil {
		return err
	}
	if parent != nil {
		spec.Parent = core.AccountID(*parent)
		if err := spec.Parent.Validate(); err != nil {
			return fieldProblem("parent", "%s (null for a root account)", plain(err))
		}
		if spec.Parent == spec.ID {
			return fieldProblem("parent", "an account cannot be its own parent")
		}
	} else if spec.Unmetered {
		return fieldProblem("unmetered", "a root account must be metered: every charge needs a balance that bounds it")
	}
	switch capacity {
	case "", "assured":
		spec.Capacity = core.CapacityAssured
	case "best_effort":
		spec.Capacity = core.CapacityBestEffort
	default:
		return fieldProblem("capacity", `must be "assured" or "best_effort", not %q`, capacity)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if spec.Parent != "" {
		if _, err := s.store.Account(r.Context(), spec.Parent); err != nil {
			return ledgerError(err, fieldProblem("parent", "no account %q", spec.Parent))
		}
	}
	acct, created, err := s.store.CreateAccount(r.Context(), spec, s.now())
	if errors.Is(err, ledger.ErrConflict) {
		return s.createConflict(r, spec.ID)
	}
	if err != nil {
		return ledgerError(err, fieldProblem("parent", "no account %q", spec.Parent))
	}
	var f followUp
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/v1/accounts/"+string(acct.ID))
		s.record(r.Context(), &f, actionAccountCreate, string(acct.ID), nil, ledgerView(&acct))
	}
	s.publish(&f, acct)
	return writeJSON(w, status, accountResponse{s.viewAccount(&acct), f})
}

// getAccount: GET /v1/accounts/{id}.
func (s *Server) getAccount(w http.ResponseWriter, r *http.Request) error {
	if _, err := readQuery(r); err != nil {
		return err
	}
	a, err := s.pathAccount(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, s.viewAccount(&a))
}

// listAccounts: GET /v1/accounts?parent=&status=&limit=&cursor=, in id
// order.
func (s *Server) listAccounts(w http.ResponseWriter, r *http.Request) error {
	q, err := readQuery(r, "parent", "status", "limit", "cursor")
	if err != nil {
		return err
	}
	var parent core.AccountID
	if v, ok := q.get("parent"); ok {
		parent = core.AccountID(v)
		if err := parent.Validate(); err != nil {
			return codeProblem(codeInvalidQuery, "parent", "%s", plain(err))
		}
	}
	// An unknown parent is the query's fault: the problem names it.
	return s.pageAccounts(w, r, q, parent, codeProblem(codeUnknownAccount, "parent", "no account %q", parent))
}

// children: GET /v1/accounts/{id}/children?status=&limit=&cursor= — the
// accounts whose parent is {id}, in id order.
func (s *Server) children(w http.ResponseWriter, r *http.Request) error {
	id, err := accountID(r)
	if err != nil {
		return err
	}
	q, err := readQuery(r, "status", "limit", "cursor")
	if err != nil {
		return err
	}
	return s.pageAccounts(w, r, q, id, unknownAccount(id))
}

// pageAccounts answers a page of parent's children (every account when
// parent is ""); unknown is the answer when parent does not exist.
func (s *Server) pageAccounts(w http.ResponseWriter, r *http.Request, q query, parent core.AccountID, unknown *apiError) error {
	f := ledger.AccountFilter{Parent: parent}
	if v, ok := q.get("status"); ok {
		st, known := statusNames[v]
		if !known {
			return codeProblem(codeInvalidQuery, "status", `must be "active", "suspended" or "closed", not %q`, v)
		}
		f.ByStatus, f.Status = true, st
	}
	p, err := q.page(listAccounts)
	if err != nil {
		return err
	}
	accts, next, err := s.store.ListAccounts(r.Context(), f, ledger.Page{After: p.after, Limit: p.limit})
	if err != nil {
		return ledgerError(pageError(err), unknown)
	}
	views := make([]accountView, len(accts))
	for i := range accts {
		views[i] = s.viewAccount(&accts[i])
	}
	return writeJSON(w, http.StatusOK, newList(listAccounts, views, next))
}

// pageError turns the ledger's refusal of a page into the cursor's fault:
// limits are checked here, so ErrInvalid can only be a cursor the ledger
// does not recognise (one that is well formed, but was not its own).
func pageError(err error) error {
	if errors.Is(err, ledger.ErrInvalid) {
		return codeProblem(codeInvalidQuery, "cursor", "is not a cursor of this listing")
	}
	return err
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
		s.record(r.Context(), &f, action, string(id), ledgerView(&before), ledgerView(&after))
	}
	s.publish(&f, after)
	return writeJSON(w, status, accountResponse{s.viewAccount(&after), f})
}

var statusNames = map[string]core.Status{
	"active": core.StatusActive, "suspended": core.StatusSuspended, "closed": core.StatusClosed,
}

// createConflict is the 409 for an id that exists with another spec: what
// it exists as, in the body's own terms.
func (s *Server) createConflict(r *http.Request, id core.AccountID) error {
	a, err := s.store.Account(r.Context(), id)
	if err != nil {
		return ledgerError(err, unknownAccount(id))
	}
	v := ledgerView(&a)
	parent := "null"
	if v.Parent != nil {
		parent = strconv.Quote(*v.Parent)
	}
	return problemf(codeConflict, "account %s exists as parent %s, capacity %q, unmetered %t; it stays as it was",
		id, parent, v.Capacity, v.Unmetered)
}

// setStatus: POST /v1/accounts/{id}/status {"status":"active|suspended|closed"}.
// Closed is terminal: leaving it is 409 closed-account.
func (s *Server) setStatus(w http.ResponseWriter, r *http.Request) error {
	id, err := accountID(r)
	if err != nil {
		return err
	}
	o, err := decodeObject(w, r, false)
	if err != nil {
		return err
	}
	if err := o.only("status"); err != nil {
		return err
	}
	name, _, err := o.str("status", true, maxIDLen)
	if err != nil {
		return err
	}
	st, ok := statusNames[name]
	if !ok {
		return fieldProblem("status", `must be "active", "suspended" or "closed", not %q`, name)
	}
	if st == core.StatusClosed {
		if err := s.require(r, permAccountClose); err != nil {
			return err
		}
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
	o, err := decodeObject(w, r, false)
	if err != nil {
		return err
	}
	if err := o.only("allowance", "period"); err != nil {
		return err
	}
	allowance, _, err := o.units("allowance", true)
	if err != nil {
		return err
	}
	period, _, err := o.str("period", true, maxIDLen)
	if err != nil {
		return err
	}
	p, ok := periodValues[period]
	if !ok {
		return fieldProblem("period", `must be "day", "week", "month" or "none", not %q`, period)
	}
	if p == ledger.PeriodNone && allowance != 0 {
		return fieldProblem("allowance", `must be 0 when period is "none": an allowance renews each period`)
	}
	b := ledger.Budget{Allowance: allowance, Period: p}
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
	o, err := decodeObject(w, r, false)
	if err != nil {
		return err
	}
	if err := o.only("units", "idempotency_key"); err != nil {
		return err
	}
	units, _, err := o.units("units", true)
	if err != nil {
		return err
	}
	if units == 0 {
		return fieldProblem("units", "must be positive")
	}
	key, _, err := o.str("idempotency_key", true, MaxIdempotencyKeyLen)
	if err != nil {
		return err
	}
	if !validIdempotencyKey(key) {
		return fieldProblem("idempotency_key", "must be 1 to %d printable ASCII characters", MaxIdempotencyKeyLen)
	}
	return s.change(w, r, id, actionAccountDeposit, func(*ledger.Account) (ledger.Account, int, bool, error) {
		a, dup, err := s.store.Deposit(r.Context(), id, units, key, s.now())
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
