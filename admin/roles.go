package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"

	"github.com/tollgated/tollgated/ledger"
)

// Roles and permissions. Every admin token has a role (ledger.AdminRoles),
// and a role is a fixed set of permissions; every route and method needs
// one permission (or none: /v1/whoami), checked after authentication and
// before the request's body or query is read. A request whose token lacks
// it is answered 403 forbidden naming the permission, and the refusal is
// recorded in the audit log (action request.forbidden), so an operator can
// see who tried what.
//
// The permissions are named after the audit actions of what they allow,
// plus read (every GET of the API), metrics (GET /metrics and its recent
// history), debug (the profiler) and account.close.
const (
	permRead                = "read"
	permMetrics             = "metrics"
	permDebug               = "debug"
	permAccountCreate       = actionAccountCreate
	permAccountStatus       = actionAccountStatus // active and suspended
	permAccountClose        = "account.close"     // closed: terminal, expires the allowance left
	permAccountPolicy       = actionAccountPolicy
	permAccountBudget       = actionAccountBudget
	permAccountDeposit      = actionAccountDeposit
	permKeyCreate           = actionKeyCreate
	permKeyRevoke           = actionKeyRevoke
	permKeyRotate           = actionKeyRotate
	permPlatformTokenCreate = actionPlatformTokenCreate
	permPlatformTokenRevoke = actionPlatformTokenRevoke
	permAdminTokenCreate    = actionAdminTokenCreate
	permAdminTokenRevoke    = actionAdminTokenRevoke
)

// permNone marks a route any live admin token may call.
const permNone = ""

// operatorPermissions are what an operator does day to day: accounts and
// their policies, keys, and money in — deposits and budgets, each of
// which only adds funds (a budget's new allowance; the old one's rest
// expires, as at a rollover). Not given: closing an account (terminal:
// its allowance left expires and it never receives another), platform
// tokens (a platform token reports post-paid usage for any account, so it
// can bill without bound), admin tokens (an operator cannot raise its own
// power), and the profiler (its command line and heap can hold secrets).
var operatorPermissions = []string{
	permRead, permMetrics, permAccountCreate, permAccountStatus, permAccountPolicy, permAccountBudget,
	permAccountDeposit, permKeyCreate, permKeyRevoke, permKeyRotate,
}

// rolePermissions are each role's permissions, in a stable order (they
// are listed by GET /v1/whoami).
var rolePermissions = map[string][]string{
	ledger.RoleAdmin: slices.Concat(operatorPermissions, []string{permAccountClose, permPlatformTokenCreate,
		permPlatformTokenRevoke, permAdminTokenCreate, permAdminTokenRevoke, permDebug}),
	ledger.RoleOperator: operatorPermissions,
	ledger.RoleViewer:   {permRead, permMetrics},
	ledger.RoleMetrics:  {permMetrics},
}

// may reports whether role has permission perm; every role has permNone.
// A role this build does not know has no permission.
func may(role, perm string) bool {
	return perm == permNone || slices.Contains(rolePermissions[role], perm)
}

// caller is the admin token a request authenticated with.
type caller struct {
	id, name, role string
}

type callerKey struct{}

func withCaller(ctx context.Context, c caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// callerOf is the request's admin token; a request without one (never
// the case behind dispatch) has no role, so no permission.
func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

// actionForbidden is the audit action of a refused request.
const actionForbidden = "request.forbidden"

// forbiddenRecord is what the audit log keeps of a refused request: the
// method, the permission it needed and the role the token had. The record's
// target is the request's path (escaped) and its actor the token.
type forbiddenRecord struct {
	Method     string `json:"method"`
	Permission string `json:"permission"`
	Role       string `json:"role"`
	// Unrecorded is how many refusals of the same token before this one
	// were paced out of the audit log (refusals.go).
	Unrecorded uint64 `json:"unrecorded,omitempty"`
}

// require refuses r unless its token has perm: 403 forbidden naming the
// permission, counted by permission and recorded in the audit log. A
// failure to record is logged and counted (audit-failed); the refusal
// stands either way.
func (s *Server) require(r *http.Request, perm string) error {
	c := callerOf(r.Context())
	if may(c.role, perm) {
		return nil
	}
	s.metrics.forbidden.WithLabelValues(perm).Inc()
	if record, dropped := s.refusals.admit(c.id, s.now()); record {
		s.recordRefusal(r, forbiddenRecord{Method: methodLabel(r.Method), Permission: perm, Role: c.role, Unrecorded: dropped})
	}
	e := problemf(codeForbidden, "the admin token %s has the role %s, which lacks the permission %s", c.id, c.role, perm)
	e.permission = perm
	return e
}

// whoami: GET /v1/whoami — the admin token the request came with: its id,
// name, role and permissions, without its secret. Every role may ask, so
// a client (the dashboard, tollgatectl) can show only what will work.
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) error {
	if _, err := readQuery(r); err != nil {
		return err
	}
	c := callerOf(r.Context())
	perms := rolePermissions[c.role]
	if perms == nil {
		perms = []string{}
	}
	return writeJSON(w, http.StatusOK, struct {
		ID          string   `json:"id"`
		Name        string   `json:"name"`
		Role        string   `json:"role"`
		Permissions []string `json:"permissions"`
	}{c.id, c.name, c.role, perms})
}

// recordRefusal writes the audit record of a refused request. It is not a
// change: tollgated_admin_mutations_total does not count it.
func (s *Server) recordRefusal(r *http.Request, what forbiddenRecord) {
	after, err := json.Marshal(what)
	if err == nil {
		rec := ledger.AuditRecord{At: s.now(), Actor: actorOf(r.Context()), Action: actionForbidden,
			Target: auditedPath(r.URL.EscapedPath()), After: after}
		_, err = s.store.Audit(context.WithoutCancel(r.Context()), rec)
	}
	if err != nil {
		s.log.Error().Err(err).Str("path", r.URL.Path).Msg("admin: a refused request's audit record failed")
		s.metrics.errors.WithLabelValues(codeAuditFailed).Inc()
	}
}
