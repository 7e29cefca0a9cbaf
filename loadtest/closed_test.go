package loadtest

import (
	"context"
	"maps"
	"testing"
	"time"
)

func TestClosedLoopCountsMatchServer(t *testing.T) {
	f := newFakeServer(t)
	f.statusFor = func(n int64) (int, string) {
		switch {
		case n%7 == 3:
			return 429, "rate_limited"
		case n%11 == 5:
			return 402, "balance_exhausted"
		case n%13 == 7:
			return 503, "lease_unavailable"
		case n%17 == 1:
			return 404, "" // a status without a problem body
		}
		return 200, ""
	}
	f.serve()
	res := mustRun(t, context.Background(), Options{
		URL:          f.url,
		Connections:  8,
		Pipeline:     4,
		Duration:     800 * time.Millisecond,
		MaxErrorRate: -1,
	})
	status, codes, paths := f.snapshot()
	if res.Requests == 0 || res.Requests != paths["/v1/check"] {
		t.Fatalf("tool counted %d requests, server answered %d", res.Requests, paths["/v1/check"])
	}
	if !maps.Equal(res.ByStatus, status) {
		t.Errorf("by status: tool %v, server %v", res.ByStatus, status)
	}
	if !maps.Equal(res.ByCode, codes) {
		t.Errorf("by code: tool %v, server %v", res.ByCode, codes)
	}
	for _, s := range []int{200, 402, 404, 429, 503} {
		if res.ByStatus[s] == 0 {
			t.Errorf("no %d seen; the test does not exercise what it claims", s)
		}
	}
	if res.TransportErrors != 0 {
		t.Errorf("transport errors %v", res.TransportErrorsByClass)
	}
	// 503s are errors, 4xx are not by default.
	if want := float64(res.ByStatus[503]) / float64(res.Requests); res.ErrorRate != want {
		t.Errorf("error rate %v, want %v", res.ErrorRate, want)
	}
}

func TestStagedFollowsReservations(t *testing.T) {
	f := newFakeServer(t)
	f.serve()
	for _, rate := range []float64{0, 1500} {
		res := mustRun(t, context.Background(), Options{
			URL:         f.url,
			Scenario:    ScenarioStaged,
			Connections: 4,
			Pipeline:    3,
			Rate:        rate,
			Duration:    500 * time.Millisecond,
		})
		if len(f.protoErr) > 0 {
			t.Fatalf("rate %v: server saw protocol errors: %v", rate, f.protoErr[:min(5, len(f.protoErr))])
		}
		admit, commit, finish := res.ByKind["admit"], res.ByKind["commit"], res.ByKind["finish"]
		if admit.Requests == 0 || commit.Requests == 0 || finish.Requests == 0 {
			t.Fatalf("rate %v: by kind %v", rate, res.ByKind)
		}
		// Every fifth admit is refused (402); the others go on to commit
		// and finish unless the run ended between steps.
		refused := res.ByStatus[402]
		if refused == 0 || admit.Requests-refused < commit.Requests || commit.Requests < finish.Requests {
			t.Errorf("rate %v: admit %d (402: %d), commit %d, finish %d",
				rate, admit.Requests, refused, commit.Requests, finish.Requests)
		}
		if d := admit.Requests - refused - finish.Requests; d > 2*4*3 {
			t.Errorf("rate %v: %d admitted operations never finished", rate, d)
		}
		if res.Ops != refused+finish.Requests {
			t.Errorf("rate %v: ops %d, want refused+finished %d", rate, res.Ops, refused+finish.Requests)
		}
		if res.ByCode["balance_exhausted"] != refused {
			t.Errorf("rate %v: codes %v", rate, res.ByCode)
		}
	}
	_, _, paths := f.snapshot()
	f.mu.Lock()
	left := len(f.commits)
	f.mu.Unlock()
	if left != 0 {
		t.Errorf("%d committed reservations never finished (paths %v)", left, paths)
	}
}

func TestMixSendsEveryScenario(t *testing.T) {
	f := newFakeServer(t)
	f.serve()
	res := mustRun(t, context.Background(), Options{
		URL:           f.url,
		Scenario:      ScenarioMix,
		Mix:           Mix{{ScenarioCheck, 4}, {ScenarioStaged, 2}, {ScenarioAdmission, 2}, {ScenarioUsage, 2}},
		Accounts:      []Account{{"a1", "k1"}, {"a2", "k2"}, {"a 3", "k3"}},
		Zipf:          1.1,
		PlatformToken: "ptok",
		OrgID:         "org-1",
		UsageBatch:    5,
		Connections:   4,
		Pipeline:      2,
		Duration:      500 * time.Millisecond,
	})
	_, _, paths := f.snapshot()
	if len(f.protoErr) > 0 {
		t.Fatalf("server saw protocol errors: %v", f.protoErr[:min(5, len(f.protoErr))])
	}
	for _, k := range kindNames {
		if res.ByKind[k].Requests == 0 {
			t.Errorf("no %s request in the mix: %v", k, res.ByKind)
		}
		if got, want := res.ByKind[k].Requests, paths["/v1/"+k]; got != want {
			t.Errorf("%s: tool %d, server %d", k, got, want)
		}
	}
	f.mu.Lock()
	events, dupes := len(f.events), f.dupes
	f.mu.Unlock()
	if dupes != 0 {
		t.Errorf("%d duplicate usage event ids", dupes)
	}
	if want := int(res.ByKind["usage"].Requests) * 5; events != want {
		t.Errorf("server got %d events, want %d", events, want)
	}
	if res.Decisions["admit"] == 0 || res.Decisions["deny"] == 0 ||
		res.Decisions["admit"]+res.Decisions["deny"] != res.ByKind["admission"].Requests {
		t.Errorf("decisions %v for %d admission requests", res.Decisions, res.ByKind["admission"].Requests)
	}
}

// The goroutine engine stays a supported choice (and the only one off
// Linux): it must count what the server answered as the epoll engine does.
func TestClosedLoopGoroutineEngineCountsMatchServer(t *testing.T) {
	f := newFakeServer(t)
	f.statusFor = func(n int64) (int, string) {
		if n%5 == 2 {
			return 429, "rate_limited"
		}
		return 200, ""
	}
	f.serve()
	res := mustRun(t, context.Background(), Options{
		URL:          f.url,
		Connections:  4,
		Pipeline:     2,
		Duration:     400 * time.Millisecond,
		Engine:       EngineGoroutines,
		MaxErrorRate: -1,
	})
	status, _, paths := f.snapshot()
	if res.Requests == 0 || res.Requests != paths["/v1/check"] || !maps.Equal(res.ByStatus, status) {
		t.Fatalf("tool counted %d requests %v, server answered %d %v", res.Requests, res.ByStatus, paths["/v1/check"], status)
	}
}
