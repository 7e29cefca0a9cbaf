package admin

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"slices"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ledger"
)

// Secret prefixes, so a leaked key or token says what it is.
const (
	KeyPrefix           = "tgk_"
	PlatformTokenPrefix = "tgp_"
)

// keyView is an API key on the wire: never its secret or digest.
type keyView struct {
	ID        string         `json:"id"`
	Account   core.AccountID `json:"account"`
	CreatedAt *string        `json:"created_at"`
	Revoked   bool           `json:"revoked"`
}

func viewKey(k *ledger.Key) keyView {
	return keyView{ID: k.ID, Account: k.Account, CreatedAt: timestamp(k.CreatedAt), Revoked: k.Revoked}
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

// createKey: POST /v1/accounts/{id}/keys (body empty or {}) → 201 with the
// key, shown this once: only its digest is stored.
func (s *Server) createKey(w http.ResponseWriter, r *http.Request) error {
	id, err := accountID(r)
	if err != nil {
		return err
	}
	if err := decodeBody(w, r, &struct{}{}, true); err != nil {
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
	k := ledger.Key{ID: keyID, Account: id, Digest: d, CreatedAt: s.now()}
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

// listKeys: GET /v1/accounts/{id}/keys, oldest first, without secrets.
func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) error {
	a, err := s.pathAccount(r)
	if err != nil {
		return err
	}
	id := a.ID
	keys, err := s.store.Keys(r.Context(), id)
	if err != nil {
		return ledgerError(err, unknownAccount(id))
	}
	slices.SortFunc(keys, func(a, b ledger.Key) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	views := make([]keyView, len(keys))
	for i := range keys {
		views[i] = viewKey(&keys[i])
	}
	return writeJSON(w, http.StatusOK, struct {
		Keys []keyView `json:"keys"`
	}{views})
}

// revokeKey: DELETE /v1/accounts/{id}/keys/{key_id}. Revoking a revoked
// key answers 200 again and unbinds it again; another account's key is 404.
func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) error {
	id, err := accountID(r)
	if err != nil {
		return err
	}
	keyID := r.PathValue("key_id")
	notFound := problemf(codeNotFound, "account %s has no key %q", id, keyID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.loadAccount(r, id); err != nil {
		return err
	}
	keys, err := s.store.Keys(r.Context(), id)
	if err != nil {
		return ledgerError(err, unknownAccount(id))
	}
	i := slices.IndexFunc(keys, func(k ledger.Key) bool { return k.ID == keyID })
	if i < 0 {
		return notFound
	}
	before := keys[i]
	after, err := s.store.RevokeKey(r.Context(), id, keyID)
	if err != nil {
		return ledgerError(err, notFound)
	}
	var f followUp
	if !before.Revoked {
		s.record(r.Context(), &f, actionKeyRevoke, keyTarget(id, keyID), viewKey(&before), viewKey(&after))
	}
	s.pub.RevokeKey(after.Digest)
	return writeJSON(w, http.StatusOK, struct {
		keyView
		followUp
	}{viewKey(&after), f})
}
