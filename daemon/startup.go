//go:build linux

package daemon

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgated/tollgated/control"
	"github.com/tollgated/tollgated/httploop"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/spool"
)

// The checks start-up makes before it serves anything, and the warnings it
// gives, in the order Open calls them.

// checkAddresses refuses to start when another process already serves the
// data-plane or the admin address. With SO_REUSEPORT a second daemon would
// otherwise bind the data-plane port beside the first, and the kernel would
// split the clients between two nodes with different keys. node.Bind checks
// the data-plane address again just before it binds; this early check fails
// before the ledger and the spool are opened.
func checkAddresses(cfg Config) error {
	for _, a := range []struct{ what, flag, addr string }{
		{"data-plane", "--listen", cfg.Listen},
		{"admin", "--admin", cfg.Admin},
	} {
		err := httploop.CheckFree(a.addr)
		switch {
		case errors.Is(err, httploop.ErrAddrInUse):
			return fmt.Errorf("the %s address %s (%s) is already served by another process (another tollgated?): refusing to start", a.what, a.addr, a.flag)
		case err != nil:
			return fmt.Errorf("%s %s: %w", a.flag, a.addr, err)
		}
	}
	return nil
}

// warnAboutExposure warns of set-ups that work but hand control to others:
// an admin API reachable beyond this machine, and a data directory others
// may write (the ledger, the spool and the server secret live there).
func warnAboutExposure(cfg Config, log zerolog.Logger) {
	if !loopbackOnly(cfg.Admin) {
		log.Warn().Str("admin", cfg.Admin).Msg("the admin API listens beyond loopback: whoever reaches it with the admin token controls every account; bind it to 127.0.0.1 or firewall it")
	}
	if fi, err := os.Stat(cfg.DataDir); err == nil && fi.Mode().Perm()&0o022 != 0 {
		log.Warn().Str("data_dir", cfg.DataDir).Str("mode", fmt.Sprintf("%#o", fi.Mode().Perm())).
			Msg("the data directory is writable by group or others: they could replace the ledger, the spool or the server secret; chmod go-w it")
	}
}

// loopbackOnly reports whether addr ("host:port") can only be reached from
// this machine: a loopback IP, or a name that resolves to loopback IPs
// only. An empty host is every interface.
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return false
		}
	}
	return true
}

// SecretFingerprint identifies the server secret without revealing it: an
// HMAC-SHA256 under the secret of a fixed label.
func SecretFingerprint(secret []byte) [32]byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("tollgated server secret fingerprint v1"))
	var fp [32]byte
	copy(fp[:], m.Sum(nil))
	return fp
}

// matchSecret refuses a server secret other than the one the ledger's keys
// were issued under: every key is stored as a digest under the secret, so
// with another secret every existing key would be answered 401. A ledger
// without a fingerprint (new, or from before fingerprints) adopts this
// secret's.
func matchSecret(ctx context.Context, store ledger.Store, cfg Config, secret []byte, log zerolog.Logger) error {
	want := SecretFingerprint(secret)
	have, ok, err := store.SecretFingerprint(ctx)
	if err != nil {
		return fmt.Errorf("reading the server secret's fingerprint: %w", err)
	}
	if !ok {
		stored, err := store.SetSecretFingerprint(ctx, want)
		if err != nil {
			return fmt.Errorf("storing the server secret's fingerprint: %w", err)
		}
		if stored {
			log.Info().Msg("stored the server secret's fingerprint in the ledger: a start under another secret will be refused")
			return nil
		}
		// Another process stored one first: compare with it.
		if have, ok, err = store.SecretFingerprint(ctx); err != nil || !ok {
			return fmt.Errorf("reading the server secret's fingerprint: %v", err)
		}
	}
	if !hmac.Equal(have[:], want[:]) {
		return fmt.Errorf("the server secret from %s is not the one this ledger's keys were issued under (its fingerprint differs): "+
			"every existing key would be refused; start with the secret %s was first started with: %w", secretSource(cfg), cfg.DataDir, errSecretMismatch)
	}
	return nil
}

// errSecretMismatch: the ledger holds another secret's fingerprint. Any
// other error of matchSecret leaves open whether the ledger adopted this
// secret (a lost commit acknowledgement), so only this one lets a start
// throw away a secret it generated.
var errSecretMismatch = errors.New("secret mismatch")

// secretSource says where the server secret came from, for messages.
func secretSource(cfg Config) string {
	switch {
	case cfg.SecretSource != "":
		return cfg.SecretSource
	case cfg.Secret != nil:
		return "the configuration"
	}
	return filepath.Join(cfg.DataDir, SecretFile)
}

// openDataPlane opens the node's listeners once the plane has delivered the
// ledger's state to every shard (node.Open), and reports each shard.
func (d *Daemon) openDataPlane() error {
	if err := d.node.Open(time.Now().Add(time.Minute)); err != nil {
		return fmt.Errorf("opening the data plane: %w", err)
	}
	for _, s := range d.node.Shards() {
		d.log.Info().Int("shard", s.ID).Int("cpu", s.CPU).Bool("pinned", s.Pinned).Msg("shard started")
	}
	return nil
}

// reportSpoolRecovery logs, once, what the spool cut from a torn or
// damaged tail when it opened (spool.Dropped), counted exactly with what
// recovery found: the tail shows the records whose headers survived, and
// the ledger's export mark says how many records past the cut it had
// billed — those existed, and cost nothing now — so the count is exact
// whenever the cut records were billed or still show. The metrics count
// the same. A spool numbered on to the mark without a cut (its last
// records zeroed at a record boundary, or lost in a quarantine) gets a
// WARN of its own.
func (d *Daemon) reportSpoolRecovery(r control.Recovery) {
	dr := d.spool.Dropped()
	if dr.Bytes == 0 {
		if r.Holes > 0 {
			d.log.Warn().Uint64("records", r.Holes).Uint64("export_mark", r.Mark).
				Msg("the usage spool ended before what the ledger has billed of it (its last records were lost after they were billed): numbered on past them with empty records")
		}
		d.droppedRecords += r.Holes
		return
	}
	var billed uint64
	if r.Mark >= dr.FirstSeq {
		billed = r.Mark - dr.FirstSeq + 1
	}
	records := max(dr.Records, billed)
	d.droppedRecords += records
	d.log.Warn().Str("file", dr.File).Int64("offset", dr.Offset).Int64("bytes", dr.Bytes).
		Uint64("records", records).Uint64("billed", billed).Uint64("unbilled", records-billed).
		Uint64("first_seq", dr.FirstSeq).Uint64("export_mark", r.Mark).
		Msg("usage spool: cut a torn or damaged tail at start. Of the records it held, \"billed\" were billed before and cost nothing; \"unbilled\" are gone and never will be. " +
			"A write cut short by a crash held no acknowledged usage; damage or truncation after the fact may have lost unbilled records that left no trace (docs/RUNBOOK.md)")
}

// spoolHint adds the way forward to a spool that refuses to open.
func spoolHint(err error, dataDir string) error {
	if !errors.Is(err, spool.ErrCorrupt) {
		return err
	}
	return fmt.Errorf("%w (see what is damaged with `tollgated spool verify --data-dir %s`, and docs/RUNBOOK.md)", err, dataDir)
}
