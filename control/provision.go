package control

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/policy"
)

// Provisioner carries ledger state to the data plane: accounts (compiled
// snapshots), keys, platform tokens and funding evidence. It is what the
// admin API calls after every mutation (its Publisher), what loads a node
// at start, and what runs the ledger's periodic work (reclaim, rollover).
// Changes are pushed to the shards through the plane the moment they are
// made: a suspension stops admissions within one plane iteration.
type Provisioner struct {
	plane Target
	store ledger.Store
	// Now reads the clock; tests inject one.
	Now func() int64
	// Grace is how long past a lease's expiry its holder may still release
	// it before the ledger forfeits its remainder.
	Grace time.Duration
	// OnError, if set, hears credential changes that could not be pushed
	// to the shards (the daemon logs them).
	OnError func(error)
	// EventRetention is how long the ledger remembers a usage event's id
	// after ingesting it: a re-sent event is a duplicate within it and new
	// after it. It bounds the ledger's growth (DefaultEventRetention).
	EventRetention time.Duration
	// ForgetEvery spaces maintenance's forgetting of event ids
	// (DefaultForgetEvery if 0): each pass is a ledger transaction.
	ForgetEvery time.Duration

	keyIDs keyIDs
	forgot int64 // when maintenance last forgot event ids (0: never) // KeysUsed's map from a key's principal to its id
}

// keyIDs maps the principal a key authenticates as to the key's id.
type keyIDs struct {
	mu  sync.Mutex
	ids map[core.Principal]string
}

// DefaultEventRetention outlasts any replay of the node's own spool (a node
// down for days replays what it had not marked exported) and the retries
// of a post-paid reporter.
const DefaultEventRetention = 7 * 24 * time.Hour

// DefaultForgetEvery: ids are forgotten once a minute, not at every
// maintenance pass. Forgetting is housekeeping against a retention of
// days; a pass every second cost each node a ledger transaction a second.
const DefaultForgetEvery = time.Minute

// forgetBatch and forgetBatches bound one maintenance pass's forgetting:
// the first pass after a long outage catches up over several passes
// instead of holding the ledger's write lock for long.
const (
	forgetBatch   = 4096
	forgetBatches = 16
)

// Target is where a Provisioner publishes: the running Plane, or a
// simulator driving the plane's state machine.
type Target interface {
	Install(snap *core.Snapshot) error
	BindKey(d credential.Digest, account core.AccountID) error
	RevokeKey(d credential.Digest) error
	BindPlatformToken(d credential.Digest) error
	RevokePlatformToken(d credential.Digest) error
	// FundingChanged publishes the evidence of every account of evs, read
	// from the ledger by a read that began at readAt, in one step of the
	// plane.
	FundingChanged(evs map[core.AccountID]core.FundingEvidence, readAt int64)
}

// NewProvisioner returns a provisioner publishing store's state to p.
func NewProvisioner(p Target, store ledger.Store) *Provisioner {
	return &Provisioner{plane: p, store: store, Now: func() int64 { return time.Now().UnixNano() },
		Grace: 10 * time.Second, EventRetention: DefaultEventRetention}
}

const provisionTimeout = 10 * time.Second

// AccountChanged republishes acct: its snapshot when the policy generation
// moved, and the funding evidence of it and of every account below it
// (their evidence is the tightest scope of their chain).
func (v *Provisioner) AccountChanged(acct ledger.Account) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), provisionTimeout)
	defer cancel()
	ctx, span := startSpan(ctx, "provision.account", attrAccount.String(string(acct.ID)))
	defer func() { endSpan(span, err) }()
	if err := v.install(ctx, acct); err != nil {
		return err
	}
	ids, err := v.subtree(ctx, acct.ID)
	if err != nil {
		return err
	}
	// Descendants inherit standing and their generation includes acct's:
	// reinstall them (a no-op for those whose snapshot did not move).
	for _, id := range ids[1:] {
		d, err := v.store.Account(ctx, id)
		if err != nil {
			return err
		}
		if err := v.install(ctx, d); err != nil {
			return err
		}
	}
	return v.refreshEvidence(ctx, ids)
}

