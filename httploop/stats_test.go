//go:build linux

package httploop

import "testing"

func TestCloseReasonNames(t *testing.T) {
	seen := map[string]bool{}
	for r := range numCloseReasons {
		name := r.String()
		if name == "" || name == "unknown" || seen[name] {
			t.Fatalf("reason %d named %q", r, name)
		}
		seen[name] = true
	}
	if numCloseReasons.String() != "unknown" {
		t.Fatal("out-of-range reason named")
	}
}

func TestStatsSnapshot(t *testing.T) {
	var c counters
	c.init()
	for i := range c.v {
		c.v[i] = uint64(i + 1)
	}
	c.publish()
	s := c.pub.snapshot()
	got := []uint64{s.Accepted, s.Rejected, s.AcceptErrors, s.Requests, s.Deferred,
		s.DeferTimeouts, s.BytesIn, s.BytesOut, s.Conns, s.OutputBuffered, s.SendBatches, s.BatchedSends}
	for r := range s.Closed {
		got = append(got, s.Closed[r])
	}
	if len(got) != numStats {
		t.Fatalf("snapshot has %d fields, counters %d", len(got), numStats)
	}
	for i, v := range got {
		if v != uint64(i+1) {
			t.Fatalf("field %d = %d, want %d", i, v, i+1)
		}
	}
	// Unchanged counters are not stored again.
	c.pub.v[statRequests].Store(0)
	c.publish()
	if c.pub.v[statRequests].Load() != 0 {
		t.Fatal("unchanged counter republished")
	}
}
