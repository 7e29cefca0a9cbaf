//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/spool"
)

// TestALostNodeIDFileIsRefusedAndBillsNothingTwice: a node is killed under
// load and its node-id file is lost (a restore or a copy without it).
// Starting it again must not pick a new id — that billed its spool a
// second time, under a new export mark — but refuse, naming the id its
// spool and ledger belong to and the way out, and change nothing. Started
// the way the refusal says, it bills every acknowledged request once.
func TestALostNodeIDFileIsRefusedAndBillsNothingTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills real processes")
	}
	t.Parallel()
	dir := t.TempDir()
	flags := []string{"--usage-history", "1000000"}
	p := startProc(t, dir, flags...)
	key := p.provision("acme", 1<<40, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := load(ctx, p.listen, key, 8)
	a.awaitAcked(t, 500)
	p.kill9()
	a.wait()
	if len(a.units) == 0 {
		t.Fatalf("nothing acknowledged before the kill (%v)", a.denied)
	}
	node := nodeOf(t, dir)
	if err := os.Remove(filepath.Join(dir, nodeIDFile)); err != nil {
		t.Fatal(err)
	}
	code, stderr := runFailingProc(t, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--data-dir", dir, "--shards", "2")
	if code != 1 || !strings.Contains(stderr, "no node-id file") || !strings.Contains(stderr, "--node-id "+node) ||
		!strings.Contains(stderr, "docs/RUNBOOK.md") {
		t.Fatalf("start without its node-id file: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, nodeIDFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused start wrote a node-id file: %v", err)
	}
	t.Logf("refused as it should be:\n%s", lastLine(stderr))

	p = startProc(t, dir, append(flags, "--node-id", node)...)
	p.stop()
	if got := nodeOf(t, dir); got != node {
		t.Fatalf("node-id file after the way out: %q, want %q", got, node)
	}
	s := openLedger(t, dir)
	if err := s.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	usage := usageByID(t, s, "acme") // fails on an event billed twice
	var billed core.CostUnits
	for _, u := range usage {
		billed += u.Units
	}
	for id, units := range a.units {
		if u, ok := usage[id]; !ok || uint64(u.Units) != units {
			t.Fatalf("acknowledged request %s (%d units) billed as %+v (found %v)", id, units, u, ok)
		}
	}
	acct, err := s.Account(t.Context(), "acme")
	if err != nil || acct.Settled != billed || acct.Loss != 0 || acct.Outstanding != 0 {
		t.Fatalf("account %+v (%v); %d units billed", acct, err, billed)
	}
	incs, err := s.Incarnations(t.Context())
	if err != nil || len(incs) != 1 || incs[0].Node != node || incs[0].Number != 1 {
		t.Fatalf("the ledger's nodes: %+v, %v; want only %s", incs, err, node)
	}
	t.Logf("%d acknowledged, %d billed once, %d units", len(a.units), len(usage), billed)
}

// TestSpoolTailCutAtBilledRecordsIsCountedExactly: a killed node's spool
// loses its last ten records to zeros, from the middle of the first of
// them to the end of the file, after the exporter had billed all of them
// (an open commit keeps them in the spool: it holds the release mark).
// The first start after it must succeed — recovery used to append the
// records that number the spool on to the ledger's mark before it
// replayed the spool, which refuses that ("Replay after Append") — and
// its WARN and metric must say ten records were cut, all of them billed
// before, where the tail alone shows one. Every acknowledged request is
// billed once. The open commit is not billed at its quote: journaled
// before records the ledger billed and the spool lost, it may have been
// closed by one of them, so billing its quote could bill it twice; the
// WARN names it, and the lease's remainder stays in loss with it, so
// nothing the cut records spent is spendable again.
func TestSpoolTailCutAtBilledRecordsIsCountedExactly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills real processes")
	}
	t.Parallel()
	dir := t.TempDir()
	flags := []string{"--usage-history", "1000000"}
	p := startProc(t, dir, flags...)
	key := p.provision("acme", 1<<40, 1)
	auth := "Bearer " + key
	st, _, body := httpCall(t, "POST", "http://"+p.listen+"/v1/admit", auth,
		[]byte(`{"permission":"chat","workload":[{"op":"requests","count":5}],"ttl_ms":600000}`))
	var adm struct{ Reservation string }
	if st != http.StatusOK || json.Unmarshal(body, &adm) != nil || adm.Reservation == "" {
		t.Fatalf("admit: %d %s", st, body)
	}
	if st, _, body := httpCall(t, "POST", "http://"+p.listen+"/v1/commit", auth, []byte(`{"reservation":"`+adm.Reservation+`"}`)); st != http.StatusOK {
		t.Fatalf("commit: %d %s", st, body)
	}
	stop := make(chan struct{})
	a := loadUntil(context.Background(), stop, p.listen, key, 4, 5*time.Second) // every request sent is answered
	a.awaitAcked(t, 500)
	close(stop)
	a.wait()
	// Every record is billed (the exporter's mark is the spool's end), and
	// none is released past the open commit.
	p.awaitSpoolBilled()
	if n := p.metric("tollgated_open_commits"); n != 1 {
		t.Fatalf("%v open commits, want 1", n)
	}
	p.kill9()
	rep, err := spool.Verify(filepath.Join(dir, spoolDir))
	if err != nil || !rep.Clean() {
		t.Fatalf("the killed daemon's spool: %+v, %v", rep, err)
	}
	last := rep.Segments[len(rep.Segments)-1].Path
	recs := segmentRecords(t, last)
	const cut = 10
	if len(recs) < cut || recs[len(recs)-cut].seq <= rep.Released+1 {
		t.Fatalf("%d records in %s, released up to %d: too few to cut %d billed ones", len(recs), last, rep.Released, cut)
	}
	victim := recs[len(recs)-cut]
	b, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	clear(b[victim.off+spool.HeaderSize+3:]) // the first cut record's header survives; nothing else does
	if err := os.WriteFile(last, b, 0o600); err != nil {
		t.Fatal(err)
	}

	p = startProc(t, dir, flags...)
	var warn map[string]any
	for _, line := range strings.Split(p.all.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["level"] == "warn" && strings.Contains(m["message"].(string), "usage spool") {
			if warn != nil {
				t.Fatalf("two spool warnings:\n%s", p.all.String())
			}
			warn = m
		}
	}
	if warn == nil || warn["records"] != float64(cut) || warn["billed"] != float64(cut) || warn["unbilled"] != 0.0 ||
		warn["first_seq"] != float64(victim.seq) || warn["offset"] != float64(victim.off) {
		t.Fatalf("warning %v; want %d records cut from seq %d at offset %d, all billed", warn, cut, victim.seq, victim.off)
	}
	if n := p.metric("tollgated_spool_recovery_dropped_records_total"); n != cut {
		t.Fatalf("tollgated_spool_recovery_dropped_records_total %v, want %d", n, cut)
	}
	if !strings.Contains(p.all.String(), `"commits":1,"units":5`) || strings.Contains(p.all.String(), `"open_commits_billed":1`) {
		t.Fatalf("the open commit, before the cut, was billed or not reported:\n%s", p.all.String())
	}
	if !strings.Contains(p.all.String(), "released with nothing returned") {
		t.Fatalf("the lease's remainder was not withheld:\n%s", p.all.String())
	}
	p.stop()
	if missing := billedExcept(t, dir, a, 0); missing != 0 {
		t.Fatalf("%d acknowledged requests not billed", missing)
	}
	s := openLedger(t, dir)
	usage := usageByID(t, s, "acme")
	quoted := 0
	for id, u := range usage {
		if _, acked := a.units[id]; !acked && u.Units == 5 {
			quoted++
		}
	}
	if len(usage) != len(a.units) || quoted != 0 {
		t.Fatalf("%d events billed for %d acknowledged checks (%d quotes of 5): want each check once, the open commit not at all", len(usage), len(a.units), quoted)
	}
	t.Logf("cut %d records from seq %d: %v", cut, victim.seq, warn["message"])
}
