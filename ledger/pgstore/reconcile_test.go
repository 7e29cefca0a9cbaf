package pgstore

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// leases of busyLedger, by what happened to them.
type busyLeases struct{ active, released, reclaimed ledger.Lease }

// busyLedger gives s a hierarchy with every kind of money movement: an
// allowance and a rollover, top-ups, an active lease with usage, a
// released one with a gap and late usage, a reclaimed one, overage and
// post-paid usage, and a second root in debt, partly repaid.
func busyLedger(t *testing.T, s *Store) busyLeases {
	t.Helper()
	ctx := t.Context()
	mustCreate(t, s, "org", "")
	mustCreate(t, s, "ws", "org", true)
	mustCreate(t, s, "agent", "ws")
	mustCreate(t, s, "other", "")
	if _, err := s.SetBudget(ctx, "org", ledger.Budget{Allowance: 100, Period: ledger.PeriodDay}, t0); err != nil {
		t.Fatal(err)
	}
	mustDeposit(t, s, "org", 1000)
	mustDeposit(t, s, "agent", 500)
	mustDeposit(t, s, "other", 70)
	var b busyLeases
	var err error
	grant := func(id core.AccountID, want core.CostUnits) ledger.Lease {
		t.Helper()
		l, _, err := s.Acquire(ctx, id, "node-a", want, want, hour, t0)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	b.active, b.released, b.reclaimed = grant("agent", 120), grant("agent", 80), grant("org", 60)
	use := func(n uint64, l ledger.Lease, units core.CostUnits) ledger.Usage {
		return ledger.Usage{ID: eventID(n), Account: l.Account, Source: ledger.UsageLease, LeaseID: l.ID, Token: l.Token, Units: units}
	}
	if _, err = s.Ingest(ctx, []ledger.Usage{use(1, b.active, 30), use(2, b.released, 10), use(3, b.reclaimed, 5),
		{ID: eventID(4), Account: "agent", Source: ledger.UsageOverage, Units: 7},
		{ID: eventID(5), Account: "ws", Source: ledger.UsagePostPaid, Units: 9},
		{ID: eventID(6), Account: "other", Source: ledger.UsagePostPaid, Units: 3}}, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, b.released.ID, b.released.Token, 40, t0+minute); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Reclaim(ctx, t0+2*hour, 0, 1); n != 1 || err != nil {
		t.Fatalf("reclaim: %d, %v", n, err)
	}
	// Late usage of the released lease turns part of its loss into usage.
	if _, err = s.Ingest(ctx, []ledger.Usage{use(7, b.released, 20)}, t0+2*hour); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Rollover(ctx, t0+day, 10); n != 1 || err != nil {
		t.Fatalf("rollover: %d, %v", n, err)
	}
	// Post-paid usage beyond other's balance is debt; a deposit repays part.
	if _, err = s.Ingest(ctx, []ledger.Usage{{ID: eventID(8), Account: "other", Source: ledger.UsagePostPaid, Units: 100}}, t0+day); err != nil {
		t.Fatal(err)
	}
	mustDeposit(t, s, "other", 20)
	if a, err := s.Account(ctx, "other"); err != nil || a.Overage != 13 || a.Repaid != 20 || a.Balance() != 0 {
		t.Fatalf("other after its debt: %+v, %v", a, err)
	}
	return b
}

func rules(found []Finding) []string {
	var out []string
	for _, f := range found {
		out = append(out, f.Rule)
	}
	return out
}

// TestReconcileFindsNothingOnASoundLedger, through the store and through
// psql, as an operator runs it.
func TestReconcileFindsNothingOnASoundLedger(t *testing.T) {
	s, url := openFresh(t, Options{})
	if found, err := s.Reconcile(t.Context()); err != nil || len(found) > 0 {
		t.Fatalf("empty ledger: %v, %v", found, err)
	}
	busyLedger(t, s)
	sound(t, s)

	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Fatalf("psql is part of the postgresql package: %v", err)
	}
	file := filepath.Join(t.TempDir(), "reconcile.sql")
	if err := os.WriteFile(file, []byte(ReconcileSQL), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), psql, url, "--no-psqlrc", "--tuples-only", "--no-align", "-v", "ON_ERROR_STOP=1", "-f", file).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Fatalf("psql -f reconcile.sql: %v\n%s", err, out)
	}
}

