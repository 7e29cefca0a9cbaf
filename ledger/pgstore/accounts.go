package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

const insertAccountSQL = `INSERT INTO accounts (id, parent, capacity, unmetered, scope, status, policy, policy_generation,
		budget_allowance, budget_period, deposited, overage, allowance_left, top_up_left, outstanding, settled,
		loss, expired, repaid, period_start, period_end, next_token)
	VALUES ($1, nullif($2, ''), $3, $4, $5, $6, NULL, $7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, $8)
	ON CONFLICT (id) DO NOTHING`

// CreateAccount implements ledger.Store. The scope follows from the parent
// (see ledger.NewAccount); the parent must exist (ErrNotFound). The same
// spec again returns the existing account with created=false; a different
// spec for an existing id is ErrConflict. Two nodes creating one id at once
// agree: the second waits for the first's insert and then compares.
func (s *Store) CreateAccount(ctx context.Context, spec ledger.AccountSpec, now int64) (acct ledger.Account, created bool, err error) {
	if err := ledger.ValidateSpec(spec); err != nil {
		return ledger.Account{}, false, err
	}
	err = s.update(ctx, func(x *txn) error {
		created = false
		if found, err := existing(ctx, x.tx, spec, &acct); found || err != nil {
			return err
		}
		var parent *ledger.Account
		if spec.Parent != "" {
			p, err := readAccount(ctx, x.tx, spec.Parent)
			if err != nil {
				return fmt.Errorf("parent of %s: %w", spec.ID, err)
			}
			parent = &p
		}
		a, err := ledger.NewAccount(spec, parent)
		if err != nil {
			return err
		}
		tag, err := x.tx.Exec(ctx, insertAccountSQL, string(a.ID), string(a.Parent), int16(a.Capacity), a.Unmetered,
			int16(a.Scope), int16(a.Status), int64(a.PolicyGeneration), int64(a.NextToken))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			// Another transaction inserted it since we looked; the insert
			// waited for it to commit, so now we see it.
			found, err := existing(ctx, x.tx, spec, &acct)
			if err == nil && !found {
				err = fmt.Errorf("%w: account %s neither inserted nor found", ErrCorrupt, spec.ID)
			}
			return err
		}
		acct, created = a, true
		x.change(ChangeAccount, a.ID, "", "")
		return nil
	})
	if err != nil {
		return ledger.Account{}, false, err
	}
	return acct, created, nil
}

// existing compares spec with the existing account of its id, if there is
// one (found): the same spec is that account (into), another is
// ErrConflict.
func existing(ctx context.Context, tx pgx.Tx, spec ledger.AccountSpec, into *ledger.Account) (found bool, err error) {
	a, err := readAccount(ctx, tx, spec.ID)
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

// readAccount reads account id without locking it.
func readAccount(ctx context.Context, q querier, id core.AccountID) (ledger.Account, error) {
	if id.Validate() != nil { // not a stored id; perhaps not even text PostgreSQL can hold
		return ledger.Account{}, fmt.Errorf("%w: account %q", ledger.ErrNotFound, id)
	}
	a, err := scanAccount(q.QueryRow(ctx, "SELECT "+accountColumns+" FROM accounts WHERE id = $1", string(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Account{}, fmt.Errorf("%w: account %q", ledger.ErrNotFound, id)
	}
	return a, err
}

// Account implements ledger.Store.
func (s *Store) Account(ctx context.Context, id core.AccountID) (ledger.Account, error) {
	return readAccount(ctx, s.pool, id)
}

// Accounts implements ledger.Store: every account, in id order.
func (s *Store) Accounts(ctx context.Context) ([]ledger.Account, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+accountColumns+" FROM accounts ORDER BY id")
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.Account, error) { return scanAccount(row) })
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out, nil
}

