package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

// TestADeadlockVictimIsRetried: an operator's transaction that locks two
// accounts in the opposite order to the store's deadlocks with a grant;
// PostgreSQL aborts the grant's transaction (the operator's session waits
// longer before it looks for deadlocks), and the store runs it again once
// the operator is done: the call succeeds.
func TestADeadlockVictimIsRetried(t *testing.T) {
	s, url := openFresh(t, Options{})
	ctx := t.Context()
	mustCreate(t, s, "org", "")
	mustCreate(t, s, "ws", "org")
	mustDeposit(t, s, "org", 100)
	mustDeposit(t, s, "ws", 100)

	op := connect(t, url)
	tx, err := op.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SET LOCAL deadlock_timeout = '60s'"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT FROM accounts WHERE id = 'ws' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	granted := make(chan error, 1)
	go func() {
		// Locks org, then waits for ws.
		_, _, err := s.Acquire(ctx, "ws", "node-a", 10, 0, hour, t0)
		granted <- err
	}()
	waitForLockWait(t, s)
	// org is held by the grant: a cycle. The grant's session finds it
	// after its deadlock_timeout (1 s) and is aborted; this statement
	// then gets org.
	if _, err := tx.Exec(ctx, "SELECT FROM accounts WHERE id = 'org' FOR UPDATE"); err != nil {
		t.Fatalf("the operator's second lock: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-granted:
		if err != nil {
			t.Fatalf("acquire after a deadlock: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("acquire did not finish")
	}
	a, err := s.Account(ctx, "ws")
	if err != nil || a.Outstanding != 10 || a.NextToken != 2 {
		t.Fatalf("ws after the retried grant: %+v, %v", a, err)
	}
	sound(t, s)
}

// waitForLockWait waits until one of s's sessions waits for a row lock.
func waitForLockWait(t *testing.T, s *Store) {
	t.Helper()
	await.True(t, "the grant to wait for the operator's lock", func() bool {
		var waiting int
		err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'tollgated' AND wait_event_type = 'Lock'`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		return waiting > 0
	})
}