// TestReconcileFlagsCorruption: each corruption, made in a transaction the
// test rolls back, is flagged by the rule it breaks. Corruptions a CHECK
// constraint would refuse are made after dropping it (in the same
// transaction).
func TestReconcileFlagsCorruption(t *testing.T) {
	s, _ := openFresh(t, Options{})
	b := busyLedger(t, s)
	for _, c := range []struct {
		name string
		sql  []string
		args []any
		want string
	}{
		{"settled without usage", []string{"UPDATE accounts SET settled = settled - 5, top_up_left = top_up_left + 5 WHERE id = 'org'"}, nil, "settled vs usage"},
		{"usage totals lost", []string{"DELETE FROM usage_totals WHERE account = 'agent'"}, nil, "settled vs usage"},
		{"outstanding no lease holds", []string{"UPDATE accounts SET outstanding = outstanding + 7, top_up_left = top_up_left - 7 WHERE id = 'org'"}, nil, "L2 outstanding"},
		{"loss no lease forfeited", []string{"UPDATE accounts SET loss = loss + 2, top_up_left = top_up_left - 2 WHERE id = 'agent'"}, nil, "L3 loss"},
		{"lease usage never ingested", []string{"UPDATE leases SET used = used + 1 WHERE id = $1"}, []any{int64(b.active.ID)}, "lease usage"},
		{"a stranger funds a lease", []string{"UPDATE leases SET funders[1] = 'other' WHERE id = $1"}, []any{int64(b.active.ID)}, "L4 funder"},
		{"broken hierarchy", []string{"UPDATE accounts SET scope = 3 WHERE id = 'ws'"}, nil, "hierarchy"},
		{"not conserved", []string{"ALTER TABLE accounts DROP CONSTRAINT conserved",
			"UPDATE accounts SET settled = settled + 1 WHERE id = 'other'"}, nil, "L1 conservation"},
		{"a debt beside a balance", []string{"ALTER TABLE accounts DROP CONSTRAINT no_balance_beside_debt",
			"UPDATE accounts SET overage = overage + 1, top_up_left = top_up_left + 1 WHERE id = 'other'"}, nil, "L1 debt beside balance"},
		{"allowance above the budget", []string{"ALTER TABLE accounts DROP CONSTRAINT allowance_within_budget",
			"UPDATE accounts SET allowance_left = allowance_left + 1, deposited = deposited + 1 WHERE id = 'org'"}, nil, "L5 allowance"},
		{"spent more than granted", []string{"ALTER TABLE leases DROP CONSTRAINT bounded_spend",
			"UPDATE leases SET credited = granted WHERE id = $1"}, []any{int64(b.released.ID)}, "L4 bounded spend"},
		{"a funder paid less", []string{"ALTER TABLE leases DROP CONSTRAINT funders_pay_the_grant",
			"UPDATE leases SET funded_top_up[1] = funded_top_up[1] - 1 WHERE id = $1"}, []any{int64(b.active.ID)}, "L4 funding"},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			tx, err := s.pool.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(t.Context())
			for _, q := range c.sql {
				args := c.args
				if !strings.Contains(q, "$1") {
					args = nil
				}
				if _, err := tx.Exec(t.Context(), q, args...); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			found, err := reconcile(t.Context(), tx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(rules(found), c.want) {
				t.Fatalf("found %v, want a %q finding", found, c.want)
			}
		})
	}
	sound(t, s) // every corruption was rolled back
}

