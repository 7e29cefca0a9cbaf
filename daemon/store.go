package daemon

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/boltstore"
	"github.com/tollgated/tollgated/ledger/pgstore"
)

// ledgerOpenTimeout bounds connecting to PostgreSQL and migrating it at
// start-up: a wrong address fails the start instead of hanging it.
const ledgerOpenTimeout = 30 * time.Second

// openStore opens the ledger: the embedded bbolt file in the data
// directory by default, or the PostgreSQL database a fleet shares.
func openStore(cfg Config, log zerolog.Logger) (ledger.Store, error) {
	loc := cfg.LedgerURL
	if loc == "" {
		s, err := boltstore.Open(filepath.Join(cfg.DataDir, LedgerFile), boltstore.Options{UsageHistory: cfg.UsageHistory})
		if err != nil {
			return nil, err // not s: a nil *boltstore.Store in a ledger.Store is not a nil interface
		}
		return s, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), ledgerOpenTimeout)
	defer cancel()
	s, err := pgstore.Open(ctx, loc, pgstore.Options{UsageHistory: cfg.UsageHistory})
	if err != nil {
		return nil, fmt.Errorf("ledger %s: %w", redacted(loc), err)
	}
	log.Info().Str("ledger", redacted(loc)).Int("schema", pgstore.SchemaVersion()).Msg("ledger on PostgreSQL")
	return s, nil
}

// redacted is the URL without its password, for logs and errors.
func redacted(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return u.Redacted()
}
