package txn

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// work is one script's transaction: the Tx and the accounts and leases it
// locked. Rules mutate the held values in place (through pointers), so
// every rule of one call sees the others' effects — the events of an
// ingest batch see each other — and flush writes each changed record
// once, at the end. Comparing each record with what was locked is what
// tells a backend what to write, to index and to announce, so no script
// can forget an index, a change log entry or a funds announcement.
type work struct {
	tx       Tx
	accounts map[core.AccountID]*heldAccount
	leases   map[uint64]*heldLease
	locked   bool // accounts were locked: a second LockAccounts would break the lock order
}

type heldAccount struct{ was, now ledger.Account }

type heldLease struct {
	was ledger.LeaseRecord // as locked; zero for a new lease
	now ledger.LeaseRecord
	new bool
}

func newWork(tx Tx) *work {
	return &work{tx: tx, accounts: make(map[core.AccountID]*heldAccount), leases: make(map[uint64]*heldLease)}
}

// lockLeases locks the leases ids and holds them; it returns those that
// exist, in id order. Leases are locked before accounts (the lock order).
func (w *work) lockLeases(ids []uint64) ([]*ledger.LeaseRecord, error) {
	if w.locked {
		panic("txn: leases locked after accounts (the lock order would break)")
	}
	slices.Sort(ids)
	recs, err := w.tx.LockLeases(slices.Compact(ids))
	if err != nil {
		return nil, err
	}
	return w.holdLeases(recs), nil
}

// holdLeases holds leases the transaction locked.
func (w *work) holdLeases(recs []ledger.LeaseRecord) []*ledger.LeaseRecord {
	out := make([]*ledger.LeaseRecord, len(recs))
	for i, rec := range recs {
		h := &heldLease{was: rec, now: rec}
		h.was.Funding = slices.Clone(rec.Funding)
		w.leases[rec.ID] = h
		out[i] = &h.now
	}
	return out
}

// lockAccounts locks and holds the accounts ids and their ancestries, once
// per transaction and all in one call, so they are never locked out of
// order. Ids that are not valid account ids are not looked up: account
// reports them ErrNotFound, as it does unknown ones.
func (w *work) lockAccounts(ids ...core.AccountID) error {
	if w.locked {
		panic("txn: accounts locked twice in one transaction (the lock order would break)")
	}
	w.locked = true
	valid := make([]core.AccountID, 0, len(ids))
	for _, id := range ids {
		if id.Validate() == nil {
			valid = append(valid, id)
		}
	}
	if len(valid) == 0 {
		return nil
	}
	slices.Sort(valid)
	accts, err := w.tx.LockAccounts(slices.Compact(valid))
	if err != nil {
		return err
	}
	w.holdAccounts(accts)
	return nil
}

// holdAccounts holds accounts the transaction locked.
func (w *work) holdAccounts(accts []ledger.Account) []*ledger.Account {
	out := make([]*ledger.Account, len(accts))
	for i, a := range accts {
		h := &heldAccount{was: a, now: a}
		w.accounts[a.ID] = h
		out[i] = &h.now
	}
	return out
}

// lockLease locks lease id, then its account's ancestry.
func (w *work) lockLease(id uint64) (*ledger.LeaseRecord, ledger.Ancestry, error) {
	recs, err := w.lockLeases([]uint64{id})
	if err != nil {
		return nil, nil, err
	}
	if len(recs) == 0 {
		return nil, nil, fmt.Errorf("%w: lease %d", ledger.ErrNotFound, id)
	}
	rec := recs[0]
	if err := w.lockAccounts(rec.Account); err != nil {
		return nil, nil, err
	}
	an, err := w.ancestry(rec.Account)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: account of lease %d: %w", ledger.ErrCorrupt, id, err)
	}
	return rec, an, nil
}

// account returns the held account id, or ErrNotFound.
func (w *work) account(id core.AccountID) (*ledger.Account, error) {
	if h, ok := w.accounts[id]; ok {
		return &h.now, nil
	}
	return nil, fmt.Errorf("%w: account %q", ledger.ErrNotFound, id)
}

// ancestry returns the held account id and its ancestors, leaf first.
func (w *work) ancestry(id core.AccountID) (ledger.Ancestry, error) {
	return ReadAncestry(id, w.account)
}

// lease returns the held lease id, or ErrNotFound.
func (w *work) lease(id uint64) (*ledger.LeaseRecord, error) {
	if h, ok := w.leases[id]; ok {
		return &h.now, nil
	}
	return nil, fmt.Errorf("%w: lease %d", ledger.ErrNotFound, id)
}

// insertLease holds a new lease; flush writes it.
func (w *work) insertLease(rec ledger.LeaseRecord) {
	w.leases[rec.ID] = &heldLease{now: rec, new: true}
}

// funders returns the held accounts that funded rec, in rec.Funding order:
// the ancestry of rec's account, which the caller locked.
func (w *work) funders(rec *ledger.LeaseRecord) ([]*ledger.Account, error) {
	out := make([]*ledger.Account, len(rec.Funding))
	for i, f := range rec.Funding {
		a, err := w.account(f.Account)
		if err != nil {
			return nil, fmt.Errorf("%w: funder of lease %d: %v", ledger.ErrCorrupt, rec.ID, err)
		}
		out[i] = a
	}
	return out, nil
}

