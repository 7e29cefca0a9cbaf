package admin

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// Listing bounds: the views are for people and scripts, not exports.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// queryLimit reads ?limit=, 1..MaxListLimit, default DefaultListLimit.
func queryLimit(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return DefaultListLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxListLimit {
		return 0, problemf(codeInvalidQuery, "limit must be an integer from 1 to %d, not %q", MaxListLimit, v)
	}
	return n, nil
}

type usageView struct {
	ID         string         `json:"id"`
	Account    core.AccountID `json:"account"`
	Source     string         `json:"source"`
	LeaseID    uint64         `json:"lease_id,omitempty"`
	Token      uint64         `json:"token,omitempty"`
	Units      core.CostUnits `json:"units"`
	OccurredAt *string        `json:"occurred_at"`
}

var usageSources = map[ledger.UsageSource]string{
	ledger.UsageLease: "lease", ledger.UsageOverage: "overage", ledger.UsagePostPaid: "post_paid",
}

// usage: GET /v1/accounts/{id}/usage?limit=N — the account's most recent
// billed usage events, newest first, as far back as the ledger keeps them.
func (s *Server) usage(w http.ResponseWriter, r *http.Request) error {
	id, err := accountID(r)
	if err != nil {
		return err
	}
	limit, err := queryLimit(r)
	if err != nil {
		return err
	}
	if _, err := s.loadAccount(r, id); err != nil {
		return err
	}
	events, err := s.store.UsageOf(r.Context(), id, limit)
	if err != nil {
		return ledgerError(err, unknownAccount(id))
	}
	views := make([]usageView, len(events))
	for i, e := range events {
		views[i] = usageView{
			ID: hex.EncodeToString(e.ID[:]), Account: e.Account, Source: usageSources[e.Source],
			LeaseID: e.LeaseID, Token: e.Token, Units: e.Units, OccurredAt: timestamp(e.OccurredAt),
		}
	}
	return writeJSON(w, http.StatusOK, struct {
		Account core.AccountID `json:"account"`
		Usage   []usageView    `json:"usage"`
	}{id, views})
}

type leaseView struct {
	ID        uint64         `json:"id"`
	Account   core.AccountID `json:"account"`
	Token     uint64         `json:"token"`
	Granted   core.CostUnits `json:"granted"`
	Used      core.CostUnits `json:"used"`
	Credited  core.CostUnits `json:"credited"`
	State     string         `json:"state"`
	GrantedAt *string        `json:"granted_at"`
	ExpiresAt *string        `json:"expires_at"`
}

var leaseStates = map[ledger.LeaseState]string{
	ledger.LeaseActive: "active", ledger.LeaseReleased: "released", ledger.LeaseReclaimed: "reclaimed",
}

// leases: GET /v1/leases?active=true — every lease, or only active ones.
func (s *Server) leases(w http.ResponseWriter, r *http.Request) error {
	active := false
	if v := r.URL.Query().Get("active"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return problemf(codeInvalidQuery, "active must be true or false, not %q", v)
		}
		active = b
	}
	ls, err := s.store.Leases(r.Context(), active)
	if err != nil {
		return ledgerError(err, problemf(codeNotFound, "no leases"))
	}
	views := make([]leaseView, len(ls))
	for i, l := range ls {
		views[i] = leaseView{
			ID: l.ID, Account: l.Account, Token: l.Token, Granted: l.Granted, Used: l.Used, Credited: l.Credited,
			State: leaseStates[l.State], GrantedAt: timestamp(l.GrantedAt), ExpiresAt: timestamp(l.ExpiresAt),
		}
	}
	return writeJSON(w, http.StatusOK, struct {
		Leases []leaseView `json:"leases"`
	}{views})
}

type auditView struct {
	Seq    uint64          `json:"seq"`
	At     *string         `json:"at"`
	Actor  string          `json:"actor"`
	Action string          `json:"action"`
	Target string          `json:"target"`
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
}

// auditLog: GET /v1/audit?after=SEQ&limit=N — records with Seq > after,
// oldest first. next_after is the cursor for the following page (the last
// Seq returned, or after itself when the page is empty).
func (s *Server) auditLog(w http.ResponseWriter, r *http.Request) error {
	var after uint64
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return problemf(codeInvalidQuery, "after must be a non-negative integer, not %q", v)
		}
		after = n
	}
	limit, err := queryLimit(r)
	if err != nil {
		return err
	}
	recs, err := s.store.AuditLog(r.Context(), after, limit)
	if err != nil {
		return ledgerError(err, problemf(codeNotFound, "no audit records"))
	}
	views := make([]auditView, len(recs))
	next := after
	for i, rec := range recs {
		views[i] = auditView{
			Seq: rec.Seq, At: timestamp(rec.At), Actor: rec.Actor, Action: rec.Action, Target: rec.Target,
			Before: rawOrNull(rec.Before), After: rawOrNull(rec.After),
		}
		next = max(next, rec.Seq)
	}
	return writeJSON(w, http.StatusOK, struct {
		Records   []auditView `json:"records"`
		NextAfter uint64      `json:"next_after"`
	}{views, next})
}
