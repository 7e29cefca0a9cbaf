package pgstore

// Announcements: what one node of a fleet tells the others about an
// account's funding, outside any ledger change. A node the ledger refused
// while other nodes hold the account's units in their leases asks for them
// ("want"); a node that released unspent units says so ("returned"), so
// that the nodes waiting for them ask the ledger again at once instead of
// after their back-off. They are hints, like the funds announcements
// (funds.go): nothing is stored, a listener that was not connected misses
// them, and a client's retry asks again.

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/core"
)

// AnnounceChannel is the channel announcements go out on. The payload is
// "<kind> <holder> <account> <units>": units is what the holder holds of
// the account in its leases (want), or 0.
const AnnounceChannel = "tollgated_announce"

// Announce sends one announcement of kind ("want" or "returned") about
// account, from the node holder.
func (s *Store) Announce(ctx context.Context, kind, holder string, account core.AccountID, units core.CostUnits) error {
	if strings.ContainsAny(kind, " \x00") || strings.ContainsAny(holder, " \x00") || account.Validate() != nil {
		return fmt.Errorf("pgstore: announcement %q from %q about %q: %w", kind, holder, account, errInvalidAnnouncement)
	}
	payload := kind + " " + holder + " " + string(account) + " " + strconv.FormatUint(uint64(units), 10)
	_, err := s.pool.Exec(ctx, "SELECT pg_notify('"+AnnounceChannel+"', $1)", payload)
	return err
}

var errInvalidAnnouncement = fmt.Errorf("invalid announcement")

// FollowAnnouncements calls fn with every announcement as it arrives, in
// order; a payload it cannot read is skipped. It uses a connection of its
// own, reconnects as Listen does, and returns when ctx ends or fn returns
// an error.
func (s *Store) FollowAnnouncements(ctx context.Context, fn func(kind, holder string, account core.AccountID, units core.CostUnits) error) error {
	return s.listenLoop(ctx, AnnounceChannel, "tollgated-announce",
		func(context.Context, *pgx.Conn) error { return nil },
		func(payload string) error {
			f := strings.Fields(payload)
			if len(f) != 4 || core.AccountID(f[2]).Validate() != nil {
				return nil // not ours, or newer than this build
			}
			units, err := strconv.ParseUint(f[3], 10, 63)
			if err != nil {
				return nil
			}
			return fn(f[0], f[1], core.AccountID(f[2]), core.CostUnits(units))
		})
}
