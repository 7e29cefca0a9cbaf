package admin

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ledger"
)

// Secret prefixes, so a leaked key or token says what it is.
const (
	KeyPrefix           = "tgk_"
	PlatformTokenPrefix = "tgp_"
)

// Key lifetimes.
const (
	// MaxNameLen bounds the label of a key or an admin token.
	MaxNameLen = 64
	// DefaultRotationGrace is how long a rotated key keeps working unless
	// the rotation says otherwise: long enough to roll the new key out.
	DefaultRotationGrace = 24 * time.Hour
	// MaxRotationGrace bounds it.
	MaxRotationGrace = 30 * 24 * time.Hour
	// keyExpiryBatch bounds one sweep's ledger transaction.
	keyExpiryBatch = 256
)

// keyView is an API key on the wire: never its secret or digest.
type keyView struct {
	ID        string         `json:"id"`
	Account   core.AccountID `json:"account"`
	Name      string         `json:"name"`
	CreatedAt *string        `json:"created_at"`
	ExpiresAt *string        `json:"expires_at"`
	LastUsed  *string        `json:"last_used"`
	Revoked   bool           `json:"revoked"`
}

func viewKey(k *ledger.Key) keyView {
	return keyView{ID: k.ID, Account: k.Account, Name: k.Name, CreatedAt: timestamp(k.CreatedAt),
		ExpiresAt: optionalTime(k.ExpiresAt), LastUsed: optionalTime(k.LastUsed), Revoked: k.Revoked}
}

// optionalTime is ns as RFC 3339, or null for 0 ("none").
func optionalTime(ns int64) *string {
	if ns == 0 {
		return nil
	}
	return timestamp(ns)
}

// newKeyResponse is the only answer that ever carries a key.
type newKeyResponse struct {
	keyView
	Key string `json:"key"`
}

// newID is prefix and 12 random bytes in hex: unguessable enough that ids
// do not collide, and plain enough to type into a DELETE.
func newID(rand io.Reader, prefix string) (string, error) {
	var b [12]byte
	if _, err := io.ReadFull(rand, b[:]); err != nil {
		return "", fmt.Errorf("admin: reading randomness: %w", err)
	}
	return prefix + hex.EncodeToString(b[:]), nil
}

// mint makes a new secret with prefix, its digest under the server secret
// and an id. Callers hold s.mu (the hasher and rand are not shared-safe).
func (s *Server) mint(secretPrefix, idPrefix string) (id, secret string, d credential.Digest, err error) {
	if id, err = newID(s.rand, idPrefix); err != nil {
		return "", "", d, err
	}
	if secret, err = newSecret(s.rand, secretPrefix); err != nil {
		return "", "", d, err
	}
	d, err = s.hasher.Digest([]byte(secret))
	if err != nil {
		return "", "", d, fmt.Errorf("admin: digesting a new secret: %w", err)
	}
	return id, secret, d, nil
}

// keySpec is what a new key may say about itself.
type keySpec struct {
	name      string
	nameGiven bool
	expiresAt int64 // 0: never
}

// readKeySpec reads name and expires_at (both optional) of a key request.
func (s *Server) readKeySpec(o object) (keySpec, error) {
	var ks keySpec
	var err error
	if ks.name, ks.nameGiven, err = o.str("name", false, MaxNameLen); err != nil {
		return ks, err
	}
	if err := checkName("name", ks.name); err != nil {
		return ks, err
	}
	if ks.expiresAt, _, err = o.timestamp("expires_at"); err != nil {
		return ks, err
	}
	if ks.expiresAt != 0 && ks.expiresAt <= s.now() {
		return ks, fieldProblem("expires_at", "must be in the future")
	}
	return ks, nil
}