// Children implements ledger.Store.
func (s *Store) Children(ctx context.Context, id core.AccountID) ([]core.AccountID, error) {
	if id.Validate() != nil {
		return nil, fmt.Errorf("%w: account %q", ledger.ErrNotFound, id)
	}
	var exists bool
	var children []string
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM accounts WHERE id = $1),
		array(SELECT id FROM accounts WHERE parent = $1 ORDER BY id)`, string(id)).Scan(&exists, &children)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("%w: account %q", ledger.ErrNotFound, id)
	}
	var out []core.AccountID
	for _, c := range children {
		out = append(out, core.AccountID(c))
	}
	return out, nil
}

// modify locks account id (and its ancestry), applies change to it and
// returns it as stored.
func (s *Store) modify(ctx context.Context, id core.AccountID, change func(a *ledger.Account) error) (acct ledger.Account, err error) {
	err = s.update(ctx, func(x *txn) error {
		if err := x.lockAccounts([]core.AccountID{id}); err != nil {
			return err
		}
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
// failed deposit records no key. The account's lock orders two deposits
// with one key: the second sees the first's.
func (s *Store) Deposit(ctx context.Context, id core.AccountID, units core.CostUnits, key string, now int64) (acct ledger.Account, dup bool, err error) {
	if units == 0 || key == "" || len(key) > maxNameLen {
		return ledger.Account{}, false, fmt.Errorf("%w: deposit of %d with key %q", ledger.ErrInvalid, units, key)
	}
	if err := validText("deposit key", key); err != nil {
		return ledger.Account{}, false, err
	}
	err = s.update(ctx, func(x *txn) error {
		dup = false
		if err := x.lockAccounts([]core.AccountID{id}); err != nil {
			return err
		}
		a, err := x.account(id)
		if err != nil {
			return err
		}
		var prev int64
		err = x.tx.QueryRow(ctx, "SELECT units FROM deposits WHERE account = $1 AND key = $2", string(id), key).Scan(&prev)
		switch {
		case err == nil && prev == int64(units) && units <= 1<<63-1:
			acct, dup = *a, true
			return nil
		case err == nil:
			return fmt.Errorf("%w: deposit %q of %s was %d units, not %d", ledger.ErrConflict, key, id, prev, units)
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		if err := ledger.TopUp(a, units); err != nil {
			return err
		}
		acct = *a
		var w writer
		x.queue("INSERT INTO deposits (account, key, units, at) VALUES ($1, $2, $3, $4)", affects("recording a deposit", 1),
			string(id), key, w.units("deposit", units), now)
		x.change(ChangeDeposit, id, "", "")
		return w.err
	})
	if err != nil {
		return ledger.Account{}, false, err
	}
	return acct, dup, nil
}

// Rollover implements ledger.Store. It locks up to limit accounts whose
// period ended, earliest end first, skipping those another transaction
// holds (another node's rollover, or a grant that rolls them over lazily),
// and moves each with ledger.RollOver under its lock: a boundary is
// crossed exactly once however many nodes race, since an account already
// moved is no longer due.
func (s *Store) Rollover(ctx context.Context, now int64, limit int) (moved int, err error) {
	if limit <= 0 {
		return 0, fmt.Errorf("%w: rollover limit %d", ledger.ErrInvalid, limit)
	}
	err = s.update(ctx, func(x *txn) error {
		moved = 0
		x.locked = true // the due accounts are the only accounts this call locks
		rows, err := x.tx.Query(ctx, "SELECT "+accountColumns+` FROM accounts
			WHERE budget_period <> 0 AND period_end <= $1 ORDER BY period_end, id LIMIT $2
			FOR NO KEY UPDATE SKIP LOCKED`, now, limit)
		if err != nil {
			return err
		}
		var due []*ledger.Account
		if err := x.cacheAccounts(rows, &due); err != nil {
			return err
		}
		for _, a := range due {
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

// Evidence implements ledger.Store, from the committed state: PeriodEnd
// tells the reader until when it holds.
func (s *Store) Evidence(ctx context.Context, id core.AccountID) (ev ledger.Evidence, err error) {
	err = s.view(ctx, func(tx pgx.Tx) error {
		an, err := readAncestry(ctx, tx, id)
		if err != nil {
			return err
		}
		ev, err = ledger.EvidenceOf(an.Chain())
		return err
	})
	return ev, err
}

// readAncestry reads id and its ancestors, leaf first, without locking.
func readAncestry(ctx context.Context, q querier, id core.AccountID) (ledger.Ancestry, error) {
	var an ledger.Ancestry
	for next := id; next != ""; {
		if len(an) == 3 {
			return nil, fmt.Errorf("%w: ancestry of %s is deeper than three", ErrCorrupt, id)
		}
		a, err := readAccount(ctx, q, next)
		if err != nil {
			if len(an) > 0 {
				return nil, fmt.Errorf("%w: ancestry of %s: %w", ErrCorrupt, id, err)
			}
			return nil, err
		}
		an = append(an, &a)
		next = a.Parent
	}
	return an, nil
}