// install compiles acct and installs it on every shard; an older or equal
// generation than the one installed is not an error (nothing to do).
//
// A snapshot carries the account's effective standing: the worst status of
// its chain (closed over suspended over active), naming the scope it comes
// from, so suspending an org or a workspace stops every account below it
// at once — on /v1/check, the staged routes and /v1/admission — and
// reactivating it restores them. Its generation is the sum of the chain's
// generations, which grows whenever any of them changes, so a change of
// an ancestor reinstalls every descendant, and every node computes the
// same number.
func (v *Provisioner) install(ctx context.Context, acct ledger.Account) error {
	c, err := policy.Compile(acct)
	if err != nil {
		return err
	}
	snap := c.Snapshot
	for parent := acct.Parent; parent != ""; {
		snap.Ancestors = append(snap.Ancestors, parent)
		pa, err := v.store.Account(ctx, parent)
		if err != nil {
			return fmt.Errorf("control: ancestor %s of %s: %w", parent, acct.ID, err)
		}
		snap.Generation += pa.PolicyGeneration
		if worse(pa.Status, snap.Status) {
			snap.Status, snap.StatusScope = pa.Status, pa.Scope
		}
		parent = pa.Parent
	}
	if err := v.plane.Install(snap); err != nil && !errors.Is(err, core.ErrOlderGeneration) {
		return err
	}
	return nil
}

// worse reports whether standing a stops an account more than b does:
// closed over suspended over active. Ties keep the account closest to the
// leaf, which install meets first.
func worse(a, b core.Status) bool { return rank(a) > rank(b) }

func rank(s core.Status) int {
	switch s {
	case core.StatusClosed:
		return 2
	case core.StatusSuspended:
		return 1
	}
	return 0
}

// refreshEvidence reads ids' funding evidence from the ledger and publishes
// it, in one plane command; accounts the ledger had refused funding may ask
// again if it shows more money.
func (v *Provisioner) refreshEvidence(ctx context.Context, ids []core.AccountID) error {
	readAt := v.Now()
	evs := make(map[core.AccountID]ledger.Evidence, len(ids))
	for _, id := range ids {
		ev, err := v.store.Evidence(ctx, id)
		if err != nil {
			return err
		}
		evs[id] = ev
	}
	v.plane.FundingChanged(evs, readAt)
	return nil
}

// refreshBelow republishes the evidence of roots and of every account
// below them: on a ledger that reads whole subtrees (pgstore), one
// statement and one plane command per rootsPerRead roots.
func (v *Provisioner) refreshBelow(ctx context.Context, roots []core.AccountID) error {
	s, ok := v.store.(evidenceBelow)
	if !ok {
		for _, id := range roots {
			tree, err := v.subtree(ctx, id)
			if err != nil {
				return err
			}
			if err := v.refreshEvidence(ctx, tree); err != nil {
				return err
			}
		}
		return nil
	}
	for len(roots) > 0 {
		n := min(len(roots), rootsPerRead)
		readAt := v.Now()
		evs, err := s.EvidenceBelow(ctx, roots[:n])
		if err != nil {
			return err
		}
		v.plane.FundingChanged(evs, readAt)
		roots = roots[n:]
	}
	return nil
}

// rootsPerRead bounds the subtrees one EvidenceBelow reads, and so the
// rows of one statement and the evidence of one plane command.
const rootsPerRead = 256

// evidenceBelow is a ledger that reads the evidence of whole subtrees in
// one statement (pgstore).
type evidenceBelow interface {
	EvidenceBelow(ctx context.Context, ids []core.AccountID) (map[core.AccountID]ledger.Evidence, error)
}

// refreshAll republishes every account's funding evidence.
func (v *Provisioner) refreshAll(ctx context.Context) error {
	all, err := v.store.Accounts(ctx)
	if err != nil {
		return err
	}
	return v.refreshAccounts(ctx, all)
}

// refreshAccounts republishes the evidence of all, every account of the
// ledger: subtree by subtree from the roots, on a ledger that reads them
// whole.
func (v *Provisioner) refreshAccounts(ctx context.Context, all []ledger.Account) error {
	ids := make([]core.AccountID, 0, len(all))
	_, whole := v.store.(evidenceBelow)
	for _, a := range all {
		if !whole || a.Parent == "" {
			ids = append(ids, a.ID)
		}
	}
	if whole {
		return v.refreshBelow(ctx, ids)
	}
	return v.refreshEvidence(ctx, ids)
}

// RefreshFunding republishes the funding evidence of ids and of every
// account below them: usage on another node of a fleet moved what they
// can spend (fleet.Funds).
func (v *Provisioner) RefreshFunding(ctx context.Context, ids []core.AccountID) (err error) {
	ctx, cancel := context.WithTimeout(ctx, provisionTimeout)
	defer cancel()
	ctx, span := startSpan(ctx, "provision.funding", attrAccounts.Int(len(ids)))
	defer func() { endSpan(span, err) }()
	return v.refreshBelow(ctx, ids)
}

