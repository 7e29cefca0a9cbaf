package shard

import "testing"

func TestStatsArePublishedOnRequest(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.provision("acme", "key-acme", 100_000)
	h.do("POST", "/v1/check", "key-acme", chatBody)
	if st := h.s.Stats(); st.Engine.Admitted != 0 {
		t.Fatalf("stats visible before publishing: %+v", st.Engine)
	}
	h.s.PublishStats()
	if st := h.s.Stats(); st.Engine.Admitted != 1 || st.Engine.Finished != 1 || st.PendingOut != 0 {
		t.Fatalf("published stats %+v", st)
	}
}
