package agentadmission

import (
	"container/list"
	"sync"
	"time"
)

// flight is one platform call that other checks of the same agent wait on.
type flight struct {
	done chan struct{} // closed once d is set
	d    Decision
}

// entry is what the cache knows about one agent.
type entry struct {
	agent  string
	d      Decision
	until  time.Time // zero until the first answer is stored
	flight *flight   // the call in progress, if any
	elem   *list.Element
}

// cache maps agents to their last answer and in-progress call.
//
// Entries sit in order of when they were last stored, oldest at the front.
// As every answer lives for the same TTL, the front is also the entry that
// expires first, so evicting from the front removes expired entries before
// live ones, in O(1), however many agent ids a flood brings.
type cache struct {
	ttl   time.Duration
	limit int

	mu      sync.Mutex
	byAgent map[string]*entry
	order   list.List
}

func newCache(ttl time.Duration, limit int) *cache {
	if limit < 1 {
		limit = 1
	}
	return &cache{ttl: ttl, limit: limit, byAgent: make(map[string]*entry)}
}

// lookup returns, for agent at now, exactly one of:
//   - a stored, unexpired answer (hit true);
//   - a call already in progress to wait on (f set, lead false);
//   - a new call the caller must make and then pass to store (f set, lead
//     true).
func (c *cache) lookup(agent string, now time.Time) (d Decision, hit bool, f *flight, lead bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byAgent[agent]
	if e == nil {
		e = c.add(agent)
	}
	if !e.until.IsZero() && now.Before(e.until) {
		return e.d, true, nil, false
	}
	if e.flight != nil {
		return Decision{}, false, e.flight, false
	}
	e.flight = &flight{done: make(chan struct{})}
	return Decision{}, false, e.flight, true
}

// store records the answer of call f, made at now, and releases its waiters.
func (c *cache) store(agent string, f *flight, d Decision, now time.Time) {
	c.mu.Lock()
	e := c.byAgent[agent]
	if e == nil {
		// Evicted while the call ran; the answer is still worth keeping.
		e = c.add(agent)
	}
	e.d = d
	e.until = now.Add(c.ttl)
	if e.flight == f {
		e.flight = nil
	}
	c.order.MoveToBack(e.elem)
	c.mu.Unlock()

	f.d = d
	close(f.done)
}

// add inserts an empty entry for agent, evicting the oldest ones to stay
// within limit. c.mu must be held.
func (c *cache) add(agent string) *entry {
	for len(c.byAgent) >= c.limit {
		old := c.order.Front()
		c.order.Remove(old)
		delete(c.byAgent, old.Value.(*entry).agent)
	}
	e := &entry{agent: agent}
	e.elem = c.order.PushBack(e)
	c.byAgent[agent] = e
	return e
}

// len reports how many agents are remembered.
func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byAgent)
}
