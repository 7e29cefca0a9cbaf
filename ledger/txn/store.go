package txn

import (
	"context"
	"errors"
	"fmt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// Store is the ledger.Store of a Backend: the scripts here, the backend's
// Queries for its reads.
type Store struct {
	Queries
	b Backend
}

var _ ledger.Store = (*Store)(nil)

// New returns the store of b.
func New(b Backend) *Store { return &Store{Queries: b, b: b} }

// update runs fn as one transaction's script and, if it succeeds, writes
// back what it changed before the transaction commits.
func (s *Store) update(ctx context.Context, fn func(w *work) error) error {
	return s.b.Update(ctx, func(tx Tx) error {
		w := newWork(tx)
		if err := fn(w); err != nil {
			return err
		}
		return w.flush()
	})
}

// text refuses s if the backend cannot store it (TextChecker).
func (s *Store) text(what, v string, max int) error {
	if c, ok := s.b.(TextChecker); ok {
		return c.CheckText(what, v, max)
	}
	return nil
}

// name checks a caller-chosen id: 1 to MaxNameLen bytes the backend can
// store.
func (s *Store) name(what, id string) error {
	if id == "" || len(id) > MaxNameLen {
		return fmt.Errorf("%w: %s id must be 1-%d bytes", ledger.ErrInvalid, what, MaxNameLen)
	}
	return s.text(what+" id", id, 0)
}

// label checks a caller-chosen label (a key's or an admin token's name):
// at most MaxNameLen bytes the backend can store, possibly none.
func (s *Store) label(what, v string) error {
	if len(v) > MaxNameLen {
		return fmt.Errorf("%w: %s of %d bytes, at most %d", ledger.ErrInvalid, what, len(v), MaxNameLen)
	}
	return s.text(what, v, 0)
}

// idle reports whether a periodic pass may skip its transaction: the
// backend (DueChecker) saw nothing timed at or before t.
func (s *Store) idle(ctx context.Context, what DueWork, t int64) (bool, error) {
	d, ok := s.b.(DueChecker)
	if !ok {
		return false, nil
	}
	due, err := d.Due(ctx, what, t)
	return !due || err != nil, err
}

// CreateAccount implements ledger.Store. The scope follows from the parent
// (see ledger.NewAccount); the parent must exist (ErrNotFound). The same
// spec again returns the existing account with created=false; a different
// spec for an existing id is ErrConflict. Two transactions creating one id
// at once agree: the second's insert finds the first's account, and
// compares.
func (s *Store) CreateAccount(ctx context.Context, spec ledger.AccountSpec, now int64) (acct ledger.Account, created bool, err error) {
	if err := ledger.ValidateSpec(spec); err != nil {
		return ledger.Account{}, false, err
	}
	err = s.update(ctx, func(w *work) error {
		created = false
		if found, err := existing(w.tx, spec, &acct); found || err != nil {
			return err
		}
		var parent *ledger.Account
		if spec.Parent != "" {
			p, err := w.tx.Account(spec.Parent)
			if err != nil {
				return fmt.Errorf("parent of %s: %w", spec.ID, err)
			}
			parent = &p
		}
		a, err := ledger.NewAccount(spec, parent)
		if err != nil {
			return err
		}
		inserted, err := w.tx.InsertAccount(&a)
		if err != nil || inserted {
			acct, created = a, inserted
			return err
		}
		found, err := existing(w.tx, spec, &acct)
		if err == nil && !found {
			err = fmt.Errorf("%w: account %s neither inserted nor found", ledger.ErrCorrupt, spec.ID)
		}
		return err
	})
	if err != nil {
		return ledger.Account{}, false, err
	}
	return acct, created, nil
}

// existing compares spec with the existing account of its id, if there is
// one (found): the same spec is that account (into), another is
// ErrConflict.
func existing(tx Tx, spec ledger.AccountSpec, into *ledger.Account) (found bool, err error) {
	a, err := tx.Account(spec.ID)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	case a.AccountSpec != spec:
		return true, fmt.Errorf("%w: account %s exists as %+v", ledger.ErrConflict, spec.ID, a.AccountSpec)
	}
	*into = a
	return true, nil
}