// createKey: POST /v1/accounts/{id}/keys {"name":…,"expires_at":…} (both
// optional; the body may be empty) → 201 with the key, shown this once:
// only its digest is stored.
func (s *Server) createKey(w http.ResponseWriter, r *http.Request) error {
	id, err := accountID(r)
	if err != nil {
		return err
	}
	o, err := decodeObject(w, r, true)
	if err != nil {
		return err
	}
	if err := o.only("name", "expires_at"); err != nil {
		return err
	}
	ks, err := s.readKeySpec(o)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.loadAccount(r, id)
	if err != nil {
		return err
	}
	if a.Status == core.StatusClosed {
		return problemf(codeClosedAccount, "account %s is closed; it takes no new keys", id)
	}
	keyID, secret, d, err := s.mint(KeyPrefix, "key_")
	if err != nil {
		return err
	}
	k := ledger.Key{ID: keyID, Account: id, Name: ks.name, Digest: d, CreatedAt: s.now(), ExpiresAt: ks.expiresAt}
	if err := s.store.AddKey(r.Context(), k); err != nil {
		return ledgerError(err, unknownAccount(id))
	}
	var f followUp
	s.record(r.Context(), &f, actionKeyCreate, keyTarget(id, keyID), nil, viewKey(&k))
	s.pub.BindKey(d, id)
	w.Header().Set("Location", "/v1/accounts/"+string(id)+"/keys/"+keyID)
	return writeJSON(w, http.StatusCreated, struct {
		newKeyResponse
		followUp
	}{newKeyResponse{viewKey(&k), secret}, f})
}

func keyTarget(id core.AccountID, keyID string) string { return string(id) + "/keys/" + keyID }

// listKeys: GET /v1/accounts/{id}/keys?limit=&cursor=, oldest first,
// without secrets.
func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) error {
	q, err := readQuery(r, "limit", "cursor")
	if err != nil {
		return err
	}
	p, err := q.page(listKeys)
	if err != nil {
		return err
	}
	a, err := s.pathAccount(r)
	if err != nil {
		return err
	}
	keys, err := s.store.Keys(r.Context(), a.ID)
	if err != nil {
		return ledgerError(err, unknownAccount(a.ID))
	}
	keys, next, err := pageOf(keys, p, func(k *ledger.Key) int64 { return k.CreatedAt }, func(k *ledger.Key) string { return k.ID })
	if err != nil {
		return err
	}
	views := make([]keyView, len(keys))
	for i := range keys {
		views[i] = viewKey(&keys[i])
	}
	return writeJSON(w, http.StatusOK, newList(listKeys, views, next))
}

// findKey reads key_id of the path's account; callers hold s.mu.
func (s *Server) findKey(r *http.Request) (core.AccountID, ledger.Key, error) {
	id, err := accountID(r)
	if err != nil {
		return "", ledger.Key{}, err
	}
	keyID := r.PathValue("key_id")
	if _, err := s.loadAccount(r, id); err != nil {
		return id, ledger.Key{}, err
	}
	keys, err := s.store.Keys(r.Context(), id)
	if err != nil {
		return id, ledger.Key{}, ledgerError(err, unknownAccount(id))
	}
	for _, k := range keys {
		if k.ID == keyID {
			return id, k, nil
		}
	}
	return id, ledger.Key{}, problemf(codeNotFound, "account %s has no key %q", id, keyID)
}

// revokeKey: DELETE /v1/accounts/{id}/keys/{key_id}. Revoking a revoked
// key answers 200 again and unbinds it again; another account's key is 404.
func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, before, err := s.findKey(r)
	if err != nil {
		return err
	}
	after, err := s.store.RevokeKey(r.Context(), id, before.ID)
	if err != nil {
		return ledgerError(err, problemf(codeNotFound, "account %s has no key %q", id, before.ID))
	}
	var f followUp
	if !before.Revoked {
		s.record(r.Context(), &f, actionKeyRevoke, keyTarget(id, before.ID), viewKey(&before), viewKey(&after))
	}
	s.pub.RevokeKey(after.Digest)
	return writeJSON(w, http.StatusOK, struct {
		keyView
		followUp
	}{viewKey(&after), f})
}