// Ancestry and LeaseFunders make the transaction the rules' Books, over
// what it locked.
func (w *work) Ancestry(id core.AccountID) (ledger.Ancestry, error) { return w.ancestry(id) }

func (w *work) LeaseFunders(id uint64) (*ledger.LeaseRecord, []*ledger.Account, error) {
	rec, err := w.lease(id)
	if err != nil {
		return nil, nil, err
	}
	if _, err := w.account(rec.Account); err != nil {
		// Not ErrNotFound: the rules would take a missing account for a
		// lease that does not exist, and reject instead of stopping.
		return nil, nil, fmt.Errorf("%w: lease %d of %s: %v", ledger.ErrCorrupt, rec.ID, rec.Account, err)
	}
	funders, err := w.funders(rec)
	return rec, funders, err
}

// flush writes every held record that changed, accounts then leases, each
// in id order, and announces whose funds moved.
func (w *work) flush() error {
	var accts []AccountWrite
	for _, id := range sortedKeys(w.accounts) {
		if h := w.accounts[id]; !sameAccount(&h.was, &h.now) {
			accts = append(accts, AccountWrite{Was: &h.was, Now: &h.now})
		}
	}
	var leases []LeaseWrite
	for _, id := range sortedKeys(w.leases) {
		h := w.leases[id]
		switch {
		case h.new:
			leases = append(leases, LeaseWrite{Now: &h.now})
		case fixedChanged(&h.was, &h.now):
			return fmt.Errorf("txn: lease %d: a field fixed at the grant changed, from %+v to %+v", id, h.was, h.now)
		case !sameLease(&h.was, &h.now):
			leases = append(leases, LeaseWrite{Was: &h.was, Now: &h.now})
		}
	}
	if err := w.write(accts, leases); err != nil {
		return err
	}
	if a, ok := w.tx.(FundsAnnouncer); ok {
		moved, err := w.fundsMoved(accts)
		if err != nil || len(moved) == 0 {
			return err
		}
		return a.AnnounceFunds(moved)
	}
	return nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// write hands the changed records to the backend: all at once to a
// BatchWriter, one by one otherwise.
func (w *work) write(accts []AccountWrite, leases []LeaseWrite) error {
	if b, ok := w.tx.(BatchWriter); ok {
		if len(accts) > 0 {
			if err := b.PutAccounts(accts); err != nil {
				return err
			}
		}
		if len(leases) > 0 {
			return b.PutLeases(leases)
		}
		return nil
	}
	for _, a := range accts {
		if err := w.tx.PutAccount(a.Was, a.Now); err != nil {
			return err
		}
	}
	for _, l := range leases {
		if err := w.tx.PutLease(l.Was, l.Now); err != nil {
			return err
		}
	}
	return nil
}

// fundsMoved returns the changed accounts whose ledger.Spendable moved in
// a way the other nodes decide on (ledger.WorthAnnouncing), leaving out
// those with a held ancestor among them.
func (w *work) fundsMoved(accts []AccountWrite) ([]core.AccountID, error) {
	moved := make(map[core.AccountID]bool)
	for _, a := range accts {
		was, err := ledger.Spendable(a.Was)
		if err != nil {
			return nil, fmt.Errorf("%w: account %s: %w", ledger.ErrCorrupt, a.Was.ID, err)
		}
		now, err := ledger.Spendable(a.Now)
		if err != nil {
			return nil, err
		}
		if ledger.WorthAnnouncing(was, now) {
			moved[a.Now.ID] = true
		}
	}
	var out []core.AccountID
	for _, a := range accts {
		if moved[a.Now.ID] && !w.hasMovedAncestor(a.Now, moved) {
			out = append(out, a.Now.ID)
		}
	}
	return out, nil
}

// hasMovedAncestor reports whether a held ancestor of a is in moved.
func (w *work) hasMovedAncestor(a *ledger.Account, moved map[core.AccountID]bool) bool {
	for depth := 0; a.Parent != "" && depth < 3; depth++ {
		if moved[a.Parent] {
			return true
		}
		h, ok := w.accounts[a.Parent]
		if !ok {
			return false
		}
		a = &h.now
	}
	return false
}

// sameAccount reports whether a and b are the same record, field by
// field: a policy that is nil differs from an empty one.
func sameAccount(a, b *ledger.Account) bool { return reflect.DeepEqual(a, b) }

// fixedChanged reports whether a field of a lease fixed at its grant
// changed (the holder, the token, the funders and their periods…): a
// rule's bug, which no backend writes.
func fixedChanged(was, l *ledger.LeaseRecord) bool {
	if l.Account != was.Account || l.Holder != was.Holder || l.Token != was.Token || l.GrantedAt != was.GrantedAt ||
		l.Grace != was.Grace || len(l.Funding) != len(was.Funding) {
		return true
	}
	for i, f := range l.Funding {
		if f.Account != was.Funding[i].Account || f.PeriodStart != was.Funding[i].PeriodStart {
			return true
		}
	}
	return false
}

func sameLease(a, b *ledger.LeaseRecord) bool {
	return a.Lease == b.Lease && slices.Equal(a.Funding, b.Funding)
}
