package fleet

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
)

// TestRefreshCadenceReadsAtMostTwiceASecondWhateverTheFleet: a node hears
// a funds announcement for every settlement of every node of the fleet —
// 64 nodes settling ten times a second here, an announcement every 1.5 ms
// — and reads funding evidence at most once per DefaultFundsEvery: two
// reads a second, the same as with one node, each covering everything
// announced since the one before. Reading once per announcement, or at a
// short interval as before, made a node's reads grow with the fleet.
func TestRefreshCadenceReadsAtMostTwiceASecondWhateverTheFleet(t *testing.T) {
	const nodes, settlementsPerSecond, seconds = 64, 10, 10
	var c RefreshCadence
	step := int64(time.Second) / (nodes * settlementsPerSecond)
	reads, named := 0, map[core.AccountID]bool{}
	start := int64(1e12)
	for i := range int64(nodes * settlementsPerSecond * seconds) {
		now := start + i*step
		id := core.AccountID(fmt.Sprintf("acct-%d", i%nodes))
		c.Note([]core.AccountID{id}, false)
		if ids, all, ok := c.Take(now); ok {
			reads++
			if all || !slices.IsSorted(ids) {
				t.Fatalf("read %v (all %v): want the accounts announced, in order", ids, all)
			}
			for _, id := range ids {
				named[id] = true
			}
			c.Done(now, now+int64(time.Millisecond)) // a read takes 1 ms
		}
	}
	// Two a second is this node's share of its ledger budget (docs/FLEET.md).
	if limit := 2*seconds + 1; reads > limit {
		t.Fatalf("%d reads in %d s for %d nodes' settlements, want at most %d", reads, seconds, nodes, limit)
	}
	if len(named) != nodes {
		t.Fatalf("the reads covered %d accounts of %d announced", len(named), nodes)
	}
}

// TestRefreshCadenceReadsAQuietAnnouncementAtOnce: after a quiet interval
// the first announcement is read at once (a deposit reaches the other
// nodes without waiting out a cadence); one that follows a read within the
// interval waits for it, and a read that took long holds the next one back
// as long as it took.
func TestRefreshCadenceReadsAQuietAnnouncementAtOnce(t *testing.T) {
	c := RefreshCadence{Every: 100}
	if _, pending := c.Due(); pending {
		t.Fatal("due with nothing pending")
	}
	c.Note([]core.AccountID{"a"}, false)
	if _, _, ok := c.Take(1000); !ok {
		t.Fatal("a first announcement waited")
	}
	c.Done(1000, 1010)
	c.Note([]core.AccountID{"b"}, false)
	if _, _, ok := c.Take(1050); ok {
		t.Fatal("read within the interval")
	}
	if due, _ := c.Due(); due != 1100 {
		t.Fatalf("due %d, want 1100", due)
	}
	if ids, _, ok := c.Take(1100); !ok || !slices.Equal(ids, []core.AccountID{"b"}) {
		t.Fatalf("at the interval: %v %v", ids, ok)
	}
	c.Done(1100, 1400) // took 300: the next waits as long
	c.Note(nil, true)
	if _, _, ok := c.Take(1600); ok {
		t.Fatal("a read 200 after a read of 300")
	}
	if due, _ := c.Due(); due != 1700 {
		t.Fatalf("due %d, want 1700", due)
	}
	if _, all, ok := c.Take(1700); !ok || !all {
		t.Fatal("everything was not read")
	}
	if _, _, ok := c.Take(5000); ok {
		t.Fatal("a read with nothing announced")
	}
}
