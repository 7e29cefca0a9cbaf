package grpcapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
)

// A rate-limit descriptor names an account, not a key. The data plane
// decides for keys, so the service acts for an account with a key of its
// own: derived from the server secret and the account id (nobody without
// the secret can compute it), bound to the account on every shard through
// the control plane the first time the account is named, and never stored.
// Billing through it is billing the account: the gRPC listener is trusted
// the way a gateway is (see docs/API.md).
//
// Binding goes through the control plane and waits for it, which a
// shard's thread must not: a descriptor whose account's key is not known
// to be bound is held (slotKey) while a goroutine binds it, and goes on
// when the shard's loop, rung by that goroutine, finds the binding done.

// Binder binds a key's digest to an account on every shard, only if the
// shards hold the account (control.Plane.BindInstalledKey): an error
// wrapping plane.ErrUnknownAccount otherwise.
type Binder interface {
	BindInstalledKey(d credential.Digest, id core.AccountID) error
}

// maxRemembered bounds the accounts whose key is remembered as bound; past
// it the memory starts again (binding again is harmless: same key, same
// account).
const maxRemembered = 1 << 16

const accountKeyPrefix = "tgw_"

// bindSettle is how long after binding a key a shard may still not have
// applied it: a 401 within it is waited out, after it means no account.
// It is also how long a refused binding is remembered: a descriptor naming
// an account the plane does not hold is answered at once meanwhile.
const bindSettle = time.Second

// accountKeys are the accounts' keys, bound or being bound, shared by the
// shards. Its lock is taken by a shard only for an account the shard has
// not seen bound (localKeys remembers those it has).
type accountKeys struct {
	secret []byte
	bind   Binder
	mu     sync.Mutex // guards everything below
	hasher *credential.Hasher
	bound  map[string]boundKey // account → its key, once bound
	going  map[string]*binding // bindings in flight, and refusals for bindSettle
}

type boundKey struct {
	key string
	at  time.Time // when it was bound
}

// binding is one account's binding in flight (done false) or refused.
type binding struct {
	done    bool
	unknown bool // refused: the plane does not hold the account
	at      time.Time
	wakes   []func() // the shards' loops waiting for it
}

type keyState uint8

const (
	keyBound   keyState = iota
	keyWaiting          // a binding is in flight
	keyUnknown          // no shard holds the account
	keyFailed           // the binding failed otherwise
)

func newAccountKeys(secret []byte, bind Binder) (*accountKeys, error) {
	h, err := credential.NewHasher(secret)
	if err != nil {
		return nil, err
	}
	return &accountKeys{secret: secret, bind: bind, hasher: h, bound: make(map[string]boundKey),
		going: make(map[string]*binding)}, nil
}

// keyOf derives account's key.
func (k *accountKeys) keyOf(account string) string {
	mac := hmac.New(sha256.New, k.secret)
	mac.Write([]byte("tollgated grpc account key\x00"))
	mac.Write([]byte(account))
	return accountKeyPrefix + hex.EncodeToString(mac.Sum(nil))
}

// lookup is account's key if it is bound; otherwise it starts binding it
// (unless that is under way), and wake, unless nil, is called when the
// binding ends.
func (k *accountKeys) lookup(account string, wake func()) (boundKey, keyState) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if b, ok := k.bound[account]; ok {
		return b, keyBound
	}
	if g, ok := k.going[account]; ok {
		switch {
		case !g.done:
			if wake != nil {
				g.wakes = append(g.wakes, wake)
			}
			return boundKey{}, keyWaiting
		case time.Since(g.at) < bindSettle && g.unknown:
			return boundKey{}, keyUnknown
		case time.Since(g.at) < bindSettle:
			return boundKey{}, keyFailed
		}
	}
	k.going[account] = &binding{wakes: []func(){wake}}
	go k.bindNow(account)
	return boundKey{}, keyWaiting
}

// bindNow binds account's key through the control plane, and wakes the
// loops waiting for it.
func (k *accountKeys) bindNow(account string) {
	key := k.keyOf(account)
	k.mu.Lock()
	d, err := k.hasher.Digest([]byte(key))
	k.mu.Unlock()
	if err == nil {
		err = k.bind.BindInstalledKey(d, core.AccountID(account))
	}
	k.mu.Lock()
	g := k.going[account]
	if err == nil {
		if len(k.bound) >= maxRemembered {
			clear(k.bound)
		}
		k.bound[account] = boundKey{key, time.Now()}
		delete(k.going, account)
	} else {
		g.done, g.unknown, g.at = true, errors.Is(err, plane.ErrUnknownAccount), time.Now()
	}
	wakes := g.wakes
	g.wakes = nil
	k.mu.Unlock()
	for _, w := range wakes {
		w()
	}
}

