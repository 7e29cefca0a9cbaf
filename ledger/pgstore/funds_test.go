package pgstore

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// TestFundsAreAnnouncedWhenWhatAnAccountCanSpendMoves: settled usage, a
// post-paid report, a forfeit and a deposit announce the highest account
// whose funding moved; a grant, an extension and a release announce
// nothing. A (re)connection reports everything, since what was announced
// while nobody listened is lost.
func TestFundsAreAnnouncedWhenWhatAnAccountCanSpendMoves(t *testing.T) {
	s, _ := openFresh(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	mustCreate(t, s, "org", "")
	mustCreate(t, s, "ws", "org")
	mustCreate(t, s, "agent", "ws")
	mustCreate(t, s, "marker", "")
	mustDeposit(t, s, "org", 1000)
	mustDeposit(t, s, "ws", 1000)
	mustDeposit(t, s, "agent", 1000)

	heard := make(chan string, 100)
	done := make(chan error, 1)
	go func() {
		done <- s.FollowFunds(ctx, func(ids []core.AccountID, all bool) error {
			if all {
				heard <- "*"
			} else {
				heard <- strings.Join(stringsOf(ids), " ")
			}
			return nil
		})
	}()
	next := func(want string) {
		t.Helper()
		select {
		case got := <-heard:
			if got != want {
				t.Fatalf("heard %q, want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("heard nothing, want %q", want)
		}
	}
	// marker: a deposit on an unrelated account, to show that what came
	// before it announced nothing.
	marker := func(units core.CostUnits) { mustDeposit(t, s, "marker", units); next("marker") }
	next("*")

	l, _, err := s.Acquire(ctx, "agent", "node-a", 100, 0, hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	l, _, err = s.Extend(ctx, l.ID, l.Token, 50, 0, hour, t0+1)
	if err != nil {
		t.Fatal(err)
	}
	marker(1)

	// 30 units of a thousand: no other node decides differently on it
	// (ledger.WorthAnnouncing).
	st := ledger.Settlement{Node: "node-a", From: 0, To: 3, Events: 3,
		Leases: []ledger.LeaseUsage{{Account: "agent", LeaseID: l.ID, Token: l.Token, Units: 30}}}
	if _, err := s.Settle(ctx, st, t0+2); err != nil {
		t.Fatal(err)
	}
	marker(2)
	// 100 more: 870 left, a fall another node must hear of.
	st = ledger.Settlement{Node: "node-a", From: 3, To: 6, Events: 3,
		Leases: []ledger.LeaseUsage{{Account: "agent", LeaseID: l.ID, Token: l.Token, Units: 100}}}
	if _, err := s.Settle(ctx, st, t0+2); err != nil {
		t.Fatal(err)
	}
	next("org")                                        // agent, ws and org moved; org's subtree covers them
	if _, err := s.Settle(ctx, st, t0+2); err != nil { // replayed: nothing moves
		t.Fatal(err)
	}
	marker(3)

	if err := s.Release(ctx, l.ID, l.Token, 20, t0+3); err != nil { // all it did not settle
		t.Fatal(err)
	}
	marker(4)

	if _, err := s.Ingest(ctx, []ledger.Usage{{ID: eventID(7), Account: "agent", Source: ledger.UsagePostPaid, Units: 100}}, t0+4); err != nil {
		t.Fatal(err)
	}
	next("org")

	l2, _, err := s.Acquire(ctx, "agent", "node-b", 100, 0, minute, t0+5)
	if err != nil {
		t.Fatal(err)
	}
	_ = l2
	if n, err := s.Reclaim(ctx, t0+5+hour, 0, 8); n != 1 || err != nil {
		t.Fatalf("reclaim: %d, %v", n, err)
	}
	next("org") // the forfeit's loss moved what the chain can spend

	if n := endConnections(t, s, "tollgated-funds"); n != 1 {
		t.Fatalf("ended %d listener connections, want 1", n)
	}
	next("*")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("FollowFunds returned %v after its context ended", err)
	}
}

func stringsOf(ids []core.AccountID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = string(id)
	}
	slices.Sort(out)
	return out
}

// TestFundsPayloads: an announcement too long for one notification says
// everything moved, and a payload this build cannot read is read as that.
func TestFundsPayloads(t *testing.T) {
	for _, c := range []struct {
		payload string
		ids     []core.AccountID
		all     bool
	}{
		{"a b.c", []core.AccountID{"a", "b.c"}, false},
		{"*", nil, true},
		{"a BAD", nil, true},
		{"", nil, false},
	} {
		ids, all := parseFunds(c.payload)
		if !slices.Equal(ids, c.ids) || all != c.all {
			t.Errorf("parseFunds(%q) = %v, %v; want %v, %v", c.payload, ids, all, c.ids, c.all)
		}
	}
	var funds []core.AccountID
	for i := range 1000 {
		funds = append(funds, core.AccountID(strings.Repeat("a", 20)+string(rune('a'+i%26))+string(rune('a'+i/26%26))))
	}
	if p := fundsPayload(funds); p != fundsEverything {
		t.Fatalf("a payload over %d bytes was %d bytes, not %q", maxFundsPayload, len(p), fundsEverything)
	}
	funds = funds[:3]
	if p, want := fundsPayload(funds), string(funds[0]+" "+funds[1]+" "+funds[2]); p != want {
		t.Fatalf("payload %q, want %q", p, want)
	}
}

// TestEvidenceBelowAgreesWithEvidence: the one-statement read of whole
// subtrees gives each account below the named ones the evidence Evidence
// gives it, and nothing for accounts outside them.
func TestEvidenceBelowAgreesWithEvidence(t *testing.T) {
	s, _ := openFresh(t, Options{})
	ctx := t.Context()
	for _, a := range []struct {
		id, parent core.AccountID
		unmetered  bool
	}{
		{"org", "", false}, {"ws1", "org", false}, {"ws2", "org", true}, {"a1", "ws1", false}, {"a2", "ws1", false},
		{"a3", "ws2", false}, {"a4", "ws2", true}, {"lone", "", false},
	} {
		mustCreate(t, s, a.id, a.parent, a.unmetered)
	}
	for id, units := range map[core.AccountID]core.CostUnits{"org": 900, "ws1": 300, "a1": 40, "a2": 500, "a3": 70, "lone": 5} {
		mustDeposit(t, s, id, units)
	}
	if _, _, err := s.Acquire(ctx, "a2", "node-a", 100, 0, hour, t0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ids  []core.AccountID
		want []core.AccountID
	}{
		{[]core.AccountID{"org"}, []core.AccountID{"a1", "a2", "a3", "a4", "org", "ws1", "ws2"}},
		{[]core.AccountID{"ws1"}, []core.AccountID{"a1", "a2", "ws1"}},
		{[]core.AccountID{"a3", "lone"}, []core.AccountID{"a3", "lone"}},
		{[]core.AccountID{"ws2"}, []core.AccountID{"a3", "a4", "ws2"}}, // unmetered: the org's evidence
		{[]core.AccountID{"nobody", "BAD"}, nil},
	} {
		got, err := s.EvidenceBelow(ctx, c.ids)
		if err != nil {
			t.Fatal(err)
		}
		if ids := slices.Sorted(maps.Keys(got)); !slices.Equal(ids, c.want) {
			t.Fatalf("EvidenceBelow(%v) covers %v, want %v", c.ids, ids, c.want)
		}
		for id, ev := range got {
			want, err := s.Evidence(ctx, id)
			if err != nil || ev != want {
				t.Fatalf("EvidenceBelow(%v)[%s] = %+v, Evidence says %+v (%v)", c.ids, id, ev, want, err)
			}
		}
	}
}
