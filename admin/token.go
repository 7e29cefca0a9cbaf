package admin

import (
	"context"
	cryptorand "crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ledger"
)

// AdminTokenPrefix starts every generated admin token, so a leaked one is
// recognisable (and greppable by secret scanners).
const AdminTokenPrefix = "tga_"

// Bounds on an admin token supplied from the environment. The lower bound
// keeps a guessable token out; the upper keeps hashing one bounded.
const (
	MinAdminTokenLen = 16
	MaxAdminTokenLen = 512
)

var (
	// ErrAdminTokenMismatch: the environment supplied an admin token, but
	// the store already holds the digest of a different one.
	ErrAdminTokenMismatch = errors.New("admin: the admin token this start was given (--admin-token, --admin-token-file or TOLLGATED_ADMIN_TOKEN[_FILE]) does not match the stored admin token")
	// ErrBadAdminToken: the environment's admin token is too short, too
	// long, or has characters an Authorization header cannot carry.
	ErrBadAdminToken = errors.New("admin: an admin token must be 16 to 512 printable ASCII characters without spaces")
)

// EnsureAdminToken makes sure the store holds an admin token digest
// (SHA-256 of the token) and reports the token when it knows it.
//
//   - fromEnv set: it must be 16–512 printable ASCII bytes without spaces.
//     If no digest is stored yet, its digest is stored. If one is stored,
//     it must be the env token's: the environment never replaces a stored
//     token (that would let anyone who can set the daemon's environment
//     take over the ledger silently), so a different one is
//     ErrAdminTokenMismatch and the daemon should refuse to start.
//     Returns (fromEnv, false, nil).
//   - fromEnv empty, a digest stored: the operator already holds the token;
//     returns ("", false, nil).
//   - fromEnv empty, none stored: a token of AdminTokenPrefix and 32 random
//     bytes (base64url) is generated and its digest stored; returns
//     (token, true, nil) so the daemon can print it exactly once. If another
//     process stored a digest first, that one stands and this returns
//     ("", false, nil).
//
// The token itself is never stored. A nil rand means crypto/rand.
func EnsureAdminToken(ctx context.Context, store ledger.Store, fromEnv string, rand io.Reader) (token string, generated bool, err error) {
	if rand == nil {
		rand = cryptorand.Reader
	}
	if fromEnv != "" {
		if !validAdminToken(fromEnv) {
			return "", false, ErrBadAdminToken
		}
		want := sha256.Sum256([]byte(fromEnv))
		if err := storeOrMatch(ctx, store, want); err != nil {
			return "", false, err
		}
		return fromEnv, false, nil
	}
	if _, ok, err := store.AdminTokenDigest(ctx); err != nil {
		return "", false, fmt.Errorf("admin: reading the admin token digest: %w", err)
	} else if ok {
		return "", false, nil
	}
	token, err = newSecret(rand, AdminTokenPrefix)
	if err != nil {
		return "", false, err
	}
	stored, err := store.SetAdminTokenDigest(ctx, sha256.Sum256([]byte(token)))
	if err != nil {
		return "", false, fmt.Errorf("admin: storing the admin token digest: %w", err)
	}
	if !stored {
		return "", false, nil
	}
	return token, true, nil
}

// storeOrMatch stores want as the admin digest unless one is stored, and
// then requires the stored one to be want. Reading again after a refused
// store handles a race with another process doing the same.
func storeOrMatch(ctx context.Context, store ledger.Store, want [32]byte) error {
	have, ok, err := store.AdminTokenDigest(ctx)
	if err != nil {
		return fmt.Errorf("admin: reading the admin token digest: %w", err)
	}
	if !ok {
		stored, err := store.SetAdminTokenDigest(ctx, want)
		if err != nil {
			return fmt.Errorf("admin: storing the admin token digest: %w", err)
		}
		if stored {
			return nil
		}
		if have, ok, err = store.AdminTokenDigest(ctx); err != nil || !ok {
			return fmt.Errorf("admin: reading the admin token digest after a race: ok=%v: %w", ok, err)
		}
	}
	if subtle.ConstantTimeCompare(have[:], want[:]) != 1 {
		return ErrAdminTokenMismatch
	}
	return nil
}

func validAdminToken(t string) bool {
	if len(t) < MinAdminTokenLen || len(t) > MaxAdminTokenLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] > '~' {
			return false
		}
	}
	return true
}

// newSecret is prefix followed by 32 random bytes in unpadded base64url.
func newSecret(rand io.Reader, prefix string) (string, error) {
	var b [32]byte
	if _, err := io.ReadFull(rand, b[:]); err != nil {
		return "", fmt.Errorf("admin: reading randomness: %w", err)
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// authorize finds the live admin token the request's bearer token is, and
// returns it. Tokens are read from the ledger on every request (admin
// traffic is light, and they are few), so a token created, revoked or set
// by EnsureAdminToken takes effect at once. When that read fails (the
// ledger is down: PostgreSQL in an outage), a read-only request (GET,
// HEAD) is checked against the last tokens read, if that read is at most
// StaleTokensFor old: /metrics, the read-only API and the dashboard
// keep answering the operator during the outage they are needed for,
// while nothing can change with a token the ledger may have revoked since.
// Every live token's digest is compared, in constant time each; how many
// there are is not secret.
func (s *Server) authorize(r *http.Request) (caller, error) {
	raw, ok := credential.BearerToken([]byte(r.Header.Get("Authorization")))
	if !ok || len(raw) > MaxAdminTokenLen {
		return caller{}, problemf(codeUnauthorized, "send Authorization: Bearer <admin token>")
	}
	tokens, err := s.adminTokens(r)
	if err != nil {
		return caller{}, err
	}
	got := sha256.Sum256(raw)
	var match caller
	for _, t := range tokens {
		if subtle.ConstantTimeCompare(t.Digest[:], got[:]) == 1 && !t.Revoked {
			match = caller{id: t.ID, name: t.Name, role: t.Role}
		}
	}
	if match.id == "" {
		return caller{}, problemf(codeUnauthorized, "the admin token is not valid")
	}
	return match, nil
}

// StaleTokensFor bounds how old the admin tokens a read-only request is
// checked against may be when the ledger cannot be read (authorize).
const StaleTokensFor = 5 * time.Minute

// readTokens is one successful read of the admin tokens, and when (ns).
type readTokens struct {
	tokens []ledger.AdminToken
	at     int64
}

// adminTokens reads the admin tokens from the ledger and keeps them; if
// the read fails, a GET or HEAD gets the kept ones while they are at most
// StaleTokensFor old.
func (s *Server) adminTokens(r *http.Request) ([]ledger.AdminToken, error) {
	now := s.now()
	tokens, err := s.store.AdminTokens(r.Context())
	if err == nil {
		s.lastTokens.Store(&readTokens{tokens: tokens, at: now})
		return tokens, nil
	}
	err = fmt.Errorf("admin: reading the admin tokens: %w", err)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return nil, err
	}
	last := s.lastTokens.Load()
	if last == nil || now-last.at > int64(StaleTokensFor) {
		return nil, err
	}
	s.log.Warn().Err(err).Str("path", r.URL.Path).Msg("admin: the ledger did not answer; a read is checked against the admin tokens read last")
	return last.tokens, nil
}
