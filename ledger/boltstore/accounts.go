package boltstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// maxNameLen bounds caller-chosen names (deposit keys, key and token ids):
// they become bbolt keys.
const maxNameLen = 256

// CreateAccount implements ledger.Store. The scope follows from the parent
// (see ledger.NewAccount); the parent must exist (ErrNotFound). The same
// spec again returns the existing account with created=false; a different
// spec for an existing id is ErrConflict.
func (s *Store) CreateAccount(ctx context.Context, spec ledger.AccountSpec, now int64) (acct ledger.Account, created bool, err error) {
	if err := ledger.ValidateSpec(spec); err != nil {
		return ledger.Account{}, false, err
	}
	err = s.update(ctx, func(x *txn) error {
		existing, err := x.account(spec.ID)
		switch {
		case err == nil && existing.AccountSpec == spec:
			acct = *existing
			return nil
		case err == nil:
			return fmt.Errorf("%w: account %s exists as %+v", ledger.ErrConflict, spec.ID, existing.AccountSpec)
		case !errors.Is(err, ledger.ErrNotFound):
			return err
		}
		var parent *ledger.Account
		if spec.Parent != "" {
			if parent, err = x.account(spec.Parent); err != nil {
				return fmt.Errorf("parent of %s: %w", spec.ID, err)
			}
		}
		a, err := ledger.NewAccount(spec, parent)
		if err != nil {
			return err
		}
		acct, created = *x.insertAccount(a), true
		if spec.Parent != "" {
			return x.bucket(bucketChildren).Put(childKey(spec.Parent, spec.ID), nil)
		}
		return nil
	})
	if err != nil {
		return ledger.Account{}, false, err
	}
	return acct, created, nil
}

// Account implements ledger.Store.
func (s *Store) Account(ctx context.Context, id core.AccountID) (acct ledger.Account, err error) {
	err = s.view(ctx, func(x *txn) error {
		a, err := x.account(id)
		if err == nil {
			acct = *a
		}
		return err
	})
	return acct, err
}

// Accounts implements ledger.Store: every account, in id order.
func (s *Store) Accounts(ctx context.Context) (out []ledger.Account, err error) {
	err = s.view(ctx, func(x *txn) error {
		return x.bucket(bucketAccounts).ForEach(func(k, v []byte) error {
			a, err := decodeAccount(k, v)
			out = append(out, a)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// modify loads account id, applies change to it and returns it as stored.
func (s *Store) modify(ctx context.Context, id core.AccountID, change func(a *ledger.Account) error) (acct ledger.Account, err error) {
	err = s.update(ctx, func(x *txn) error {
		a, err := x.account(id)
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
// failed deposit records no key.
func (s *Store) Deposit(ctx context.Context, id core.AccountID, units core.CostUnits, key string, now int64) (acct ledger.Account, dup bool, err error) {
	if units == 0 || key == "" || len(key) > maxNameLen {
		return ledger.Account{}, false, fmt.Errorf("%w: deposit of %d with key %q", ledger.ErrInvalid, units, key)
	}
	err = s.update(ctx, func(x *txn) error {
		a, err := x.account(id)
		if err != nil {
			return err
		}
		deposits := x.bucket(bucketDeposits)
		k := pairKey(id, key)
		if v := deposits.Get(k); v != nil {
			prev, n := binary.Uvarint(v)
			if n <= 0 {
				return fmt.Errorf("%w: deposit %q of %s", ErrCorrupt, key, id)
			}
			if core.CostUnits(prev) != units {
				return fmt.Errorf("%w: deposit %q of %s was %d units, not %d", ledger.ErrConflict, key, id, prev, units)
			}
			acct, dup = *a, true
			return nil
		}
		if err := ledger.TopUp(a, units); err != nil {
			return err
		}
		acct = *a
		return deposits.Put(k, binary.AppendUvarint(nil, uint64(units)))
	})
	if err != nil {
		return ledger.Account{}, false, err
	}
	return acct, dup, nil
}

// Rollover implements ledger.Store. It walks the due index (accounts by
// PeriodEnd) from the earliest, so it touches only accounts whose period
// ended, at most limit of them. Under bbolt's single writer a boundary is
// crossed exactly once however many callers race: the second finds the
// account already in the new period. Accounts a grant, release or
// post-paid charge already rolled over (see ledger.RollOver) are not due
// and not counted.
func (s *Store) Rollover(ctx context.Context, now int64, limit int) (moved int, err error) {
	if limit <= 0 {
		return 0, fmt.Errorf("%w: rollover limit %d", ledger.ErrInvalid, limit)
	}
	if due, err := s.due(ctx, bucketDue, now); !due || err != nil {
		return 0, err
	}
	err = s.update(ctx, func(x *txn) error {
		var due []core.AccountID
		c := x.bucket(bucketDue).Cursor()
		for k, _ := c.First(); k != nil && len(due) < limit && keyTime(k) <= now; k, _ = c.Next() {
			due = append(due, core.AccountID(k[8:]))
		}
		for _, id := range due {
			a, err := x.account(id)
			if err != nil {
				return fmt.Errorf("%w: due index names %s: %w", ErrCorrupt, id, err)
			}
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

// Evidence implements ledger.Store, from the stored state: PeriodEnd tells
// the reader until when it holds.
func (s *Store) Evidence(ctx context.Context, id core.AccountID) (ev ledger.Evidence, err error) {
	err = s.view(ctx, func(x *txn) error {
		an, err := x.ancestry(id)
		if err != nil {
			return err
		}
		ev, err = ledger.EvidenceOf(an.Chain())
		return err
	})
	return ev, err
}
