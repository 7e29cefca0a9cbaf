package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/internal/await"
	"github.com/tollgated/tollgated/ledger"
)

// TestEveryConfigurationChangeIsLogged: each kind of change appends one
// entry, in order, with gapless ids; repeats that change nothing, and
// money moved by leases and usage, append none.
func TestEveryConfigurationChangeIsLogged(t *testing.T) {
	s, _ := openFresh(t, Options{})
	ctx := t.Context()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	create := func(id, parent core.AccountID) {
		t.Helper()
		_, _, err := s.CreateAccount(ctx, ledger.AccountSpec{ID: id, Parent: parent}, t0)
		must(err)
	}
	create("org", "")
	create("org", "") // the same spec again: no change
	create("agent", "org")
	_, err := s.SetPolicy(ctx, "org", []byte(`{"p":1}`))
	must(err)
	_, err = s.SetPolicy(ctx, "org", []byte(`{"p":1}`))
	must(err)
	_, err = s.SetStatus(ctx, "org", core.StatusSuspended)
	must(err)
	_, err = s.SetStatus(ctx, "org", core.StatusActive)
	must(err)
	_, err = s.SetBudget(ctx, "org", ledger.Budget{Allowance: 100, Period: ledger.PeriodDay}, t0)
	must(err)
	_, _, err = s.Deposit(ctx, "agent", 50, "k", t0)
	must(err)
	_, _, err = s.Deposit(ctx, "agent", 50, "k", t0)
	must(err)
	// Money moved by leases and usage is not a change.
	l, _, err := s.Acquire(ctx, "agent", "node-a", 20, 0, hour, t0)
	must(err)
	_, err = s.Ingest(ctx, []ledger.Usage{{ID: eventID(1), Account: "agent", Source: ledger.UsageLease, LeaseID: l.ID, Token: l.Token, Units: 5}}, t0)
	must(err)
	must(s.Release(ctx, l.ID, l.Token, 15, t0))
	n, err := s.Rollover(ctx, t0+day, 10)
	if n != 1 || err != nil {
		t.Fatalf("rollover: %d, %v", n, err)
	}
	k := ledger.Key{ID: "k1", Account: "agent", Digest: [32]byte{1}, CreatedAt: t0}
	must(s.AddKey(ctx, k))
	must(s.AddKey(ctx, k))
	_, err = s.RevokeKey(ctx, "agent", "k1")
	must(err)
	_, err = s.RevokeKey(ctx, "agent", "k1")
	must(err)
	p := ledger.PlatformToken{ID: "p1", Digest: [32]byte{2}, CreatedAt: t0}
	must(s.AddPlatformToken(ctx, p))
	_, err = s.RevokePlatformToken(ctx, "p1")
	must(err)
	_, err = s.SetAdminTokenDigest(ctx, [32]byte{3})
	must(err)
	_, err = s.SetAdminTokenDigest(ctx, [32]byte{4})
	must(err)
	_, err = s.SetStatus(ctx, "org", core.StatusClosed) // closing ends the budget too
	must(err)
	// Rotation moves the old key's expiry and adds the new key; a rotation
	// that keeps an earlier expiry only adds.
	k2 := ledger.Key{ID: "k2", Account: "agent", Name: "ci", Digest: [32]byte{5}, CreatedAt: t0}
	must(s.AddKey(ctx, k2))
	_, err = s.RotateKey(ctx, "agent", "k2", ledger.Key{ID: "k3", Account: "agent", Digest: [32]byte{6}, CreatedAt: t0}, t0+hour)
	must(err)
	_, err = s.RotateKey(ctx, "agent", "k2", ledger.Key{ID: "k4", Account: "agent", Digest: [32]byte{7}, CreatedAt: t0}, t0+day)
	must(err)
	expired, err := s.ExpireKeys(ctx, t0+hour, 10)
	if err != nil || len(expired) != 1 || expired[0].ID != "k2" {
		t.Fatalf("expire: %+v, %v", expired, err)
	}
	// A key's last use and the secret's fingerprint are not changes.
	must(s.MarkKeysUsed(ctx, []ledger.KeyUse{{ID: "k3", At: t0}}))
	_, err = s.SetSecretFingerprint(ctx, [32]byte{8})
	must(err)
	a := ledger.AdminToken{ID: "atk_ops", Name: "ops", Digest: [32]byte{9}, CreatedAt: t0, Role: ledger.RoleOperator}
	must(s.AddAdminToken(ctx, a))
	must(s.AddAdminToken(ctx, a))
	for range 2 {
		_, err = s.RevokeAdminToken(ctx, "atk_ops")
		must(err)
	}

	want := []Change{
		{Kind: ChangeAccount, Account: "org"},
		{Kind: ChangeAccount, Account: "agent"},
		{Kind: ChangePolicy, Account: "org"},
		{Kind: ChangeStatus, Account: "org"},
		{Kind: ChangeStatus, Account: "org"},
		{Kind: ChangeBudget, Account: "org"},
		{Kind: ChangeDeposit, Account: "agent"},
		{Kind: ChangeBudget, Account: "org"}, // the rollover
		{Kind: ChangeKey, Account: "agent", Key: "k1"},
		{Kind: ChangeKey, Account: "agent", Key: "k1"},
		{Kind: ChangePlatformToken, Token: "p1"},
		{Kind: ChangePlatformToken, Token: "p1"},
		{Kind: ChangeAdminToken, Token: ledger.BootstrapAdminTokenID},
		{Kind: ChangeStatus, Account: "org"},
		{Kind: ChangeBudget, Account: "org"},
		{Kind: ChangeKey, Account: "agent", Key: "k2"}, // added
		{Kind: ChangeKey, Account: "agent", Key: "k2"}, // its expiry, by the rotation
		{Kind: ChangeKey, Account: "agent", Key: "k3"},
		{Kind: ChangeKey, Account: "agent", Key: "k4"},
		{Kind: ChangeKey, Account: "agent", Key: "k2"}, // expired
		{Kind: ChangeAdminToken, Token: "atk_ops"},
		{Kind: ChangeAdminToken, Token: "atk_ops"},
	}
	got, err := s.ChangesAfter(ctx, 0, 100)
	must(err)
	if len(got) != len(want) {
		t.Fatalf("%d changes, want %d: %+v", len(got), len(want), got)
	}
	for i, c := range got {
		if c.ID != uint64(i+1) || c.At.IsZero() {
			t.Fatalf("change %d has id %d at %v", i, c.ID, c.At)
		}
		c.ID, c.At = 0, time.Time{}
		if c != want[i] {
			t.Fatalf("change %d = %+v, want %+v", i+1, c, want[i])
		}
	}
	if last, err := s.LastChange(ctx); last != uint64(len(want)) || err != nil {
		t.Fatalf("last change %d, %v", last, err)
	}
	if page, err := s.ChangesAfter(ctx, 3, 2); err != nil || len(page) != 2 || page[0].ID != 4 || page[1].ID != 5 {
		t.Fatalf("changes after 3, limit 2: %+v, %v", page, err)
	}
	_, err = s.ChangesAfter(ctx, 0, 0)
	if !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("limit 0: %v", err)
	}
}

