package admin

import (
	"net/http"
	"slices"

	"github.com/tollgated/tollgated/ledger"
)

// tokenView is a platform token on the wire: never its secret or digest.
type tokenView struct {
	ID        string  `json:"id"`
	CreatedAt *string `json:"created_at"`
	Revoked   bool    `json:"revoked"`
}

func viewToken(t *ledger.PlatformToken) tokenView {
	return tokenView{ID: t.ID, CreatedAt: timestamp(t.CreatedAt), Revoked: t.Revoked}
}

func tokenTarget(id string) string { return "platform-tokens/" + id }

// createPlatformToken: POST /v1/platform-tokens (body empty or {}) → 201
// with a token for seed-000 callers (agent runtimes), shown this once. Its
// digest is taken under the server secret, like API keys, so the data plane
// verifies both the same way.
func (s *Server) createPlatformToken(w http.ResponseWriter, r *http.Request) error {
	o, err := decodeObject(w, r, true)
	if err != nil {
		return err
	}
	if err := o.only(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id, secret, d, err := s.mint(PlatformTokenPrefix, "ptk_")
	if err != nil {
		return err
	}
	t := ledger.PlatformToken{ID: id, Digest: d, CreatedAt: s.now()}
	if err := s.store.AddPlatformToken(r.Context(), t); err != nil {
		return ledgerError(err, problemf(codeNotFound, "platform token %q", id))
	}
	var f followUp
	s.record(r.Context(), &f, actionPlatformTokenCreate, tokenTarget(id), nil, viewToken(&t))
	s.pub.BindPlatformToken(d)
	w.Header().Set("Location", "/v1/platform-tokens/"+id)
	return writeJSON(w, http.StatusCreated, struct {
		tokenView
		Token string `json:"token"`
		followUp
	}{viewToken(&t), secret, f})
}

// listPlatformTokens: GET /v1/platform-tokens?limit=&cursor=, oldest
// first, no secrets.
func (s *Server) listPlatformTokens(w http.ResponseWriter, r *http.Request) error {
	q, err := readQuery(r, "limit", "cursor")
	if err != nil {
		return err
	}
	p, err := q.page(listPlatformTokens)
	if err != nil {
		return err
	}
	tokens, err := s.store.PlatformTokens(r.Context())
	if err != nil {
		return ledgerError(err, problemf(codeNotFound, "no platform tokens"))
	}
	tokens, next, err := pageOf(tokens, p, func(t *ledger.PlatformToken) int64 { return t.CreatedAt },
		func(t *ledger.PlatformToken) string { return t.ID })
	if err != nil {
		return err
	}
	views := make([]tokenView, len(tokens))
	for i := range tokens {
		views[i] = viewToken(&tokens[i])
	}
	return writeJSON(w, http.StatusOK, newList(listPlatformTokens, views, next))
}

// revokePlatformToken: DELETE /v1/platform-tokens/{id}; repeatable.
func (s *Server) revokePlatformToken(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	notFound := problemf(codeNotFound, "no platform token %q", id)
	s.mu.Lock()
	defer s.mu.Unlock()
	tokens, err := s.store.PlatformTokens(r.Context())
	if err != nil {
		return ledgerError(err, notFound)
	}
	i := slices.IndexFunc(tokens, func(t ledger.PlatformToken) bool { return t.ID == id })
	if i < 0 {
		return notFound
	}
	before := tokens[i]
	after, err := s.store.RevokePlatformToken(r.Context(), id)
	if err != nil {
		return ledgerError(err, notFound)
	}
	var f followUp
	if !before.Revoked {
		s.record(r.Context(), &f, actionPlatformTokenRevoke, tokenTarget(id), viewToken(&before), viewToken(&after))
	}
	s.pub.RevokePlatformToken(after.Digest)
	return writeJSON(w, http.StatusOK, struct {
		tokenView
		followUp
	}{viewToken(&after), f})
}
