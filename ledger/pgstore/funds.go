package pgstore

// Funds announcements: how every node of a fleet learns that another
// node's usage moved an account's funding, so that /v1/admission and the
// shards' funding evidence are fleet-wide.
//
// The change log (changes.go) leaves money out: it is the data plane's
// traffic, one settlement per node every 100 ms per busy account, and a
// logged row for each would grow the log with requests. What another node
// needs is only to know that an account's funding evidence may have moved,
// and to read it again. So a transaction that changes what an account can
// still spend (ledger.Spendable: usage settled or billed, a lease
// forfeited, a deposit, a budget) NOTIFYs FundsChannel with those
// accounts' ids, in the same transaction (the scripts find them: pgTx is a
// txn.FundsAnnouncer): PostgreSQL delivers it when, and only if, the
// transaction commits. Grants, extensions and the release of
// units a lease did not use move units between an account's balance and
// its leases and announce nothing (a release that bills what the lease used
// beyond its settlements does announce).
//
// Nothing is stored, so nothing can be replayed: a listener that was not
// connected may have missed announcements, and reads every account's
// evidence again when it (re)connects (FollowFunds). An announcement names
// an account whose own funding moved; the evidence of it and of every
// account below it may have changed with it, and of nothing above it.

import (
	"context"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/txn"
)

// FundsChannel is the channel funding moves are announced on. The payload
// is the accounts' ids separated by spaces, or fundsEverything when they
// would not fit in one notification.
const FundsChannel = "tollgated_funds"

// fundsEverything is the payload that says "read every account again".
const fundsEverything = "*"

// maxFundsPayload keeps a payload under PostgreSQL's 8000-byte limit on a
// notification.
const maxFundsPayload = 7900

// fundsPayload names the accounts ids, or says everything moved when they
// would not fit in one notification.
func fundsPayload(ids []core.AccountID) string {
	var payload strings.Builder
	for _, id := range ids {
		if payload.Len()+1+len(id) > maxFundsPayload {
			return fundsEverything
		}
		if payload.Len() > 0 {
			payload.WriteByte(' ')
		}
		payload.WriteString(string(id))
	}
	return payload.String()
}

// parseFunds reads an announcement's payload: the accounts named, or all
// when it says everything may have moved.
func parseFunds(payload string) (ids []core.AccountID, all bool) {
	if payload == fundsEverything {
		return nil, true
	}
	for _, f := range strings.Fields(payload) {
		id := core.AccountID(f)
		if id.Validate() != nil {
			return nil, true // not ours, or newer than this build: read everything
		}
		ids = append(ids, id)
	}
	return ids, false
}

// FollowFunds calls fn with the accounts of every funds announcement as it
// arrives, and with all set after every (re)connection, since
// announcements made while it was not listening are lost. Calls are
// sequential; it uses a connection of its own, reconnects as Listen does,
// and returns when ctx ends or fn returns an error.
func (s *Store) FollowFunds(ctx context.Context, fn func(ids []core.AccountID, all bool) error) error {
	return s.listenLoop(ctx, FundsChannel, "tollgated-funds",
		func(context.Context, *pgx.Conn) error {
			if err := fn(nil, true); err != nil {
				return errListener{err}
			}
			return nil
		},
		func(payload string) error {
			ids, all := parseFunds(payload)
			if !all && len(ids) == 0 {
				return nil
			}
			return fn(ids, all)
		})
}

// subtreesSQL selects every account in the subtrees of $1 (the accounts
// themselves included) and every ancestor of theirs, in one statement.
const subtreesSQL = `WITH RECURSIVE below (id) AS (
		SELECT id FROM accounts WHERE id = ANY($1::text[])
		UNION
		SELECT a.id FROM accounts a JOIN below b ON a.parent = b.id),
	above (id, parent) AS (
		SELECT id, parent FROM accounts WHERE id = ANY($1::text[])
		UNION
		SELECT a.id, a.parent FROM accounts a JOIN above u ON a.id = u.parent)
	SELECT ` + accountColumns + ` FROM accounts
	WHERE id IN (SELECT id FROM below) OR id IN (SELECT id FROM above)`

// EvidenceBelow returns the funding evidence of ids and of every account
// below them, read in one statement of one transaction: what a node
// republishes when funds announcements name ids. Unknown ids are left out.
func (s *Store) EvidenceBelow(ctx context.Context, ids []core.AccountID) (map[core.AccountID]ledger.Evidence, error) {
	valid := make([]string, 0, len(ids))
	for _, id := range ids {
		if id.Validate() == nil {
			valid = append(valid, string(id))
		}
	}
	out := make(map[core.AccountID]ledger.Evidence)
	if len(valid) == 0 {
		return out, nil
	}
	err := s.b.view(ctx, func(tx pgx.Tx) error {
		clear(out)
		accounts, err := collect(ctx, tx, scanAccountPtr, subtreesSQL, valid)
		if err != nil {
			return err
		}
		return evidenceBelow(accounts, valid, out)
	})
	return out, err
}

// evidenceBelow computes into out the evidence of every account of
// accounts in the subtree of one of roots, over its chain (which accounts
// holds: the query selects the roots' ancestors too).
func evidenceBelow(accounts []*ledger.Account, roots []string, out map[core.AccountID]ledger.Evidence) error {
	isRoot := make(map[core.AccountID]bool, len(roots))
	for _, r := range roots {
		isRoot[core.AccountID(r)] = true
	}
	read := among(accounts)
	for _, a := range accounts {
		an, err := txn.ReadAncestry(a.ID, read)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(an, func(a *ledger.Account) bool { return isRoot[a.ID] }) {
			continue // an ancestor of a root, selected for the chains
		}
		ev, err := ledger.EvidenceOf(an.Chain())
		if err != nil {
			return err
		}
		out[a.ID] = ev
	}
	return nil
}
