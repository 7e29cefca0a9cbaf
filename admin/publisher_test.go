package admin

import (
	"slices"
	"sync"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ledger"
)

// recordingPublisher records every call, and fails AccountChanged with err
// when set.
type recordingPublisher struct {
	mu            sync.Mutex
	err           error
	changed       []ledger.Account
	bound         map[credential.Digest]core.AccountID
	revoked       []credential.Digest
	tokens        map[credential.Digest]bool
	revokedTokens []credential.Digest
}

func newRecordingPublisher() *recordingPublisher {
	return &recordingPublisher{bound: map[credential.Digest]core.AccountID{}, tokens: map[credential.Digest]bool{}}
}

func (p *recordingPublisher) AccountChanged(a ledger.Account) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.changed = append(p.changed, a)
	return p.err
}

func (p *recordingPublisher) BindKey(d credential.Digest, a core.AccountID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bound[d] = a
}

func (p *recordingPublisher) RevokeKey(d credential.Digest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.revoked = append(p.revoked, d)
}

func (p *recordingPublisher) BindPlatformToken(d credential.Digest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tokens[d] = true
}

func (p *recordingPublisher) RevokePlatformToken(d credential.Digest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.revokedTokens = append(p.revokedTokens, d)
}

func (p *recordingPublisher) setErr(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.err = err
}

func (p *recordingPublisher) boundTo(d credential.Digest) core.AccountID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bound[d]
}

func (p *recordingPublisher) tokenBound(d credential.Digest) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tokens[d]
}

// revokes returns the digests passed to RevokeKey and RevokePlatformToken.
func (p *recordingPublisher) revokes() (keys, tokens []credential.Digest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.revoked), slices.Clone(p.revokedTokens)
}

// binds counts BindKey and BindPlatformToken calls' distinct digests.
func (p *recordingPublisher) binds() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.bound) + len(p.tokens)
}

func (p *recordingPublisher) lastChanged() ledger.Account {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed[len(p.changed)-1]
}

func (p *recordingPublisher) changes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.changed)
}
