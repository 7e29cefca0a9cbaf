package grpcapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"sync"

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

// Binder binds a key's digest to an account on every shard
// (control.Plane.BindKey).
type Binder interface {
	BindKey(d credential.Digest, id core.AccountID) error
}

// maxRemembered bounds the accounts whose key is remembered as bound; past
// it the memory starts again (binding again is harmless: same key, same
// account).
const maxRemembered = 1 << 16

const accountKeyPrefix = "tgw_"

type accountKeys struct {
	secret []byte
	bind   Binder
	mu     sync.Mutex
	hasher *credential.Hasher
	bound  map[string]string // account → its key, once bound
}

func newAccountKeys(secret []byte, bind Binder) (*accountKeys, error) {
	h, err := credential.NewHasher(secret)
	if err != nil {
		return nil, err
	}
	return &accountKeys{secret: secret, bind: bind, hasher: h, bound: make(map[string]string)}, nil
}

// keyFor is account's key, bound on every shard; fresh says it was bound
// by this call, so a shard may not have applied it yet.
func (k *accountKeys) keyFor(account string) (key string, fresh bool, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if key, ok := k.bound[account]; ok {
		return key, false, nil
	}
	mac := hmac.New(sha256.New, k.secret)
	mac.Write([]byte("tollgated grpc account key\x00"))
	mac.Write([]byte(account))
	key = accountKeyPrefix + hex.EncodeToString(mac.Sum(nil))
	d, err := k.hasher.Digest([]byte(key))
	if err != nil {
		return "", false, err
	}
	if err := k.bind.BindKey(d, core.AccountID(account)); err != nil {
		return "", false, err
	}
	if len(k.bound) >= maxRemembered {
		clear(k.bound)
	}
	k.bound[account] = key
	return key, true, nil
}

// forget drops account's key from memory: the data plane did not know it
// (no such account yet), so the next call binds it again.
func (k *accountKeys) forget(account string) {
	k.mu.Lock()
	delete(k.bound, account)
	k.mu.Unlock()
}