// endListeners ends the backends of s's listeners, as a network failure or
// a database restart would, and reports how many it ended.
func endListeners(t *testing.T, s *Store) int { return endConnections(t, s, "tollgated-listen") }

// endConnections ends the connections named app of s's database.
func endConnections(t *testing.T, s *Store, app string) int {
	t.Helper()
	var n int
	err := s.pool.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database()`, app).Scan(&n)
	if err != nil {
		t.Error(err) // not Fatal: also called from workers
	}
	return n
}

// waitFor receives from ids until one is at least want.
func waitFor(t *testing.T, ids <-chan uint64, want uint64, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := time.After(within)
	for {
		select {
		case id := <-ids:
			if id >= want {
				return time.Since(start)
			}
		case <-deadline:
			t.Fatalf("no change %d within %v", want, within)
		}
	}
}

// TestListenHearsChangesAndReconnects: Listen reports the head when it
// connects, then every announced change; after its connection is ended it
// reconnects and reports the head again, covering a change made while it
// was away.
func TestListenHearsChangesAndReconnects(t *testing.T) {
	s, _ := openFresh(t, Options{})
	mustCreate(t, s, "org", "") // change 1
	ctx, cancel := context.WithCancel(t.Context())
	ids := make(chan uint64, 100)
	done := make(chan error, 1)
	go func() { done <- s.Listen(ctx, func(id uint64) error { ids <- id; return nil }) }()
	waitFor(t, ids, 1, 10*time.Second)

	mustDeposit(t, s, "org", 10) // change 2
	took := waitFor(t, ids, 2, 5*time.Second)
	t.Logf("the notification arrived within %v of the commit", took)

	if n := endListeners(t, s); n != 1 {
		t.Fatalf("ended %d listener connections, want 1", n)
	}
	mustDeposit(t, s, "org", 11) // change 3, likely while nobody listens
	waitFor(t, ids, 3, 10*time.Second)
	mustDeposit(t, s, "org", 12) // change 4, on the new connection
	waitFor(t, ids, 4, 5*time.Second)

	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Listen returned %v after its context ended", err)
	}
}

// TestListenEndsWhenItsCallbackFails: the callback's error is Listen's.
func TestListenEndsWhenItsCallbackFails(t *testing.T) {
	s, _ := openFresh(t, Options{})
	stop := errors.New("enough")
	if err := s.Listen(t.Context(), func(uint64) error { return stop }); err != stop {
		t.Fatalf("Listen returned %v", err)
	}
}

// TestFollowDeliversEveryChangeOnceInOrder: while two nodes change the
// ledger at once and the follower's connection is cut, Follow delivers
// every change exactly once, in id order, without gaps.
func TestFollowDeliversEveryChangeOnceInOrder(t *testing.T) {
	nodes := fleet(t, 3)
	follower := nodes[2]
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var mu sync.Mutex
	var got []uint64
	done := make(chan error, 1)
	go func() {
		done <- follower.Follow(ctx, 0, func(c Change) error {
			mu.Lock()
			got = append(got, c.ID)
			mu.Unlock()
			return nil
		})
	}()
	race(nodes[:2], 2, func(s *Store, w int) {
		id := core.AccountID(fmt.Sprintf("acct-%d", w))
		mustCreate(t, s, id, "")
		for i := range 25 {
			if _, _, err := s.Deposit(t.Context(), id, 1, fmt.Sprintf("k%d", i), t0); err != nil {
				t.Error(err)
			}
			if w == 0 && i == 10 {
				endListeners(t, s) // the follower's, on the same database
			}
		}
	})
	last, err := nodes[0].LastChange(t.Context())
	if err != nil || last != 4*26 {
		t.Fatalf("last change %d, %v; want %d", last, err, 4*26)
	}
	// Short of last after the bound, the comparison below says what is
	// missing.
	await.Poll(await.Default, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= int(last)
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Follow returned %v", err)
	}
	want := make([]uint64, last)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("followed %v, want 1..%d each once", got, last)
	}
}
