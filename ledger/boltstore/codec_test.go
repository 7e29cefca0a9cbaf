package boltstore

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

func genUnits(t *rapid.T, label string) core.CostUnits {
	return core.CostUnits(rapid.Uint64().Draw(t, label))
}

// genOptional draws nil, empty or some bytes: the codec keeps them apart.
func genOptional(t *rapid.T, label string) []byte {
	switch rapid.IntRange(0, 2).Draw(t, label+" kind") {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	return rapid.SliceOfN(rapid.Byte(), 1, 64).Draw(t, label)
}

func TestRecordsRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := ledger.Account{
			AccountSpec: ledger.AccountSpec{
				ID: "acct", Parent: core.AccountID(rapid.SampledFrom([]string{"", "org", "ws-1"}).Draw(t, "parent")),
				Capacity: core.CapacityClass(rapid.IntRange(0, 1).Draw(t, "capacity")), Unmetered: rapid.Bool().Draw(t, "unmetered"),
			},
			Scope: core.Scope(rapid.IntRange(0, 3).Draw(t, "scope")), Status: core.Status(rapid.IntRange(0, 2).Draw(t, "status")),
			Policy: genOptional(t, "policy"), PolicyGeneration: rapid.Uint64().Draw(t, "generation"),
			Budget:    ledger.Budget{Allowance: genUnits(t, "allowance"), Period: ledger.Period(rapid.IntRange(0, 3).Draw(t, "period"))},
			Deposited: genUnits(t, "d"), Overage: genUnits(t, "o"), AllowanceLeft: genUnits(t, "al"), TopUpLeft: genUnits(t, "tl"),
			Outstanding: genUnits(t, "out"), Settled: genUnits(t, "s"), Loss: genUnits(t, "l"), Expired: genUnits(t, "e"),
			PeriodStart: rapid.Int64().Draw(t, "start"), PeriodEnd: rapid.Int64().Draw(t, "end"), NextToken: rapid.Uint64().Draw(t, "token"),
		}
		if got, err := decodeAccount([]byte(a.ID), encodeAccount(&a)); err != nil || !reflect.DeepEqual(got, a) {
			t.Fatalf("account: %+v, %v\nwant %+v", got, err, a)
		}

		rec := ledger.LeaseRecord{Lease: ledger.Lease{
			ID: rapid.Uint64().Draw(t, "id"), Account: "acct", Token: rapid.Uint64().Draw(t, "lease token"),
			Granted: genUnits(t, "granted"), Used: genUnits(t, "used"), Credited: genUnits(t, "credited"),
			State: ledger.LeaseState(rapid.IntRange(1, 3).Draw(t, "state")), GrantedAt: rapid.Int64().Draw(t, "at"), ExpiresAt: rapid.Int64().Draw(t, "exp"),
		}}
		for i := range rapid.IntRange(0, 3).Draw(t, "funders") {
			rec.Funding = append(rec.Funding, ledger.Funding{Account: core.AccountID([]string{"a", "bb", "ccc"}[i]),
				Allowance: genUnits(t, "fa"), TopUp: genUnits(t, "ft"), PeriodStart: rapid.Int64().Draw(t, "fp")})
		}
		if got, err := decodeLease(rec.ID, encodeLease(&rec)); err != nil || !reflect.DeepEqual(got, rec) {
			t.Fatalf("lease: %+v, %v\nwant %+v", got, err, rec)
		}

		u := ledger.Usage{Account: "acct", Source: ledger.UsageSource(rapid.IntRange(0, 255).Draw(t, "source")),
			LeaseID: rapid.Uint64().Draw(t, "lease"), Token: rapid.Uint64().Draw(t, "utoken"), Units: genUnits(t, "units"), OccurredAt: rapid.Int64().Draw(t, "occurred")}
		copy(u.ID[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "event id"))
		if got, err := decodeUsage(encodeUsage(&u)); err != nil || got != u {
			t.Fatalf("usage: %+v, %v\nwant %+v", got, err, u)
		}

		k := ledger.Key{ID: "k", Account: "acct", Name: rapid.String().Draw(t, "name"), CreatedAt: rapid.Int64().Draw(t, "created"),
			ExpiresAt: rapid.Int64().Draw(t, "expires"), LastUsed: rapid.Int64().Draw(t, "used"), Revoked: rapid.Bool().Draw(t, "revoked")}
		copy(k.Digest[:], rapid.SliceOfN(rapid.Byte(), 32, 32).Draw(t, "digest"))
		if got, err := decodeKey([]byte(k.ID), encodeKey(&k)); err != nil || got != k {
			t.Fatalf("key: %+v, %v", got, err)
		}
		at := ledger.AdminToken{ID: "a", Name: k.Name, Digest: k.Digest, CreatedAt: k.CreatedAt, Revoked: k.Revoked,
			Role: rapid.SampledFrom(ledger.AdminRoles).Draw(t, "role")}
		if got, err := decodeAdminToken([]byte(at.ID), encodeAdminToken(&at)); err != nil || got != at {
			t.Fatalf("admin token: %+v, %v", got, err)
		}
		p := ledger.PlatformToken{ID: "p", Digest: k.Digest, CreatedAt: k.CreatedAt, Revoked: k.Revoked}
		if got, err := decodePlatformToken([]byte(p.ID), encodePlatformToken(&p)); err != nil || got != p {
			t.Fatalf("platform token: %+v, %v", got, err)
		}

		r := ledger.AuditRecord{Seq: 9, At: rapid.Int64().Draw(t, "audit at"), Actor: "me", Action: "x.y", Target: "acct",
			Before: genOptional(t, "before"), After: genOptional(t, "after")}
		if got, err := decodeAudit(r.Seq, encodeAudit(&r)); err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("audit: %+v, %v\nwant %+v", got, err, r)
		}
	})
}

