package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/boltstore"
	"github.com/tollgated/tollgated/ledger/pgstore"
)

// ledgerOpenTimeout bounds connecting to PostgreSQL and migrating it at
// start-up: a wrong address fails the start instead of hanging it.
const ledgerOpenTimeout = 30 * time.Second

// checkLedgerFlags validates --ledger and --ledger-file (at most one; a
// URL must be PostgreSQL's).
func checkLedgerFlags(ledgerURL, file string) error {
	if ledgerURL != "" && file != "" {
		return fmt.Errorf("--ledger and --ledger-file both set: give the URL once")
	}
	if ledgerURL != "" && !isPostgresURL(ledgerURL) {
		return fmt.Errorf("--ledger: want a postgres:// or postgresql:// URL (or nothing, for the embedded file)")
	}
	return nil
}

func isPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// ledgerLocation returns the PostgreSQL URL the configuration names (read
// from --ledger-file if that is set), or "" for the embedded file.
func ledgerLocation(cfg config) (string, error) {
	if cfg.ledgerURLFile == "" {
		return cfg.ledgerURL, nil
	}
	b, err := os.ReadFile(cfg.ledgerURLFile)
	if err != nil {
		return "", fmt.Errorf("--ledger-file: %w", err)
	}
	u := strings.TrimSpace(string(b))
	if !isPostgresURL(u) {
		return "", fmt.Errorf("--ledger-file %s: want one postgres:// or postgresql:// URL", cfg.ledgerURLFile)
	}
	return u, nil
}

// openStore opens the ledger: the embedded bbolt file in the data
// directory by default, or the PostgreSQL database a fleet shares.
func openStore(cfg config, log zerolog.Logger) (ledger.Store, error) {
	loc, err := ledgerLocation(cfg)
	if err != nil {
		return nil, err
	}
	if loc == "" {
		s, err := boltstore.Open(filepath.Join(cfg.dataDir, ledgerFile), boltstore.Options{UsageHistory: cfg.usageHistory})
		if err != nil {
			return nil, err // not s: a nil *boltstore.Store in a ledger.Store is not a nil interface
		}
		return s, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), ledgerOpenTimeout)
	defer cancel()
	s, err := pgstore.Open(ctx, loc, pgstore.Options{UsageHistory: cfg.usageHistory})
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
