package control

import (
	"sync"

	"github.com/tollgated/tollgated/control/record"
)

// PostPaidClaims are post-paid events the plane is billing itself (to
// answer the reporter with the ledger's counts). The exporter must not
// bill a claimed event first — the reporter would be told "duplicate" for
// its own first report — so it stops before one and resumes once the plane
// lets go of it (after billing it, or after failing to, when the exporter
// bills it as any other).
type PostPaidClaims struct {
	mu  sync.Mutex
	ids map[[16]byte]int
}

// NewPostPaidClaims returns an empty claim set; share it between the
// plane (Config.Claims) and the exporter (Exporter.Claims).
func NewPostPaidClaims() *PostPaidClaims { return &PostPaidClaims{ids: make(map[[16]byte]int)} }

// Claim holds evs back from the exporter.
func (c *PostPaidClaims) Claim(evs []record.Event) {
	c.mu.Lock()
	for i := range evs {
		c.ids[evs[i].ID]++
	}
	c.mu.Unlock()
}

// Unclaim lets the exporter bill evs again.
func (c *PostPaidClaims) Unclaim(evs []record.Event) {
	c.mu.Lock()
	for i := range evs {
		if c.ids[evs[i].ID]--; c.ids[evs[i].ID] <= 0 {
			delete(c.ids, evs[i].ID)
		}
	}
	c.mu.Unlock()
}

// held reports whether id is claimed.
func (c *PostPaidClaims) held(id [16]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ids[id] > 0
}
