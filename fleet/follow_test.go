package fleet

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/boltstore"
	"github.com/tollgated/tollgated/ledger/pgstore"
)

// replay is a change log that delivers its changes once, in order, then
// waits for the end.
type replay []pgstore.Change

func (r replay) Follow(ctx context.Context, after uint64, fn func(pgstore.Change) error) error {
	for _, c := range r {
		if c.ID <= after {
			continue
		}
		if err := fn(c); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

// recorder is a Publisher that writes down what it was told; it fails the
// first failAccount calls of AccountChanged.
type recorder struct {
	got         []string
	failAccount int
}

func (r *recorder) AccountChanged(a ledger.Account) error {
	if r.failAccount > 0 {
		r.failAccount--
		return errors.New("the plane is busy")
	}
	r.got = append(r.got, "account "+string(a.ID)+" "+a.Status.String())
	return nil
}
func (r *recorder) BindKey(d credential.Digest, id core.AccountID) {
	r.got = append(r.got, "bind "+string(d[:1])+" "+string(id))
}
func (r *recorder) RevokeKey(d credential.Digest) { r.got = append(r.got, "revoke "+string(d[:1])) }
func (r *recorder) BindPlatformToken(d credential.Digest) {
	r.got = append(r.got, "bind token "+string(d[:1]))
}
func (r *recorder) RevokePlatformToken(d credential.Digest) {
	r.got = append(r.got, "revoke token "+string(d[:1]))
}

// TestFollowerPublishesTheLedgersCurrentState: each change publishes what
// the ledger holds now (a suspended account, a key past its expiry as
// revoked, a revoked token), a change that failed to apply is retried
// until it applies, one naming nothing the ledger holds or of an unknown
// kind is reported and passed over, and changes up to after are not
// applied again.
func TestFollowerPublishesTheLedgersCurrentState(t *testing.T) {
	ctx := t.Context()
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "ledger.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	if _, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: "acme"}, now.UnixNano()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetStatus(ctx, "acme", core.StatusSuspended); err != nil {
		t.Fatal(err)
	}
	for _, k := range []ledger.Key{
		{ID: "live", Account: "acme", Digest: [32]byte{'L'}, CreatedAt: now.UnixNano()},
		{ID: "lapsed", Account: "acme", Digest: [32]byte{'X'}, CreatedAt: now.UnixNano(), ExpiresAt: now.Add(-time.Second).UnixNano()},
	} {
		if err := s.AddKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddPlatformToken(ctx, ledger.PlatformToken{ID: "p", Digest: [32]byte{'P'}, CreatedAt: now.UnixNano()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokePlatformToken(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	log := replay{
		{ID: 1, Kind: pgstore.ChangeAccount, Account: "acme", At: now}, // before after: not applied
		{ID: 2, Kind: pgstore.ChangeStatus, Account: "acme", At: now},
		{ID: 3, Kind: pgstore.ChangeKey, Account: "acme", Key: "live", At: now},
		{ID: 4, Kind: pgstore.ChangeKey, Account: "acme", Key: "lapsed", At: now},
		{ID: 5, Kind: pgstore.ChangeKey, Account: "acme", Key: "gone", At: now},
		{ID: 6, Kind: "quota", Account: "acme", At: now},
		{ID: 7, Kind: pgstore.ChangePlatformToken, Token: "p", At: now},
		{ID: 8, Kind: pgstore.ChangeAdminToken, Token: "bootstrap", At: now},
		{ID: 9, Kind: pgstore.ChangeDeposit, Account: "acme", At: now},
	}
	pub := &recorder{failAccount: 2}
	var applied []uint64
	var failed []uint64
	ctx, cancel := context.WithCancel(ctx)
	f := &Follower{Store: s, Source: log, Publish: pub, Now: func() time.Time { return now.Add(3 * time.Millisecond) },
		Applied: func(c pgstore.Change, lag time.Duration) {
			if lag != 3*time.Millisecond {
				t.Errorf("change %d: lag %v", c.ID, lag)
			}
			applied = append(applied, c.ID)
			if c.ID == 9 {
				cancel()
			}
		},
		OnError: func(c pgstore.Change, err error) { failed = append(failed, c.ID) }}
	if err := f.Run(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	want := []string{"account acme suspended", "bind L acme", "revoke X", "revoke token P", "account acme suspended"}
	if !slices.Equal(pub.got, want) {
		t.Fatalf("published %q\nwant %q", pub.got, want)
	}
	if !slices.Equal(applied, []uint64{2, 3, 4, 7, 8, 9}) || !slices.Equal(failed, []uint64{2, 2, 5, 6}) {
		t.Fatalf("applied %v, failed %v", applied, failed)
	}
}
