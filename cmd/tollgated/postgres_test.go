//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/internal/pgtest"
	"github.com/tollgated/tollgated/ledger/pgstore"
)

// TestDaemonOnPostgreSQL: the real daemon with --ledger postgres://…
// admits checks under load, bills them into PostgreSQL, and on SIGTERM
// (under load) bills everything and hands its leases back: afterwards the
// reconciliation query finds nothing, every acknowledged request is billed
// once, nothing is outstanding or forfeited, and no bbolt file was made.
func TestDaemonOnPostgreSQL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	t.Parallel()
	url := pgtest.Database(t)
	dir := t.TempDir()
	const funded, price = 100_000, 10
	p := startProc(t, dir, "--ledger", url, "--usage-history", "1000000")
	key := p.provision("pg", funded, price)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := load(ctx, p.listen, key, 4)
	a.awaitAcked(t, 500)
	p.stop()
	cancel()
	a.wait()
	if len(a.units) == 0 {
		t.Fatalf("nothing admitted (denials %v)", a.denied)
	}

	s, err := pgstore.Open(t.Context(), url, pgstore.Options{UsageHistory: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if found, err := s.Reconcile(t.Context()); err != nil || len(found) > 0 {
		t.Fatalf("reconciliation: %v, %v", found, err)
	}
	if err := s.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	billed := usageByID(t, s, "pg")
	for id, units := range a.units {
		if u, ok := billed[id]; !ok || uint64(u.Units) != units {
			t.Fatalf("acknowledged request %s (%d units) billed as %+v (found %v)", id, units, u, ok)
		}
	}
	var sum core.CostUnits
	for _, u := range billed {
		sum += u.Units
	}
	acct, err := s.Account(t.Context(), "pg")
	if err != nil {
		t.Fatal(err)
	}
	if acct.Settled != sum || acct.Outstanding != 0 || acct.Loss != 0 || acct.Balance()+acct.Settled != acct.Deposited {
		t.Fatalf("after SIGTERM: %+v; usage billed sums to %d", acct, sum)
	}
	if active, err := s.Leases(t.Context(), true); err != nil || len(active) != 0 {
		t.Fatalf("active leases after SIGTERM: %v, %v", active, err)
	}
	if _, err := os.Stat(filepath.Join(dir, ledgerFile)); !os.IsNotExist(err) {
		t.Fatalf("a ledger file was made beside a PostgreSQL ledger: %v", err)
	}
	t.Logf("%d acknowledged, %d billed (%d units) into PostgreSQL", len(a.units), len(billed), sum)
}

// TestDaemonOnPostgreSQLRecoversItsOwnLeases: a node killed with SIGKILL
// under load comes back on the same data directory (so as the same
// --node-id) and, before it serves, bills its spool and releases the
// leases it held in the shared ledger: nothing is forfeited. A lease
// another node holds on the same account stays that node's.
func TestDaemonOnPostgreSQLRecoversItsOwnLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills real processes")
	}
	t.Parallel()
	url := pgtest.Database(t)
	dir := t.TempDir()
	const funded, price = 100_000, 10
	flags := []string{"--ledger", url, "--node-id", "node-a", "--usage-history", "1000000"}
	p := startProc(t, dir, flags...)
	key := p.provision("pg", funded, price)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := load(ctx, p.listen, key, 4)
	a.awaitAcked(t, 500)
	p.kill9()
	cancel()
	a.wait()
	if len(a.units) == 0 {
		t.Fatalf("nothing admitted (denials %v)", a.denied)
	}

	s, err := pgstore.Open(t.Context(), url, pgstore.Options{UsageHistory: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	held, err := s.Leases(t.Context(), true)
	if err != nil || len(held) == 0 {
		t.Fatalf("the killed node held no lease: %v, %v", held, err)
	}
	for _, l := range held {
		if l.Holder != "node-a" {
			t.Fatalf("a lease of the killed node names %q", l.Holder)
		}
	}
	other, _, err := s.Acquire(t.Context(), "pg", "node-b", 50, 0, int64(time.Hour), time.Now().UnixNano())
	if err != nil {
		t.Fatal(err)
	}

	p = startProc(t, dir, flags...)
	p.stop()
	if !strings.Contains(p.all.String(), "recovered the leases this node held") {
		t.Fatalf("no recovery logged:\n%s", p.all.String())
	}
	if found, err := s.Reconcile(t.Context()); err != nil || len(found) > 0 {
		t.Fatalf("reconciliation: %v, %v", found, err)
	}
	if err := s.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	billed := usageByID(t, s, "pg")
	for id, units := range a.units {
		if u, ok := billed[id]; !ok || uint64(u.Units) != units {
			t.Fatalf("acknowledged request %s (%d units) billed as %+v (found %v)", id, units, u, ok)
		}
	}
	active, err := s.Leases(t.Context(), true)
	if err != nil || len(active) != 1 || active[0] != other {
		t.Fatalf("active leases after the restart: %+v, %v; want only node-b's %+v", active, err, other)
	}
	acct, err := s.Account(t.Context(), "pg")
	if err != nil {
		t.Fatal(err)
	}
	if acct.Loss != 0 || acct.Outstanding != other.Granted || acct.Balance()+acct.Settled+acct.Outstanding != acct.Deposited {
		t.Fatalf("after recovery: %+v; node-b holds %d", acct, other.Granted)
	}
	t.Logf("%d acknowledged before the kill; %d leases of node-a recovered, node-b's kept", len(a.units), len(held))
}

// TestLedgerFlags: --ledger and TOLLGATED_LEDGER name a PostgreSQL URL,
// --ledger-file (TOLLGATED_LEDGER_FILE) a file holding one; nothing means
// the embedded file.
func TestLedgerFlags(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	parse := func(args []string, e map[string]string) (config, error) {
		return parseConfig(args, env(e), &bytes.Buffer{})
	}
	c, err := parse(nil, nil)
	if loc, lerr := ledgerLocation(c); err != nil || lerr != nil || loc != "" {
		t.Fatalf("default: %q, %v, %v", loc, err, lerr)
	}
	c, err = parse(nil, map[string]string{"TOLLGATED_LEDGER": "postgres://u@db.example/ledger"})
	if loc, _ := ledgerLocation(c); err != nil || loc != "postgres://u@db.example/ledger" {
		t.Fatalf("TOLLGATED_LEDGER: %q, %v", loc, err)
	}
	file := filepath.Join(t.TempDir(), "ledger-url")
	if err := os.WriteFile(file, []byte("postgresql://u:secret@db.example/ledger\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = parse(nil, map[string]string{"TOLLGATED_LEDGER_FILE": file})
	if loc, lerr := ledgerLocation(c); err != nil || lerr != nil || loc != "postgresql://u:secret@db.example/ledger" {
		t.Fatalf("TOLLGATED_LEDGER_FILE: %q, %v, %v", loc, err, lerr)
	}
	for _, bad := range [][]string{
		{"--ledger", "/var/lib/ledger.db"},
		{"--ledger", "postgres://a/b", "--ledger-file", file},
	} {
		if _, err := parse(bad, nil); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if err := os.WriteFile(file, []byte("mysql://nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ = parse([]string{"--ledger-file", file}, nil)
	if _, err := ledgerLocation(c); err == nil {
		t.Fatal("a file without a PostgreSQL URL accepted")
	}
}
