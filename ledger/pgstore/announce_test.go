package pgstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/internal/await"
)

// TestAnnouncementsArriveInOrderAndForeignPayloadsAreSkipped: what one
// node announces reaches a follower in the order sent, with its kind,
// holder, account and units; a payload the follower cannot read (another
// build's, or anyone's pg_notify) is skipped without ending the follow,
// and an announcement that could not be read back is refused at the
// sender.
func TestAnnouncementsArriveInOrderAndForeignPayloadsAreSkipped(t *testing.T) {
	s, _ := openFresh(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	heard := make(chan string, 100)
	done := make(chan error, 1)
	go func() {
		done <- s.FollowAnnouncements(ctx, func(kind, holder string, account core.AccountID, units core.CostUnits) error {
			heard <- fmt.Sprintf("%s %s %s %d", kind, holder, account, units)
			return nil
		})
	}()
	// The follower listens once it hears anything: announce until it does.
	await.True(t, "the follower to listen", func() bool {
		if err := s.Announce(ctx, "hello", "probe", "probe", 0); err != nil {
			t.Fatal(err)
		}
		select {
		case <-heard: // this probe's, or one before it heard meanwhile
			return true
		default:
			return false
		}
	})
	// Probes may still be on their way: announce one last, and skip what
	// comes before it.
	if err := s.Announce(ctx, "hello", "probe", "last", 0); err != nil {
		t.Fatal(err)
	}
	for h := ""; h != "hello probe last 0"; {
		select {
		case h = <-heard:
		case <-time.After(await.Default):
			t.Fatal("the last probe was never heard")
		}
	}

	for _, bad := range []string{"want", "want a b", "want node acct -1", "want node acct 18446744073709551616", "want node bad/acct 3", ""} {
		if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", AnnounceChannel, bad); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Announce(ctx, "want", "node-a", "acct", 13); err != nil {
		t.Fatal(err)
	}
	if err := s.Announce(ctx, "returned", "node-b", "acct", 0); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"want node-a acct 13", "returned node-b acct 0"} {
		select {
		case got := <-heard:
			if got != want {
				t.Fatalf("heard %q, want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("heard nothing, want %q", want)
		}
	}

	for _, c := range []struct{ kind, holder, account string }{
		{"want now", "node-a", "acct"}, {"want", "node a", "acct"}, {"want", "node-a", "bad account"},
	} {
		if err := s.Announce(ctx, c.kind, c.holder, core.AccountID(c.account), 1); !errors.Is(err, errInvalidAnnouncement) {
			t.Errorf("Announce(%q, %q, %q) = %v, want refused", c.kind, c.holder, c.account, err)
		}
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("the follow ended with %v", err)
	}
}
