package agentadmission

import (
	"strconv"
	"testing"
	"time"
)

// fill stores an answer for agent at now, as a leading call would.
func fill(t *testing.T, c *cache, agent string, now time.Time) {
	t.Helper()
	_, hit, f, lead := c.lookup(agent, now)
	if hit || !lead {
		t.Fatalf("%s at %v: hit=%v lead=%v, want a call to make", agent, now, hit, lead)
	}
	c.store(agent, f, Decision{Reason: agent}, now)
}

func fresh(c *cache, agent string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byAgent[agent]
	return e != nil && now.Before(e.until)
}

func TestCacheBoundedUnderFlood(t *testing.T) {
	c := newCache(TTL, 1000)
	for i := range 100_000 {
		fill(t, c, "agent-"+strconv.Itoa(i), t0)
		if n := c.len(); n > 1000 {
			t.Fatalf("cache grew to %d entries", n)
		}
	}
	// The newest survive.
	for i := 99_000; i < 100_000; i++ {
		if !fresh(c, "agent-"+strconv.Itoa(i), t0) {
			t.Fatalf("agent-%d evicted, though among the newest", i)
		}
	}
}

func TestCacheEvictsOldestStored(t *testing.T) {
	c := newCache(TTL, 3)
	fill(t, c, "a", t0)
	fill(t, c, "b", t0.Add(time.Second))
	fill(t, c, "c", t0.Add(2*time.Second))

	// a expires and is refreshed: it is now the newest, b the oldest.
	fill(t, c, "a", t0.Add(6*time.Second))
	fill(t, c, "d", t0.Add(6*time.Second))

	if fresh(c, "b", t0.Add(6*time.Second)) || c.len() != 3 {
		t.Fatalf("b (oldest) kept or size %d", c.len())
	}
	for _, agent := range []string{"a", "d"} {
		if !fresh(c, agent, t0.Add(6*time.Second)) {
			t.Fatalf("%s evicted", agent)
		}
	}
}

func TestCacheSharesCall(t *testing.T) {
	c := newCache(TTL, 10)
	_, _, f1, lead1 := c.lookup("a", t0)
	_, hit, f2, lead2 := c.lookup("a", t0)
	if !lead1 || lead2 || hit || f1 != f2 {
		t.Fatalf("lead1=%v lead2=%v hit=%v same flight=%v", lead1, lead2, hit, f1 == f2)
	}
	c.store("a", f1, Decision{Denied: true}, t0)
	<-f2.done
	if !f2.d.Denied {
		t.Fatal("waiter did not get the answer")
	}
	if d, hit, _, _ := c.lookup("a", t0.Add(TTL-time.Nanosecond)); !hit || !d.Denied {
		t.Fatal("answer not cached")
	}
	if _, hit, _, lead := c.lookup("a", t0.Add(TTL)); hit || !lead {
		t.Fatal("answer outlived the TTL")
	}
}

func TestCacheEvictionDuringCall(t *testing.T) {
	c := newCache(TTL, 1)
	_, _, fa, _ := c.lookup("a", t0)
	_, _, fb, _ := c.lookup("b", t0) // evicts a while its call runs
	c.store("a", fa, Decision{Reason: "a"}, t0)
	c.store("b", fb, Decision{Reason: "b"}, t0)
	<-fa.done
	<-fb.done
	if fa.d.Reason != "a" || fb.d.Reason != "b" {
		t.Fatalf("answers crossed: %q %q", fa.d.Reason, fb.d.Reason)
	}
	if c.len() != 1 || !fresh(c, "b", t0) {
		t.Fatalf("size %d, b fresh %v", c.len(), fresh(c, "b", t0))
	}
}