// RefreshAllFunding republishes every account's funding evidence: what a
// node of a fleet does when it may have missed announcements. It may take
// longer than one change (refreshAllTimeout): it reads the whole ledger.
func (v *Provisioner) RefreshAllFunding(ctx context.Context) (err error) {
	ctx, cancel := context.WithTimeout(ctx, refreshAllTimeout)
	defer cancel()
	ctx, span := startSpan(ctx, "provision.funding_all")
	defer func() { endSpan(span, err) }()
	return v.refreshAll(ctx)
}

// refreshAllTimeout bounds RefreshAllFunding: a ledger of a million
// accounts reads in a few seconds subtree by subtree.
const refreshAllTimeout = time.Minute

// UsageChanged is the exporter's hook: post-paid usage moved balances of
// ids' chains, so every account sharing a root with them is refreshed.
func (v *Provisioner) UsageChanged(ids []core.AccountID) {
	ctx, cancel := context.WithTimeout(context.Background(), provisionTimeout)
	defer cancel()
	ctx, span := startSpan(ctx, "provision.usage", attrAccounts.Int(len(ids)))
	defer span.End()
	roots := make(map[core.AccountID]bool)
	for _, id := range ids {
		if root, err := v.rootOf(ctx, id); err == nil {
			roots[root] = true
		}
	}
	for root := range roots {
		tree, err := v.subtree(ctx, root)
		if err != nil {
			return // the next change retries
		}
		if v.refreshEvidence(ctx, tree) != nil {
			return
		}
	}
}

// BindKey, RevokeKey, BindPlatformToken and RevokePlatformToken pass
// credential changes to every shard.
// A change that cannot reach the shards within the plane's provisioning
// wait is logged by the plane's caller; the ledger holds it, and the next
// start loads it.
func (v *Provisioner) BindKey(d credential.Digest, account core.AccountID) {
	v.report(traced("provision.bind_key", func() error { return v.plane.BindKey(d, account) }))
}
func (v *Provisioner) RevokeKey(d credential.Digest) {
	v.report(traced("provision.revoke_key", func() error { return v.plane.RevokeKey(d) }))
}
func (v *Provisioner) BindPlatformToken(d credential.Digest) {
	v.report(traced("provision.bind_platform_token", func() error { return v.plane.BindPlatformToken(d) }))
}
func (v *Provisioner) RevokePlatformToken(d credential.Digest) {
	v.report(traced("provision.revoke_platform_token", func() error { return v.plane.RevokePlatformToken(d) }))
}

func (v *Provisioner) report(err error) {
	if err != nil && v.OnError != nil {
		v.OnError(err)
	}
}

// Load publishes everything the ledger holds: accounts parents first, then
// keys and platform tokens, then evidence. A node calls it before it says
// it is ready.
func (v *Provisioner) Load(ctx context.Context) (accounts, keys int, err error) {
	ctx, span := startSpan(ctx, "provision.load")
	defer func() { endSpan(span, err) }()
	all, err := v.store.Accounts(ctx)
	if err != nil {
		return 0, 0, err
	}
	byID := indexAccounts(all)
	sort.Slice(all, func(i, j int) bool {
		di, dj := depth(byID, all[i].ID), depth(byID, all[j].ID)
		if di != dj {
			return di < dj
		}
		return all[i].ID < all[j].ID
	})
	for _, a := range all {
		if err := v.install(ctx, a); err != nil {
			return 0, 0, err
		}
	}
	ks, err := v.store.Keys(ctx, "")
	if err != nil {
		return 0, 0, err
	}
	for _, k := range ks {
		if !k.Revoked {
			if err := v.plane.BindKey(credential.Digest(k.Digest), k.Account); err != nil {
				return 0, 0, err
			}
			keys++
		}
	}
	ts, err := v.store.PlatformTokens(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, t := range ts {
		if !t.Revoked {
			if err := v.plane.BindPlatformToken(credential.Digest(t.Digest)); err != nil {
				return 0, 0, err
			}
		}
	}
	return len(all), keys, v.refreshAccounts(ctx, all)
}

// Maintain runs the ledger's periodic work until stop closes: forfeit
// leases past expiry and grace, and move budgets across period boundaries
// (then republish everyone's evidence, since balances moved).
func (v *Provisioner) Maintain(stop <-chan struct{}, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		v.MaintainOnce()
	}
}

// MaintainOnce runs one maintenance pass and reports the budgets it moved.
func (v *Provisioner) MaintainOnce() (rolled int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), provisionTimeout)
	defer cancel()
	now := v.Now()
	for {
		n, err := v.store.Reclaim(ctx, now, int64(v.Grace), 256)
		if err != nil {
			return rolled, err
		}
		if n < 256 {
			break
		}
	}
	for {
		n, err := v.store.Rollover(ctx, now, 256)
		if err != nil {
			return rolled, err
		}
		rolled += n
		if n < 256 {
			break
		}
	}
	if rolled > 0 {
		if err := v.refreshAll(ctx); err != nil {
			return rolled, err
		}
	}
	// Last: forgetting is housekeeping, and a slow catch-up must not hold
	// back a budget's rollover.
	if !v.forgetDue(now) {
		return rolled, nil
	}
	return rolled, v.forgetEvents(ctx, now)
}

