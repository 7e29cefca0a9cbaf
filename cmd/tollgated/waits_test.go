//go:build linux

package main

// What the real-daemon tests wait for, stated as conditions on what the
// daemon shows (its answers, its admin API, its /metrics): internal/await
// does the polling, so no test here sleeps to let something happen.

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgated/tollgated/internal/await"
)

// funds is account id's funds as the admin API reports them.
func (p *proc) funds(id string) map[string]float64 {
	p.t.Helper()
	return fundsOf(p.adminCall("GET", "/v1/accounts/"+id, nil, http.StatusOK))
}

// awaitFunds waits until account id's funds satisfy cond and returns them.
func (p *proc) awaitFunds(id, what string, cond func(f map[string]float64) bool) map[string]float64 {
	p.t.Helper()
	return await.Value(p.t, "account "+id+": "+what, func() (map[string]float64, bool) {
		f := p.funds(id)
		return f, cond(f)
	})
}

// awaitLeasesBack waits until no unit of account id is out in a lease:
// every lease the node held for it has been handed back (or forfeited)
// at the ledger, so no shard holds a slice of it either.
func (p *proc) awaitLeasesBack(id string) map[string]float64 {
	p.t.Helper()
	return p.awaitFunds(id, "nothing in leases", func(f map[string]float64) bool { return f["in_leases"] == 0 })
}

// awaitStatus sends checks for key until one is answered want.
func awaitStatus(t *testing.T, p *proc, key string, want int) {
	t.Helper()
	var st int
	var body string
	if !await.Poll(await.Default, func() bool { st, body = checkOnce(t, p, key); return st == want }) {
		t.Fatalf("%d %s, want %d", st, body, want)
	}
}

// awaitAcked waits until a load has seen at least n requests acknowledged:
// the daemon is under load, with leases out and usage in its spool.
func (a *acked) awaitAcked(t *testing.T, n int) {
	t.Helper()
	await.True(t, strconv.Itoa(n)+" acknowledged requests", func() bool { return a.count() >= n })
}

// awaitAdmission asks the daemon's GET /v1/admission for agent until its
// answer contains want.
func awaitAdmission(t *testing.T, p *proc, tok, agent, want string) {
	t.Helper()
	var got string
	if !await.Poll(await.Default, func() bool { got = p.admission(tok, agent); return strings.Contains(got, want) }) {
		t.Fatalf("admission of %s: %s, want %s", agent, got, want)
	}
}

// awaitSpoolBilled waits until the daemon has exported every usage record
// its spool holds to the ledger.
func (p *proc) awaitSpoolBilled() {
	p.t.Helper()
	await.True(p.t, "spool lag 0 on "+p.adm, func() bool { return p.metric("tollgated_spool_lag_events") == 0 })
}