// TestCheckRunsTheReconciliation: a corruption only the reconciliation
// query sees (Settled no longer matches the usage ingested, while every
// row and lease total is consistent) fails Check.
func TestCheckRunsTheReconciliation(t *testing.T) {
	s, _ := openFresh(t, Options{})
	busyLedger(t, s)
	if _, err := s.pool.Exec(t.Context(), "UPDATE accounts SET settled = settled + 4, top_up_left = top_up_left - 4 WHERE id = 'org'"); err != nil {
		t.Fatal(err)
	}
	err := s.Check(t.Context())
	if !errors.Is(err, ledger.ErrNotConserved) || !strings.Contains(err.Error(), "settled vs usage") {
		t.Fatalf("check of a corrupted ledger: %v", err)
	}
}

// TestConstraintsRefuseBrokenRows: what one row can show broken, the
// database refuses to store, whoever writes it.
func TestConstraintsRefuseBrokenRows(t *testing.T) {
	s, _ := openFresh(t, Options{})
	b := busyLedger(t, s)
	for _, c := range []struct {
		sql        string
		constraint string
	}{
		{"UPDATE accounts SET settled = settled + 1 WHERE id = 'org'", "conserved"},
		{"UPDATE accounts SET top_up_left = -1, deposited = deposited - top_up_left - 1 WHERE id = 'other'", "accounts_top_up_left_check"},
		{"UPDATE accounts SET allowance_left = budget_allowance + 1, deposited = deposited + 1 + budget_allowance - allowance_left WHERE id = 'org'", "allowance_within_budget"},
		{"UPDATE accounts SET top_up_left = top_up_left + 1, deposited = deposited + 1 WHERE id = 'ws'", "unmetered_holds_no_money"},
		{"UPDATE accounts SET overage = overage + 1, top_up_left = top_up_left + 1 WHERE id = 'other'", "no_balance_beside_debt"},
		{"UPDATE accounts SET repaid = -1 WHERE id = 'other'", "accounts_repaid_check"},
		{"UPDATE leases SET holder = repeat('n', 257) WHERE id = $1", "leases_holder_check"},
		{"UPDATE leases SET used = granted + 1 WHERE id = $1", "bounded_spend"},
		{"UPDATE leases SET funded_top_up[1] = funded_top_up[1] + 1 WHERE id = $1", "funders_pay_the_grant"},
		{"UPDATE leases SET token = 1 WHERE id = $1", "one_lease_per_token"},
	} {
		var args []any
		if strings.Contains(c.sql, "$1") {
			args = []any{int64(b.released.ID)}
		}
		_, err := s.pool.Exec(t.Context(), c.sql, args...)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.ConstraintName != c.constraint {
			t.Errorf("%s: %v, want a violation of %s", c.sql, err, c.constraint)
		}
	}
	sound(t, s)
}

// TestAmountsBeyondBigintAreOverflow: PostgreSQL holds 2^63-1 units per
// term; a change that would go beyond is ErrOverflow and changes nothing.
func TestAmountsBeyondBigintAreOverflow(t *testing.T) {
	s, _ := openFresh(t, Options{})
	mustCreate(t, s, "org", "")
	_, _, err := s.Deposit(t.Context(), "org", 1<<63, "big", t0)
	if !errors.Is(err, ledger.ErrOverflow) {
		t.Fatalf("deposit of 2^63: %v", err)
	}
	_, err = s.Ingest(t.Context(), []ledger.Usage{{ID: eventID(1), Account: "org", Source: ledger.UsageOverage, Units: 1 << 63}}, t0)
	if !errors.Is(err, ledger.ErrOverflow) {
		t.Fatalf("overage of 2^63: %v", err)
	}
	a, err := s.Account(t.Context(), "org")
	if err != nil || a.Deposited != 0 || a.Overage != 0 {
		t.Fatalf("after the overflows: %+v, %v", a, err)
	}
	// Neither the deposit key nor the event id was recorded.
	if _, dup, err := s.Deposit(t.Context(), "org", 5, "big", t0); dup || err != nil {
		t.Fatalf("deposit with the failed key: dup %v, %v", dup, err)
	}
	res, err := s.Ingest(t.Context(), []ledger.Usage{{ID: eventID(1), Account: "org", Source: ledger.UsagePostPaid, Units: 1}}, t0)
	if err != nil || res[0] != ledger.Accepted {
		t.Fatalf("the failed event's id again: %v, %v", res, err)
	}
	sound(t, s)
}