// modify locks account id (and its ancestry), applies change to it and
// returns it as stored.
func (s *Store) modify(ctx context.Context, id core.AccountID, change func(a *ledger.Account) error) (acct ledger.Account, err error) {
	err = s.update(ctx, func(w *work) error {
		if err := w.lockAccounts(id); err != nil {
			return err
		}
		a, err := w.account(id)
		if err != nil {
			return err
		}
		if err := change(a); err != nil {
			return err
		}
		acct = *a
		return nil
	})
	if err != nil {
		return ledger.Account{}, err
	}
	return acct, nil
}

// SetStatus implements ledger.Store (see ledger.ChangeStatus: closing is
// terminal and ends the budget).
func (s *Store) SetStatus(ctx context.Context, id core.AccountID, st core.Status) (ledger.Account, error) {
	return s.modify(ctx, id, func(a *ledger.Account) error {
		_, err := ledger.ChangeStatus(a, st)
		return err
	})
}

// SetPolicy implements ledger.Store.
func (s *Store) SetPolicy(ctx context.Context, id core.AccountID, policy []byte) (ledger.Account, error) {
	return s.modify(ctx, id, func(a *ledger.Account) error {
		_, err := ledger.ChangePolicy(a, policy)
		return err
	})
}

// SetBudget implements ledger.Store (see ledger.ChangeBudget).
func (s *Store) SetBudget(ctx context.Context, id core.AccountID, b ledger.Budget, now int64) (ledger.Account, error) {
	if err := ledger.ValidateBudget(b); err != nil {
		return ledger.Account{}, err
	}
	return s.modify(ctx, id, func(a *ledger.Account) error {
		_, err := ledger.ChangeBudget(a, b, now)
		return err
	})
}

// Deposit implements ledger.Store. Idempotency is by (account, key): the
// key's units are recorded with the deposit, so a repeat with the same
// units is dup=true and changes nothing, and with other units is
// ErrConflict. A repeat is recognised even after the account closed. A
// failed deposit records no key. The account's lock orders two deposits
// with one key: the second sees the first's.
func (s *Store) Deposit(ctx context.Context, id core.AccountID, units core.CostUnits, key string, now int64) (acct ledger.Account, dup bool, err error) {
	if units == 0 || key == "" || len(key) > MaxNameLen {
		return ledger.Account{}, false, fmt.Errorf("%w: deposit of %d with key %q", ledger.ErrInvalid, units, key)
	}
	if err := s.text("deposit key", key, 0); err != nil {
		return ledger.Account{}, false, err
	}
	err = s.update(ctx, func(w *work) error {
		dup = false
		if err := w.lockAccounts(id); err != nil {
			return err
		}
		a, err := w.account(id)
		if err != nil {
			return err
		}
		prev, found, err := w.tx.Deposit(id, key)
		switch {
		case err != nil:
			return err
		case found && prev != units:
			return fmt.Errorf("%w: deposit %q of %s was %d units, not %d", ledger.ErrConflict, key, id, prev, units)
		case found:
			acct, dup = *a, true
			return nil
		}
		if err := ledger.TopUp(a, units); err != nil {
			return err
		}
		acct = *a
		return w.tx.PutDeposit(id, key, units, now)
	})
	if err != nil {
		return ledger.Account{}, false, err
	}
	return acct, dup, nil
}

// Rollover implements ledger.Store. It moves each due account with
// ledger.RollOver under its lock, so a boundary is crossed exactly once
// however many callers race: an account already moved is no longer due.
// Accounts a grant, release or post-paid charge already rolled over (see
// ledger.RollOver) are not due and not counted.
func (s *Store) Rollover(ctx context.Context, now int64, limit int) (moved int, err error) {
	if limit <= 0 {
		return 0, fmt.Errorf("%w: rollover limit %d", ledger.ErrInvalid, limit)
	}
	if idle, err := s.idle(ctx, DueRollover, now); idle {
		return 0, err
	}
	err = s.update(ctx, func(w *work) error {
		moved = 0
		w.locked = true // the due accounts are the only accounts this call locks
		due, err := w.tx.DueAccounts(now, limit)
		if err != nil {
			return err
		}
		for _, a := range w.holdAccounts(due) {
			m, err := ledger.RollOver(a, now)
			if err != nil {
				return err
			}
			if m {
				moved++
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return moved, nil
}