// forget drops account's key from memory: the data plane did not know it
// (the account is gone), so the next call binds it again if it exists.
func (k *accountKeys) forget(account string) {
	k.mu.Lock()
	delete(k.bound, account)
	k.mu.Unlock()
}

// localKeys is one shard's memory of the keys it has seen bound, and its
// descriptors waiting for a key.
type localKeys struct {
	shared  *accountKeys
	wake    func()
	bound   map[string]localKey // account → the key header's value
	waiters []keyWaiter
	waiting int // len(waiters), read by Quiet
}

type localKey struct {
	header []byte    // the key as the key header carries it
	at     time.Time // when it was bound
}

// keyWaiter is a held descriptor waiting for its account's key: for the
// binding to end (retry false), or, when the shard did not know a key
// bound a moment ago, to try again (retry true) from after.
type keyWaiter struct {
	slot    int
	account string
	retry   bool
	after   int64
}

// retryEvery is how long a descriptor whose shard has not yet applied its
// key's binding waits before asking it again.
const retryEvery = int64(time.Millisecond)

func (k *localKeys) init(shared *accountKeys, wake func()) {
	k.shared, k.wake, k.bound = shared, wake, make(map[string]localKey)
}

// of is the key header's value for account, or what stands in its way; a
// binding it starts or finds under way rings the loop when it ends.
func (k *localKeys) of(account []byte, bearer bool) ([]byte, keyState) {
	return k.resolve(account, bearer, k.wake)
}

func (k *localKeys) resolve(account []byte, bearer bool, wake func()) ([]byte, keyState) {
	if e, ok := k.bound[string(account)]; ok {
		return e.header, keyBound
	}
	b, st := k.shared.lookup(string(account), wake)
	if st != keyBound {
		return nil, st
	}
	if len(k.bound) >= maxRemembered {
		clear(k.bound)
	}
	h := []byte(b.key)
	if bearer {
		h = append([]byte("Bearer "), b.key...)
	}
	k.bound[string(account)] = localKey{h, b.at}
	return h, keyBound
}

// fresh reports whether account's key was bound within bindSettle.
func (k *localKeys) fresh(account []byte) bool {
	e, ok := k.bound[string(account)]
	return ok && time.Since(e.at) < bindSettle
}

func (k *localKeys) forget(account []byte) {
	delete(k.bound, string(account))
	k.shared.forget(string(account))
}

// wait holds slot i until account's binding ends.
func (k *localKeys) wait(i int, account []byte) {
	k.waiters = append(k.waiters, keyWaiter{slot: i, account: string(account)})
	k.waiting = len(k.waiters)
}

// retry holds slot i to ask the shard again from now+retryEvery.
func (k *localKeys) retry(i int, account []byte, now int64) {
	k.waiters = append(k.waiters, keyWaiter{slot: i, account: string(account), retry: true, after: now + retryEvery})
	k.waiting = len(k.waiters)
}

// ready takes the waiters that may go on now: bindings that ended, retries
// that are due. It returns them in buf.
func (k *localKeys) ready(now int64, bearer bool, buf []int) []int {
	kept := k.waiters[:0]
	for _, w := range k.waiters {
		switch {
		case w.retry && now >= w.after:
			buf = append(buf, w.slot)
		case w.retry:
			kept = append(kept, w)
		default:
			if _, st := k.resolve([]byte(w.account), bearer, nil); st == keyWaiting {
				kept = append(kept, w)
			} else {
				buf = append(buf, w.slot)
			}
		}
	}
	clear(k.waiters[len(kept):])
	k.waiters = kept
	k.waiting = len(kept)
	return buf
}

// drop forgets slot i's wait (it is answered otherwise).
func (k *localKeys) drop(i int) {
	kept := k.waiters[:0]
	for _, w := range k.waiters {
		if w.slot != i {
			kept = append(kept, w)
		}
	}
	clear(k.waiters[len(kept):])
	k.waiters = kept
	k.waiting = len(kept)
}