// TestBytesKeepNilApartFromEmpty: a policy or an audit field set to empty
// reads back empty, not absent, as boltstore keeps it.
func TestBytesKeepNilApartFromEmpty(t *testing.T) {
	s, _ := openFresh(t, Options{})
	mustCreate(t, s, "org", "")
	if a, _ := s.Account(t.Context(), "org"); a.Policy != nil {
		t.Fatalf("a new account's policy %q", a.Policy)
	}
	for _, p := range [][]byte{[]byte(`{}`), {}} {
		if _, err := s.SetPolicy(t.Context(), "org", p); err != nil {
			t.Fatal(err)
		}
	}
	if a, _ := s.Account(t.Context(), "org"); a.Policy == nil || len(a.Policy) != 0 {
		t.Fatalf("an empty policy reads back as %#v", a.Policy)
	}
}

// TestTextRefusesWhatPostgreSQLCannotHold: ids, names and holders with NUL
// bytes or invalid UTF-8 are ErrInvalid, not a database error.
func TestTextRefusesWhatPostgreSQLCannotHold(t *testing.T) {
	s, _ := openFresh(t, Options{})
	mustCreate(t, s, "org", "")
	for _, id := range []string{"a\x00b", "\xff"} {
		if err := s.AddKey(t.Context(), ledger.Key{ID: id, Account: "org"}); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("key id %q: %v", id, err)
		}
		if err := s.AddPlatformToken(t.Context(), ledger.PlatformToken{ID: id}); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("token id %q: %v", id, err)
		}
		if _, _, err := s.Deposit(t.Context(), "org", 1, id, t0); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("deposit key %q: %v", id, err)
		}
		if _, err := s.Audit(t.Context(), ledger.AuditRecord{Target: id}); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("audit target %q: %v", id, err)
		}
		if err := s.AddKey(t.Context(), ledger.Key{ID: "k", Account: "org", Name: id}); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("key name %q: %v", id, err)
		}
		if err := s.AddAdminToken(t.Context(), ledger.AdminToken{ID: id, Role: ledger.RoleAdmin}); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("admin token id %q: %v", id, err)
		}
		if err := s.AddAdminToken(t.Context(), ledger.AdminToken{ID: "atk", Name: id, Role: ledger.RoleAdmin}); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("admin token name %q: %v", id, err)
		}
		if _, _, err := s.Acquire(t.Context(), "org", id, 1, 0, hour, t0); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("lease holder %q: %v", id, err)
		}
	}
	// Labels are bounded like ids; a holder of 256 bytes is stored whole.
	long := strings.Repeat("n", maxNameLen)
	if _, _, err := s.Acquire(t.Context(), "org", long+"n", 1, 0, hour, t0); !errors.Is(err, ledger.ErrInvalid) {
		t.Errorf("a holder of %d bytes: %v", len(long)+1, err)
	}
	mustDeposit(t, s, "org", 10)
	if l, _, err := s.Acquire(t.Context(), "org", long, 1, 0, hour, t0); err != nil || l.Holder != long {
		t.Errorf("a holder of %d bytes: %+v, %v", len(long), l, err)
	}
	if ls, err := s.Leases(t.Context(), true); err != nil || len(ls) != 1 || ls[0].Holder != long {
		t.Errorf("the stored holder: %+v, %v", ls, err)
	}
}

// TestTheDocsGiveTheQueryVerbatim: docs/POSTGRES.md shows operators the
// query the tests run.
func TestTheDocsGiveTheQueryVerbatim(t *testing.T) {
	doc, err := os.ReadFile("../../docs/POSTGRES.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```sql\n"+ReconcileSQL+"```") {
		t.Fatal("docs/POSTGRES.md does not contain reconcile.sql verbatim")
	}
}
