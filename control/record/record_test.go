package record

import (
	"strings"
	"testing"

	"github.com/tollgated/tollgated/core"
)

var rev = core.PolicyRevision{1, 2, 3, 31: 9}

func TestRecordsRoundTrip(t *testing.T) {
	long := core.AccountID("0123456789012345678901234567890123456789012345678901234567890123")
	for _, r := range []Record{
		{Kind: Usage, Revision: rev, Usage: Event{ID: [16]byte{1, 2, 3}, Account: "acme", Source: SourceLease, LeaseID: 7, Token: 3, Units: 1210, OccurredAt: 1_700_000_000e9}},
		{Kind: Usage, Usage: Event{ID: [16]byte{15: 9}, Account: "a", Source: SourceOverage, Units: core.MaxCostUnits, OccurredAt: -1}},
		{Kind: Usage, Revision: rev, Usage: Event{Account: long, Source: SourcePostPaid, Units: 1}},
		{Kind: Usage, EventID: "evt-1", Usage: Event{ID: [16]byte{7}, Account: "acme", Source: SourcePostPaid, Units: 5, OccurredAt: 9}},
		{Kind: Usage, EventID: strings.Repeat("é", MaxEventIDLen/2), Usage: Event{Account: long, Source: SourcePostPaid, Units: 1}},
		{Kind: Commit, Revision: rev, Usage: Event{ID: [16]byte{4}, Account: "acme", Source: SourceLease, LeaseID: 2, Token: 1, Units: 300, OccurredAt: 5}},
	} {
		b := Append(nil, &r)
		if len(b) > MaxLen {
			t.Fatalf("record of %d bytes exceeds %d", len(b), MaxLen)
		}
		got, err := Decode(b)
		if err != nil || got != r {
			t.Fatalf("round trip: %+v, %v; want %+v", got, err, r)
		}
	}
}

func TestMalformedRecordsAreRefused(t *testing.T) {
	good := Append(nil, &Record{Kind: Usage, Usage: Event{Account: "acme", Source: SourceLease, Units: 1}})
	withRev := Append(nil, &Record{Kind: Usage, Revision: rev, Usage: Event{Account: "acme", Source: SourceLease, Units: 1}})
	postPaid := Append(nil, &Record{Kind: Usage, EventID: "evt-1", Usage: Event{Account: "acme", Source: SourcePostPaid, Units: 1}})
	leaseWithEventID := append([]byte{}, postPaid...)
	leaseWithEventID[1] = byte(SourceLease)
	zeroEventID := append(append([]byte{}, postPaid[:fixedLen-1]...), 0)
	zeroEventID = append(zeroEventID, postPaid[fixedLen-1+1+5:]...)
	zeroRev := append([]byte{}, withRev...)
	clear(zeroRev[fixedLen-1 : fixedLen-1+32])
	cases := map[string][]byte{
		"kind zero":         append([]byte{0}, good[1:]...),
		"short":             good[:10],
		"kind":              append([]byte{9}, good[1:]...),
		"flags":             append([]byte{0x41}, good[1:]...),
		"event id on lease": leaseWithEventID,
		"empty event id":    zeroEventID,
		"short event id":    postPaid[:fixedLen+3],
		"source":            append(append([]byte{}, good[:1]...), append([]byte{0}, good[2:]...)...),
		"long":              append(append([]byte{}, good...), 'x'),
		"truncated":         good[:len(good)-1],
		"zero length":       append(append([]byte{}, good[:fixedLen-1]...), 0),
		"short revision":    withRev[:fixedLen+10],
		"zero revision":     zeroRev,
		"post-paid commit":  Append(nil, &Record{Kind: Commit, Usage: Event{Account: "acme", Source: SourcePostPaid, Units: 1}}),
	}
	for name, b := range cases {
		if _, err := Decode(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Append(nil, &Record{Kind: Usage, Usage: Event{Account: "acme", Source: SourceLease, Units: 1}}))
	f.Add(Append(nil, &Record{Kind: Commit, Revision: rev, Usage: Event{Account: "acme", Source: SourceOverage, Units: 7}}))
	f.Add(Append(nil, &Record{Kind: Usage, EventID: "evt-1", Usage: Event{Account: "acme", Source: SourcePostPaid, Units: 7}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			return
		}
		if again := Append(nil, &r); string(again) != string(b) {
			t.Fatalf("accepted %x but re-encodes as %x", b, again)
		}
	})
}

// TestAnEmptyRecordIsAHole: the empty record spool.Quarantine leaves for a
// lost one decodes as a Hole, which bills nothing.
func TestAnEmptyRecordIsAHole(t *testing.T) {
	r, err := Decode(nil)
	if err != nil || r.Kind != Hole || r.Usage.Units != 0 {
		t.Fatalf("Decode(empty) = %+v, %v", r, err)
	}
	if b := Append(nil, &Record{Kind: Hole}); len(b) != 0 {
		t.Fatalf("a hole encodes as %x", b)
	}
}
