package admin

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

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

// usage: GET /v1/accounts/{id}/usage?limit=&cursor= — the account's
// billed usage events, newest first, as far back as the ledger keeps them.
func (s *Server) usage(w http.ResponseWriter, r *http.Request) error {
	id, err := accountID(r)
	if err != nil {
		return err
	}
	q, err := readQuery(r, "limit", "cursor")
	if err != nil {
		return err
	}
	p, err := q.page(listUsage)
	if err != nil {
		return err
	}
	events, next, err := s.store.ListUsage(r.Context(), id, ledger.Page{After: p.after, Limit: p.limit})
	if err != nil {
		return ledgerError(pageError(err), unknownAccount(id))
	}
	views := make([]usageView, len(events))
	for i, e := range events {
		views[i] = usageView{
			ID: hex.EncodeToString(e.ID[:]), Account: e.Account, Source: usageSources[e.Source],
			LeaseID: e.LeaseID, Token: e.Token, Units: e.Units, OccurredAt: timestamp(e.OccurredAt),
		}
	}
	return writeJSON(w, http.StatusOK, newList(listUsage, views, next))
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

// leases: GET /v1/leases?active=&limit=&cursor= — every lease, or only
// active ones, in id order.
func (s *Server) leases(w http.ResponseWriter, r *http.Request) error {
	q, err := readQuery(r, "active", "limit", "cursor")
	if err != nil {
		return err
	}
	active, err := q.boolean("active")
	if err != nil {
		return err
	}
	p, err := q.page(listLeases)
	if err != nil {
		return err
	}
	ls, next, err := s.store.ListLeases(r.Context(), active, ledger.Page{After: p.after, Limit: p.limit})
	if err != nil {
		return ledgerError(pageError(err), problemf(codeNotFound, "no leases"))
	}
	views := make([]leaseView, len(ls))
	for i, l := range ls {
		views[i] = leaseView{
			ID: l.ID, Account: l.Account, Token: l.Token, Granted: l.Granted, Used: l.Used, Credited: l.Credited,
			State: leaseStates[l.State], GrantedAt: timestamp(l.GrantedAt), ExpiresAt: timestamp(l.ExpiresAt),
		}
	}
	return writeJSON(w, http.StatusOK, newList(listLeases, views, next))
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

// auditLog: GET /v1/audit?limit=&cursor= — records oldest first. The log
// only grows, so next_cursor is never null: it is where to look for the
// next records, and an empty page with it means there are none yet.
func (s *Server) auditLog(w http.ResponseWriter, r *http.Request) error {
	q, err := readQuery(r, "limit", "cursor")
	if err != nil {
		return err
	}
	p, err := q.page(listAudit)
	if err != nil {
		return err
	}
	var after uint64
	if p.after != "" {
		if after, err = strconv.ParseUint(p.after, 10, 64); err != nil {
			return codeProblem(codeInvalidQuery, "cursor", "is not a cursor of this listing")
		}
	}
	recs, err := s.store.AuditLog(r.Context(), after, p.limit)
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
	return writeJSON(w, http.StatusOK, newList(listAudit, views, strconv.FormatUint(next, 10)))
}