// forgetDue reports whether a maintenance pass at now forgets event ids:
// the first pass does, then one every ForgetEvery (and one after the clock
// stepped back, which must not hold forgetting off for as long as it
// stepped).
func (v *Provisioner) forgetDue(now int64) bool {
	every := v.ForgetEvery
	if every <= 0 {
		every = DefaultForgetEvery
	}
	if v.forgot != 0 && now >= v.forgot && now-v.forgot < int64(every) {
		return false
	}
	v.forgot = now
	return true
}

// forgetEvents drops the event ids ingested more than EventRetention ago
// (DefaultEventRetention if unset: forgetting everything would end
// duplicate detection).
func (v *Provisioner) forgetEvents(ctx context.Context, now int64) error {
	retention := v.EventRetention
	if retention <= 0 {
		retention = DefaultEventRetention
	}
	for range forgetBatches {
		n, err := v.store.ForgetEvents(ctx, now-int64(retention), forgetBatch)
		if err != nil || n < forgetBatch {
			return err
		}
	}
	return nil
}

func indexAccounts(all []ledger.Account) map[core.AccountID]*ledger.Account {
	m := make(map[core.AccountID]*ledger.Account, len(all))
	for i := range all {
		m[all[i].ID] = &all[i]
	}
	return m
}

// depth counts id's ancestors (bounded: the ledger allows three levels).
func depth(byID map[core.AccountID]*ledger.Account, id core.AccountID) int {
	d := 0
	for a := byID[id]; a != nil && a.Parent != "" && d < 8; a = byID[a.Parent] {
		d++
	}
	return d
}

// subtree lists root and every account below it, through the ledger's
// children index: a change costs the accounts it can affect, not a read of
// every account the ledger holds (which made each admin call and each
// post-paid export O(accounts)).
func (v *Provisioner) subtree(ctx context.Context, root core.AccountID) ([]core.AccountID, error) {
	out := []core.AccountID{root}
	for i := 0; i < len(out); i++ {
		kids, err := v.store.Children(ctx, out[i])
		if err != nil {
			return nil, err
		}
		out = append(out, kids...)
	}
	return out, nil
}

// rootOf follows id's parents to the top (the ledger allows three levels).
func (v *Provisioner) rootOf(ctx context.Context, id core.AccountID) (core.AccountID, error) {
	for range 8 {
		a, err := v.store.Account(ctx, id)
		if err != nil {
			return "", err
		}
		if a.Parent == "" {
			return id, nil
		}
		id = a.Parent
	}
	return id, nil
}

// KeysUsed records when keys last authenticated (ledger.Key.LastUsed),
// from the shards' coarse reports. A principal it does not know sends it to
// the ledger's key list once per call: a key made since the last look, or a
// platform token, which has no last use.
func (v *Provisioner) KeysUsed(used []plane.KeyUsed) {
	ctx, cancel := context.WithTimeout(context.Background(), provisionTimeout)
	defer cancel()
	k := &v.keyIDs
	k.mu.Lock()
	defer k.mu.Unlock()
	uses := make([]ledger.KeyUse, 0, len(used))
	reloaded := false
	for _, u := range used {
		id, ok := k.ids[u.Principal]
		if !ok && !reloaded {
			reloaded = true
			if err := v.loadKeyIDs(ctx); err != nil {
				v.report(fmt.Errorf("last use of keys: %w", err))
				return
			}
			id, ok = k.ids[u.Principal]
		}
		if ok {
			uses = append(uses, ledger.KeyUse{ID: id, At: u.At})
		}
	}
	if err := v.store.MarkKeysUsed(ctx, uses); err != nil {
		v.report(fmt.Errorf("last use of keys: %w", err))
	}
}

// loadKeyIDs rebuilds the principal → key id map from the ledger; the
// caller holds keyIDs.mu.
func (v *Provisioner) loadKeyIDs(ctx context.Context) error {
	ks, err := v.store.Keys(ctx, "")
	if err != nil {
		return err
	}
	ids := make(map[core.Principal]string, len(ks))
	for _, key := range ks {
		if !key.Revoked {
			d := credential.Digest(key.Digest)
			ids[d.Principal()] = key.ID
		}
	}
	v.keyIDs.ids = ids
	return nil
}
