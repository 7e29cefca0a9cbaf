package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/rs/zerolog"
)

// The data directory holds everything tollgated keeps, under these names:
//
//	ledger.db  the ledger (bbolt): accounts, money, leases, keys, audit;
//	           absent when --ledger names a PostgreSQL database
//	spool/     usage not yet billed into the ledger
//	events/    billed usage kept for GET /v1/events (the spool's archive)
//	secret     the server secret for key digests (when --secret is not given)
const (
	LedgerFile = "ledger.db"
	SpoolDir   = "spool"
	EventsDir  = "events"
	SecretFile = "secret"
)

func openDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	return nil
}

// serverSecret is Config.Secret, or the secret stored in the data
// directory, created on first start: keys issued by the admin API are
// digests under it, so it must outlive restarts. generated says this call
// created the file (written before the ledger adopts it: a crash in
// between must not leave a ledger bound to a secret no file holds).
func serverSecret(cfg Config, log zerolog.Logger) (secret []byte, generated bool, err error) {
	if cfg.Secret != nil {
		return cfg.Secret, false, nil
	}
	path := filepath.Join(cfg.DataDir, SecretFile)
	b, err := os.ReadFile(path)
	if err == nil {
		s, err := hex.DecodeString(strings.TrimSpace(string(b)))
		if err != nil || len(s) < 32 {
			return nil, false, fmt.Errorf("%s: not a hex secret of at least 32 bytes", path)
		}
		return s, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	s := make([]byte, 32)
	if _, err := rand.Read(s); err != nil {
		return nil, false, err
	}
	if err := writeFileDurably(path, []byte(hex.EncodeToString(s)+"\n"), 0o600); err != nil {
		return nil, false, fmt.Errorf("storing the server secret: %w", err)
	}
	log.Info().Str("path", path).Msg("generated the server secret")
	return s, true, nil
}

// writeFileDurably creates path with data, failing if it exists, and syncs
// the file and its directory so the content survives a crash.
func writeFileDurably(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
