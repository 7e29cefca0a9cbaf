package pgstore

import (
	"context"
	"errors"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/internal/ledgertest"
	"github.com/tollgated/tollgated/internal/pgtest"
	"github.com/tollgated/tollgated/ledger"
)

// TestFilteredPagesReadABoundedNumberOfAccounts: ledgertest's
// BoundedAccountPages, on more accounts than a page reads.
func TestFilteredPagesReadABoundedNumberOfAccounts(t *testing.T) {
	s, _ := openFresh(t, Options{})
	n := ledger.MaxPageScan + ledger.MaxPageScan/2
	_, err := s.pool.Exec(t.Context(), `INSERT INTO accounts (id, parent, capacity, unmetered, scope, status, policy, policy_generation,
			budget_allowance, budget_period, deposited, overage, allowance_left, top_up_left, outstanding, settled,
			loss, expired, repaid, period_start, period_end, next_token)
		SELECT format('acct-%s', lpad(i::text, 5, '0')), NULL, 0, false, 3, CASE WHEN i = $2 THEN 1 ELSE 0 END, NULL, 1,
			0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1
		FROM generate_series(0, $1 - 1) AS i`, n, n-2)
	if err != nil {
		t.Fatal(err)
	}
	ledgertest.BoundedAccountPages(t, s, n)
}

// TestCursorsAtTheEdges: a lease cursor past the largest id PostgreSQL
// stores ends the listing; malformed cursors are ErrInvalid.
func TestCursorsAtTheEdges(t *testing.T) {
	s, _ := openFresh(t, Options{})
	ctx := t.Context()
	mustCreate(t, s, "org", "")
	mustDeposit(t, s, "org", 10)
	if _, _, err := s.Acquire(ctx, "org", "node-a", 5, 1, hour, t0); err != nil {
		t.Fatal(err)
	}
	for _, active := range []bool{false, true} {
		for _, after := range []string{"9223372036854775807", "18446744073709551615"} {
			got, next, err := s.ListLeases(ctx, active, ledger.Page{After: after, Limit: 10})
			if err != nil || len(got) != 0 || next != "" {
				t.Fatalf("active %v after %s: %+v %q %v", active, after, got, next, err)
			}
		}
		for _, after := range []string{"0", "-1", "x", "18446744073709551616"} {
			if _, _, err := s.ListLeases(ctx, active, ledger.Page{After: after, Limit: 10}); !errors.Is(err, ledger.ErrInvalid) {
				t.Fatalf("lease cursor %q: %v", after, err)
			}
		}
	}
	if _, _, err := s.ListUsage(ctx, "org", ledger.Page{After: "x", Limit: 10}); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("usage cursor: %v", err)
	}
	if got, next, err := s.ListUsage(ctx, "org", ledger.Page{After: "18446744073709551615", Limit: 10}); err != nil || len(got) != 0 || next != "" {
		t.Fatalf("usage below the largest cursor: %+v %q %v", got, next, err)
	}
}

// TestIdsListInByteOrderWhateverTheLocale: on a database whose default
// collation is not byte order (ICU's en-US sorts "ws_2" before "ws-1"),
// accounts and keys still list, and page, in byte order, as the bbolt
// backend lists them.
func TestIdsListInByteOrderWhateverTheLocale(t *testing.T) {
	s := openICU(t)
	ctx := t.Context()
	ids := []core.AccountID{"ws-1", "ws.0", "ws1", "ws_2", "wsa"} // byte order
	for _, id := range []core.AccountID{"wsa", "ws_2", "ws1", "ws.0", "ws-1"} {
		mustCreate(t, s, id, "")
		if err := s.AddKey(ctx, ledger.Key{ID: string(id), Account: "wsa", Digest: [32]byte{1}, CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.Accounts(ctx)
	if err != nil || !reflect.DeepEqual(accountIDsOf(all), ids) {
		t.Fatalf("accounts %v, %v; want %v", accountIDsOf(all), err, ids)
	}
	var paged []core.AccountID
	for p := (ledger.Page{Limit: 1}); ; {
		page, next, err := s.ListAccounts(ctx, ledger.AccountFilter{}, p)
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, accountIDsOf(page)...)
		if next == "" {
			break
		}
		p.After = next
	}
	if !reflect.DeepEqual(paged, ids) {
		t.Fatalf("paged accounts %v, want %v", paged, ids)
	}
	keys, err := s.Keys(ctx, "wsa")
	if err != nil || len(keys) != len(ids) {
		t.Fatalf("keys %+v, %v", keys, err)
	}
	for i, k := range keys {
		if k.ID != string(ids[i]) {
			t.Fatalf("key %d is %s, want %s", i, k.ID, ids[i])
		}
	}
}

func accountIDsOf(accts []ledger.Account) []core.AccountID {
	var out []core.AccountID
	for _, a := range accts {
		out = append(out, a.ID)
	}
	return out
}

// openICU opens a store on a new database whose default collation is
// ICU's en-US, made beside the test's own and dropped after it.
func openICU(t *testing.T) *Store {
	t.Helper()
	base := pgtest.Database(t)
	conn := connect(t, base)
	name := "icu_" + conn.Config().Database
	if _, err := conn.Exec(t.Context(), "CREATE DATABASE "+name+" LOCALE_PROVIDER icu ICU_LOCALE 'en-US' TEMPLATE template0"); err != nil {
		t.Fatalf("a database collated by ICU: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	s, err := Open(t.Context(), u.String(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var collation string
	if err := s.pool.QueryRow(t.Context(), "SELECT daticulocale FROM pg_database WHERE datname = current_database()").Scan(&collation); err != nil || collation != "en-US" {
		t.Fatalf("the database's ICU locale: %q, %v", collation, err)
	}
	return s
}

// TestIdsNoAccountCanHaveAreNotFound: an account id PostgreSQL's text
// cannot hold (a NUL byte, invalid UTF-8) is an unknown account, as it is
// to boltstore, not a database error.
func TestIdsNoAccountCanHaveAreNotFound(t *testing.T) {
	s, _ := openFresh(t, Options{})
	ctx := t.Context()
	for _, id := range []core.AccountID{"a\x00b", "\xff"} {
		calls := map[string]error{}
		_, calls["Account"] = s.Account(ctx, id)
		_, calls["Children"] = s.Children(ctx, id)
		_, calls["Evidence"] = s.Evidence(ctx, id)
		_, calls["UsageOf"] = s.UsageOf(ctx, id, 1)
		_, _, calls["ListUsage"] = s.ListUsage(ctx, id, ledger.Page{Limit: 1})
		_, _, calls["ListAccounts"] = s.ListAccounts(ctx, ledger.AccountFilter{Parent: id}, ledger.Page{Limit: 1})
		_, calls["SetStatus"] = s.SetStatus(ctx, id, core.StatusSuspended)
		_, _, calls["Deposit"] = s.Deposit(ctx, id, 1, "d", t0)
		_, _, calls["Acquire"] = s.Acquire(ctx, id, "node-a", 1, 0, hour, t0)
		calls["AddKey"] = s.AddKey(ctx, ledger.Key{ID: "k", Account: id})
		for call, err := range calls {
			want := ledger.ErrNotFound
			if call == "AddKey" { // the key's account id is checked first
				want = ledger.ErrInvalid
			}
			if !errors.Is(err, want) {
				t.Errorf("%s(%q): %v, want %v", call, id, err, want)
			}
		}
		if keys, err := s.Keys(ctx, id); err != nil || len(keys) != 0 {
			t.Errorf("Keys(%q): %v, %v", id, keys, err)
		}
	}
}
