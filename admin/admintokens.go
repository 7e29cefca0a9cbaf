package admin

import (
	"crypto/sha256"
	"net/http"
	"strings"

	"github.com/tollgated/tollgated/ledger"
)

// adminTokenView is an admin token on the wire: never its secret or digest.
type adminTokenView struct {
	ID        string  `json:"id"`
	Name      string  `json:"name"`
	Role      string  `json:"role"`
	CreatedAt *string `json:"created_at"` // null for the bootstrap token
	Revoked   bool    `json:"revoked"`
}

func viewAdminToken(t *ledger.AdminToken) adminTokenView {
	return adminTokenView{ID: t.ID, Name: t.Name, Role: t.Role, CreatedAt: optionalTime(t.CreatedAt), Revoked: t.Revoked}
}

func adminTokenTarget(id string) string { return "admin-tokens/" + id }

// createAdminToken: POST /v1/admin-tokens {"name":"…","role":"…"} → 201
// with a new admin token, shown this once (the ledger keeps its SHA-256).
// It works at once, beside every other live admin token. The role is
// admin unless the body says otherwise: the power every token had before
// roles, so a client that names none gets what it always got.
func (s *Server) createAdminToken(w http.ResponseWriter, r *http.Request) error {
	o, err := decodeObject(w, r, false)
	if err != nil {
		return err
	}
	if err := o.only("name", "role"); err != nil {
		return err
	}
	role, given, err := o.str("role", false, maxIDLen)
	if err != nil {
		return err
	}
	if !given {
		role = ledger.RoleAdmin
	} else if !ledger.ValidRole(role) {
		return fieldProblem("role", "must be one of %s, not %q", strings.Join(ledger.AdminRoles, ", "), role)
	}
	name, _, err := o.str("name", true, MaxNameLen)
	if err != nil {
		return err
	}
	if name == "" {
		return fieldProblem("name", "must not be empty: say whose token it is")
	}
	if err := checkName("name", name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id, err := newID(s.rand, "atk_")
	if err != nil {
		return err
	}
	secret, err := newSecret(s.rand, AdminTokenPrefix)
	if err != nil {
		return err
	}
	t := ledger.AdminToken{ID: id, Name: name, Digest: sha256.Sum256([]byte(secret)), CreatedAt: s.now(), Role: role}
	if err := s.store.AddAdminToken(r.Context(), t); err != nil {
		return ledgerError(err, problemf(codeNotFound, "admin token %q", id))
	}
	var f followUp
	s.record(r.Context(), &f, actionAdminTokenCreate, adminTokenTarget(id), nil, viewAdminToken(&t))
	w.Header().Set("Location", "/v1/admin-tokens/"+id)
	return writeJSON(w, http.StatusCreated, struct {
		adminTokenView
		Token string `json:"token"`
		followUp
	}{viewAdminToken(&t), secret, f})
}

// listAdminTokens: GET /v1/admin-tokens?limit=&cursor=, oldest first (the
// bootstrap token first of all), no secrets.
func (s *Server) listAdminTokens(w http.ResponseWriter, r *http.Request) error {
	q, err := readQuery(r, "limit", "cursor")
	if err != nil {
		return err
	}
	p, err := q.page(listAdminTokens)
	if err != nil {
		return err
	}
	tokens, err := s.store.AdminTokens(r.Context())
	if err != nil {
		return ledgerError(err, problemf(codeNotFound, "no admin tokens"))
	}
	tokens, next, err := pageOf(tokens, p, func(t *ledger.AdminToken) int64 { return t.CreatedAt },
		func(t *ledger.AdminToken) string { return t.ID })
	if err != nil {
		return err
	}
	views := make([]adminTokenView, len(tokens))
	for i := range tokens {
		views[i] = viewAdminToken(&tokens[i])
	}
	return writeJSON(w, http.StatusOK, newList(listAdminTokens, views, next))
}

// revokeAdminToken: DELETE /v1/admin-tokens/{id}; repeatable. The last
// live token with the admin role cannot be revoked (409 conflict): nobody
// could undo it, nor make another admin. A request may revoke the token it
// came with.
func (s *Server) revokeAdminToken(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	notFound := problemf(codeNotFound, "no admin token %q", id)
	s.mu.Lock()
	defer s.mu.Unlock()
	tokens, err := s.store.AdminTokens(r.Context())
	if err != nil {
		return ledgerError(err, notFound)
	}
	var before *ledger.AdminToken
	live := 0
	for i := range tokens {
		if tokens[i].ID == id {
			before = &tokens[i]
		}
		if !tokens[i].Revoked && tokens[i].Role == ledger.RoleAdmin {
			live++
		}
	}
	if before == nil {
		return notFound
	}
	if !before.Revoked && before.Role == ledger.RoleAdmin && live == 1 {
		return problemf(codeConflict, "%s is the last live admin token with the admin role; create another before revoking it", id)
	}
	after, err := s.store.RevokeAdminToken(r.Context(), id)
	if err != nil {
		return ledgerError(err, notFound)
	}
	var f followUp
	if !before.Revoked {
		s.record(r.Context(), &f, actionAdminTokenRevoke, adminTokenTarget(id), viewAdminToken(before), viewAdminToken(&after))
	}
	return writeJSON(w, http.StatusOK, struct {
		adminTokenView
		followUp
	}{viewAdminToken(&after), f})
}