func TestCorruptRecordsAreRefused(t *testing.T) {
	a := ledger.Account{AccountSpec: ledger.AccountSpec{ID: "org"}, Scope: core.ScopeOrg, PolicyGeneration: 1, NextToken: 1}
	good := encodeAccount(&a)
	if len(good) > 32 {
		t.Errorf("a fresh account encodes to %d bytes; the format is meant to be compact", len(good))
	}
	for name, v := range map[string][]byte{
		"empty":          nil,
		"unknown format": append([]byte{3}, good[1:]...),
		"truncated":      good[:len(good)-1],
		"trailing":       append(bytes.Clone(good), 0),
	} {
		if _, err := decodeAccount([]byte("org"), v); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	// An out-of-range enum: status 7.
	e := newEncoder(0)
	e.string("")
	e.uint(0)
	e.bool(false)
	e.uint(uint64(core.ScopeOrg))
	e.uint(7)
	if _, err := decodeAccount([]byte("org"), e.b); !errors.Is(err, ErrCorrupt) {
		t.Errorf("status 7: err = %v", err)
	}
	if _, err := decodeLease(1, []byte{recordV1, 0, 1, 1, 0, 0, 1, 0, 0, 4}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("four funders: err = %v", err)
	}
}

func TestTimeKeysSortLikeTimes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := rapid.Int64().Draw(t, "a"), rapid.Int64().Draw(t, "b")
		ka, kb := timeKey(nil, a), timeKey(nil, b)
		if c := bytes.Compare(ka, kb); (a < b) != (c < 0) || (a == b) != (c == 0) {
			t.Fatalf("keys of %d and %d compare %d", a, b, c)
		}
		if keyTime(ka) != a {
			t.Fatalf("keyTime(timeKey(%d)) = %d", a, keyTime(ka))
		}
	})
	if keyTime(expiryKey(math.MinInt64, 5)) != math.MinInt64 || seqOf(expiryKey(-1, 5)[8:]) != 5 {
		t.Fatal("expiry key does not read back")
	}
	if !bytes.HasPrefix(pairKey("org", "k1"), pairKey("org", "")) || bytes.HasPrefix(pairKey("org2", "k"), pairKey("org", "")) {
		t.Fatal("pair keys of one account must share a prefix no other account has")
	}
}
