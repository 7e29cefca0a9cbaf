package record

import (
	"testing"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

func TestUsageRecordRoundTrip(t *testing.T) {
	for _, u := range []ledger.Usage{
		{ID: [16]byte{1, 2, 3}, Account: "acme", Source: ledger.UsageLease, LeaseID: 7, Token: 3, Units: 1210, OccurredAt: 1_700_000_000e9},
		{ID: [16]byte{15: 9}, Account: "a", Source: ledger.UsageOverage, Units: core.MaxCostUnits, OccurredAt: -1},
		{Account: core.AccountID(string(make([]byte, 0, 64)) + "0123456789012345678901234567890123456789012345678901234567890123"), Source: ledger.UsagePostPaid, Units: 1},
	} {
		b := Append(nil, Usage, &u)
		if len(b) > MaxLen {
			t.Fatalf("record of %d bytes exceeds %d", len(b), MaxLen)
		}
		k, got, err := Decode(b)
		if err != nil || got != u || k != Usage {
			t.Fatalf("round trip: %+v, %v; want %+v", got, err, u)
		}
	}
}

func TestMalformedUsageRecordsAreRefused(t *testing.T) {
	good := Append(nil, Usage, &ledger.Usage{Account: "acme", Source: ledger.UsageLease, Units: 1})
	cases := map[string][]byte{
		"empty":       nil,
		"short":       good[:10],
		"version":     append([]byte{9}, good[1:]...),
		"source":      append(append([]byte{}, good[:1]...), append([]byte{0}, good[2:]...)...),
		"long":        append(append([]byte{}, good...), 'x'),
		"truncated":   good[:len(good)-1],
		"zero length": append(append([]byte{}, good[:fixedLen-1]...), 0),
	}
	for name, b := range cases {
		if _, _, err := Decode(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Append(nil, Usage, &ledger.Usage{Account: "acme", Source: ledger.UsageLease, Units: 1}))
	f.Add(Append(nil, Commit, &ledger.Usage{Account: "acme", Source: ledger.UsageOverage, Units: 7}))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, u, err := Decode(b)
		if err != nil {
			return
		}
		if again := Append(nil, k, &u); string(again) != string(b) {
			t.Fatalf("accepted %x but re-encodes as %x", b, again)
		}
	})
}

func TestCommitRecordsRoundTripAndPostPaidCommitsAreRefused(t *testing.T) {
	u := ledger.Usage{ID: [16]byte{4}, Account: "acme", Source: ledger.UsageLease, LeaseID: 2, Token: 1, Units: 300, OccurredAt: 5}
	k, got, err := Decode(Append(nil, Commit, &u))
	if err != nil || k != Commit || got != u {
		t.Fatalf("commit round trip: %v, %v, %+v", k, err, got)
	}
	u.Source = ledger.UsagePostPaid
	if _, _, err := Decode(Append(nil, Commit, &u)); err == nil {
		t.Fatal("a post-paid commit entry was accepted: post-paid usage is never committed")
	}
}