// rotateKey: POST /v1/accounts/{id}/keys/{key_id}/rotate
// {"grace_seconds":N,"name":…,"expires_at":…} (all optional) → 201 with a
// new key (shown this once) and the old one, which keeps working until the
// grace ends (default 24 h; 0 stops it now) and is then revoked. The new
// key takes the old one's name unless given one.
func (s *Server) rotateKey(w http.ResponseWriter, r *http.Request) error {
	o, err := decodeObject(w, r, true)
	if err != nil {
		return err
	}
	if err := o.only("grace_seconds", "name", "expires_at"); err != nil {
		return err
	}
	grace := int64(DefaultRotationGrace / time.Second)
	if g, ok, err := o.integer("grace_seconds", false, 0, int64(MaxRotationGrace/time.Second)); err != nil {
		return err
	} else if ok {
		grace = g
	}
	ks, err := s.readKeySpec(o)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id, before, err := s.findKey(r)
	if err != nil {
		return err
	}
	if before.Revoked {
		return problemf(codeConflict, "key %s of %s is revoked; create a new key instead", before.ID, id)
	}
	a, err := s.loadAccount(r, id)
	if err != nil {
		return err
	}
	if a.Status == core.StatusClosed {
		return problemf(codeClosedAccount, "account %s is closed; it takes no new keys", id)
	}
	keyID, secret, d, err := s.mint(KeyPrefix, "key_")
	if err != nil {
		return err
	}
	now := s.now()
	if !ks.nameGiven {
		ks.name = before.Name
	}
	next := ledger.Key{ID: keyID, Account: id, Name: ks.name, Digest: d, CreatedAt: now, ExpiresAt: ks.expiresAt}
	// The old key ends at now+grace; at grace 0 it must not outlive this
	// answer, so it ends at now and is revoked below, not by the sweep.
	old, err := s.store.RotateKey(r.Context(), id, before.ID, next, max(now+grace*int64(time.Second), 1))
	if err != nil {
		return ledgerError(err, problemf(codeNotFound, "account %s has no key %q", id, before.ID))
	}
	var f followUp
	s.record(r.Context(), &f, actionKeyCreate, keyTarget(id, keyID), nil, viewKey(&next))
	s.record(r.Context(), &f, actionKeyRotate, keyTarget(id, before.ID), viewKey(&before), viewKey(&old))
	s.pub.BindKey(d, id)
	if grace == 0 {
		if err := s.expireKeysLocked(r.Context()); err != nil {
			return err
		}
		if old, err = s.store.RevokeKey(r.Context(), id, before.ID); err != nil {
			return ledgerError(err, problemf(codeNotFound, "account %s has no key %q", id, before.ID))
		}
	}
	w.Header().Set("Location", "/v1/accounts/"+string(id)+"/keys/"+keyID)
	return writeJSON(w, http.StatusCreated, struct {
		newKeyResponse
		Rotated keyView `json:"rotated"`
		followUp
	}{newKeyResponse{viewKey(&next), secret}, viewKey(&old), f})
}

// ExpireKeys revokes every key whose expiry has passed, records each in the
// audit log (action key.expire, actor "tollgated") and tells the data plane
// to stop it. Serve runs it every second; the daemon also runs it once
// before the data plane opens, so a key that expired while the node was
// down never answers.
func (s *Server) ExpireKeys(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expireKeysLocked(ctx)
}

func (s *Server) expireKeysLocked(ctx context.Context) error {
	ctx = withActor(ctx, systemActor)
	for {
		expired, err := s.store.ExpireKeys(ctx, s.now(), keyExpiryBatch)
		if err != nil {
			return fmt.Errorf("admin: expiring keys: %w", err)
		}
		for i := range expired {
			k := &expired[i]
			before := *k
			before.Revoked = false
			var f followUp
			s.record(ctx, &f, actionKeyExpire, keyTarget(k.Account, k.ID), viewKey(&before), viewKey(k))
			s.pub.RevokeKey(k.Digest)
		}
		if len(expired) < keyExpiryBatch {
			return nil
		}
	}
}
