package admin

import (
	"sync"
	"unicode/utf8"
)

// Refused requests are audited, but a token that may do little can send
// them as fast as it likes: each would be a ledger write, and the audit
// log has no retention. So each token's refusal records are paced — a
// burst of refusalBurst, then one per refusalEvery — and a record says how
// many refusals before it went unrecorded (their count is in
// tollgated_admin_forbidden_total all the same). A recorded path is cut
// to maxAuditedPath bytes.
const (
	refusalBurst   = 10
	refusalEvery   = int64(1e9)
	maxAuditedPath = 256
	// maxRefusers bounds the tokens paced at once; past it the map starts
	// afresh (tokens are the node's own admin tokens: in practice few).
	maxRefusers = 1024
)

// refusalPacer decides which refusals are recorded, per token.
type refusalPacer struct {
	mu     sync.Mutex
	tokens map[string]*refusalBucket
}

type refusalBucket struct {
	credit  int64 // refusals that may be recorded now, times refusalEvery
	at      int64 // when credit was last brought up to date
	dropped uint64
}

// admit reports whether token's refusal at now is recorded, and how many
// of its refusals before it were not.
func (p *refusalPacer) admit(token string, now int64) (record bool, dropped uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.tokens[token]
	if b == nil {
		if p.tokens == nil || len(p.tokens) >= maxRefusers {
			p.tokens = make(map[string]*refusalBucket)
		}
		b = &refusalBucket{credit: refusalBurst * refusalEvery, at: now}
		p.tokens[token] = b
	}
	if now > b.at {
		b.credit = min(b.credit+(now-b.at), refusalBurst*refusalEvery)
		b.at = now
	}
	if b.credit < refusalEvery {
		b.dropped++
		return false, 0
	}
	b.credit -= refusalEvery
	dropped, b.dropped = b.dropped, 0
	return true, dropped
}

// auditedPath is path cut to maxAuditedPath bytes on a rune boundary.
func auditedPath(path string) string {
	if len(path) <= maxAuditedPath {
		return path
	}
	cut := maxAuditedPath
	for cut > 0 && !utf8.RuneStart(path[cut]) {
		cut--
	}
	return path[:cut] + "…"
}
