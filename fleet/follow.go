// Package fleet keeps one node's data plane in step with a ledger that other
// nodes change too. The admin API of any node writes the shared ledger and
// publishes the change to its own shards at once; every other node learns
// of it from the ledger's change log (pgstore: LISTEN/NOTIFY for the
// moment it commits, the log itself as the catch-up after a reconnection)
// and republishes the changed account, key or token from the ledger to its
// shards through the same Publisher the admin API uses.
//
// A change names what changed, not its new value: the follower reads the
// value from the ledger when it applies the change, so applying an old
// change late, twice, or after a newer one publishes the ledger's current
// state, never a stale one. That is what makes a catch-up after any gap
// safe.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/pgstore"
)

// Source is the change log: pgstore.Store.
type Source interface {
	// Follow calls fn with every change after the id after, in id order,
	// as they commit, until ctx ends or fn returns an error.
	Follow(ctx context.Context, after uint64, fn func(pgstore.Change) error) error
}

// Publisher carries ledger state to the shards (control.Provisioner, the
// admin API's Publisher).
type Publisher interface {
	AccountChanged(acct ledger.Account) error
	BindKey(d credential.Digest, account core.AccountID)
	RevokeKey(d credential.Digest)
	BindPlatformToken(d credential.Digest)
	RevokePlatformToken(d credential.Digest)
}

// Follower applies the change log to a node's shards.
type Follower struct {
	Store   ledger.Store
	Source  Source
	Publish Publisher
	// Now reads the node's clock (nil: the wall clock); it dates a change's
	// arrival and decides whether a key it names has expired.
	Now func() time.Time
	// Applied, if set, hears each change once it reached the shards, with
	// its lag: from the changing transaction's start to now, by the
	// database's clock and this node's.
	Applied func(c pgstore.Change, lag time.Duration)
	// OnError, if set, hears failures to apply a change. The change is
	// retried (backing off from retryMin to retryMax) until it applies or
	// the follower stops, unless retrying cannot help (see permanent):
	// then it is passed over, after OnError heard of it.
	OnError func(c pgstore.Change, err error)
}

// Retrying a change that failed to apply (the ledger unreachable, the
// plane's provisioning wait exceeded).
const (
	retryMin = 50 * time.Millisecond
	retryMax = 2 * time.Second
)

// Run applies every change after the id after, in order, until ctx ends
// (it returns ctx's error). A node takes after from the change log's head
// (pgstore.Store.LastChange) before it loads the ledger, so nothing that
// commits between the load and the first notification is missed.
func (f *Follower) Run(ctx context.Context, after uint64) error {
	now := f.Now
	if now == nil {
		now = time.Now
	}
	return f.Source.Follow(ctx, after, func(c pgstore.Change) error {
		backoff := retryMin
		for {
			err := f.apply(ctx, c)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if f.OnError != nil {
				f.OnError(c, err)
			}
			if permanent(err) {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, retryMax)
		}
		if f.Applied != nil {
			f.Applied(c, now().Sub(c.At))
		}
		return nil
	})
}

// applyTimeout bounds one change's reads of the ledger.
const applyTimeout = 10 * time.Second

// apply publishes the ledger's current state of what c names.
func (f *Follower) apply(ctx context.Context, c pgstore.Change) error {
	ctx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	switch c.Kind {
	case pgstore.ChangeAccount, pgstore.ChangeStatus, pgstore.ChangePolicy, pgstore.ChangeBudget, pgstore.ChangeDeposit:
		acct, err := f.Store.Account(ctx, c.Account)
		if err != nil {
			return err
		}
		return f.Publish.AccountChanged(acct)
	case pgstore.ChangeKey:
		return f.applyKey(ctx, c)
	case pgstore.ChangePlatformToken:
		return f.applyPlatformToken(ctx, c)
	case pgstore.ChangeAdminToken:
		return nil // the admin API reads its tokens from the ledger on every request
	}
	return fmt.Errorf("%w: change %d of kind %q", errUnknownKind, c.ID, c.Kind)
}

// applyKey binds or revokes the key c names, as the ledger now has it. A
// key past its expiry is revoked here even before some node's expiry pass
// revokes it in the ledger.
func (f *Follower) applyKey(ctx context.Context, c pgstore.Change) error {
	keys, err := f.Store.Keys(ctx, c.Account)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.ID != c.Key {
			continue
		}
		if k.Revoked || (k.ExpiresAt != 0 && k.ExpiresAt <= f.nowNano()) {
			f.Publish.RevokeKey(credential.Digest(k.Digest))
		} else {
			f.Publish.BindKey(credential.Digest(k.Digest), k.Account)
		}
		return nil
	}
	return fmt.Errorf("fleet: change %d names key %q of %s, which the ledger does not hold: %w", c.ID, c.Key, c.Account, ledger.ErrNotFound)
}

// applyPlatformToken binds or revokes the platform token c names.
func (f *Follower) applyPlatformToken(ctx context.Context, c pgstore.Change) error {
	tokens, err := f.Store.PlatformTokens(ctx)
	if err != nil {
		return err
	}
	for _, t := range tokens {
		if t.ID != c.Token {
			continue
		}
		if t.Revoked {
			f.Publish.RevokePlatformToken(credential.Digest(t.Digest))
		} else {
			f.Publish.BindPlatformToken(credential.Digest(t.Digest))
		}
		return nil
	}
	return fmt.Errorf("fleet: change %d names platform token %q, which the ledger does not hold: %w", c.ID, c.Token, ledger.ErrNotFound)
}

func (f *Follower) nowNano() int64 {
	if f.Now != nil {
		return f.Now().UnixNano()
	}
	return time.Now().UnixNano()
}

// errUnknownKind reports a change this build does not know: a newer node
// wrote it. It cannot be applied, so it is reported and passed over.
var errUnknownKind = errors.New("fleet: a change of a kind this build does not know (a newer node wrote it?)")

// permanent reports whether retrying cannot apply a change: what it names
// is not in the ledger (which deletes no account, key or token), or it is
// of an unknown kind.
func permanent(err error) bool {
	return errors.Is(err, ledger.ErrNotFound) || errors.Is(err, errUnknownKind)
}
