package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/tollgated/tollgated/ledger"
)

// Actors of audit records: a request's is "admin/" and the id of the
// admin token it authenticated with; changes tollgated makes on its own
// (a key reaching its expiry) are systemActor's.
const (
	adminActorPrefix = "admin/"
	systemActor      = "tollgated"
)

type actorKey struct{}

// withActor is ctx carrying the actor of the changes made under it.
func withActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// actorOf is ctx's actor; a change made without one is the system's.
func actorOf(ctx context.Context) string {
	if a, ok := ctx.Value(actorKey{}).(string); ok {
		return a
	}
	return systemActor
}

// Audit actions, one per kind of change.
const (
	actionAccountCreate       = "account.create"
	actionAccountStatus       = "account.status"
	actionAccountPolicy       = "account.policy"
	actionAccountBudget       = "account.budget"
	actionAccountDeposit      = "account.deposit"
	actionKeyCreate           = "key.create"
	actionKeyRevoke           = "key.revoke"
	actionKeyRotate           = "key.rotate"
	actionKeyExpire           = "key.expire"
	actionPlatformTokenCreate = "platform_token.create"
	actionPlatformTokenRevoke = "platform_token.revoke"
	actionAdminTokenCreate    = "admin_token.create"
	actionAdminTokenRevoke    = "admin_token.revoke"
)

// followUp reports what failed after a change was stored. Its fields are
// embedded in the change's response; both empty means all went well.
type followUp struct {
	AuditError   string `json:"audit_error,omitempty"`
	PublishError string `json:"publish_error,omitempty"`
}

// record writes the audit record of a stored change and counts it. before
// is nil for a creation. A change whose before and after encode the same
// changed nothing (a repeated status, an identical policy) and is not
// recorded. The context is detached from the request's: the change is
// stored, so its record must not be lost to a client hanging up.
func (s *Server) record(ctx context.Context, f *followUp, action, target string, before, after any) {
	var b []byte
	if before != nil {
		var err error
		if b, err = json.Marshal(before); err != nil {
			s.auditFailed(f, action, target, err)
			return
		}
	}
	a, err := json.Marshal(after)
	if err != nil {
		s.auditFailed(f, action, target, err)
		return
	}
	if b != nil && bytes.Equal(a, b) {
		return
	}
	s.metrics.mutations.WithLabelValues(action).Inc()
	rec := ledger.AuditRecord{At: s.now(), Actor: actorOf(ctx), Action: action, Target: target, Before: b, After: a}
	if _, err := s.store.Audit(context.WithoutCancel(ctx), rec); err != nil {
		s.auditFailed(f, action, target, err)
		return
	}
	s.log.Info().Str("action", action).Str("target", target).Str("actor", rec.Actor).Msg("admin: change stored")
}

func (s *Server) auditFailed(f *followUp, action, target string, err error) {
	err = fmt.Errorf("admin: audit record for %s %s: %w", action, target, err)
	s.log.Error().Err(err).Msg("admin: change stored but its audit record failed")
	s.metrics.errors.WithLabelValues(codeAuditFailed).Inc()
	f.AuditError = err.Error()
}

// publish hands an account's new state to the data plane.
func (s *Server) publish(f *followUp, acct ledger.Account) {
	if err := s.pub.AccountChanged(acct); err != nil {
		err = fmt.Errorf("admin: publishing account %s: %w", acct.ID, err)
		s.log.Warn().Err(err).Msg("admin: change stored but not published")
		s.metrics.errors.WithLabelValues(codePublishFailed).Inc()
		f.PublishError = err.Error()
	}
}
