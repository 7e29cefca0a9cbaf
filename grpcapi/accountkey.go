package grpcapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

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
const bindSettle = time.Second

type accountKeys struct {
	secret []byte
	bind   Binder
	mu     sync.Mutex // guards hasher (not safe for concurrent use) and bound
	hasher *credential.Hasher
	bound  map[string]boundKey // account → its key, once bound
}

type boundKey struct {
	key string
	at  time.Time // when it was bound
}

func newAccountKeys(secret []byte, bind Binder) (*accountKeys, error) {
	h, err := credential.NewHasher(secret)
	if err != nil {
		return nil, err
	}
	return &accountKeys{secret: secret, bind: bind, hasher: h, bound: make(map[string]boundKey)}, nil
}

// keyFor is account's key, bound on every shard; fresh says it was bound
// within bindSettle, so a shard may not have applied it yet. The binding
// goes through the control plane outside the lock: calls for accounts
// already bound never wait behind it (two first calls for one account may
// both bind it, which is harmless).
func (k *accountKeys) keyFor(account string) (key string, fresh bool, err error) {
	k.mu.Lock()
	if b, ok := k.bound[account]; ok {
		k.mu.Unlock()
		return b.key, time.Since(b.at) < bindSettle, nil
	}
	mac := hmac.New(sha256.New, k.secret)
	mac.Write([]byte("tollgated grpc account key\x00"))
	mac.Write([]byte(account))
	key = accountKeyPrefix + hex.EncodeToString(mac.Sum(nil))
	d, err := k.hasher.Digest([]byte(key))
	k.mu.Unlock()
	if err != nil {
		return "", false, err
	}
	if err := k.bind.BindInstalledKey(d, core.AccountID(account)); err != nil {
		return "", false, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.bound) >= maxRemembered {
		clear(k.bound)
	}
	k.bound[account] = boundKey{key, time.Now()}
	return key, true, nil
}

// forget drops account's key from memory: the data plane did not know it
// (the account is gone), so the next call binds it again if it exists.
func (k *accountKeys) forget(account string) {
	k.mu.Lock()
	delete(k.bound, account)
	k.mu.Unlock()
}
