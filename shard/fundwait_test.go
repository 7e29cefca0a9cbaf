package shard

import (
	"encoding/json"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
)

// answer decodes a response the harness filled, or fails if it is still
// waiting.
func (h *harness) answer(resp *fasthttp.Response) (int, map[string]any) {
	h.t.Helper()
	var m map[string]any
	if err := json.Unmarshal(resp.Body(), &m); err != nil {
		h.t.Fatalf("no answer yet (or not JSON): %d %q", resp.StatusCode(), resp.Body())
	}
	return resp.StatusCode(), m
}

func (h *harness) refills() int {
	n := 0
	for _, m := range h.drainOut() {
		if m.Kind == message.OutRefill {
			n++
		}
	}
	return n
}

func TestRequestWaitsForItsGrantInsteadOf503(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.unfunded("acme", "key-acme")
	_, _, resp := h.do("POST", "/v1/check", "key-acme", chatBody)
	if len(h.parked) != 1 || len(resp.Body()) != 0 {
		t.Fatalf("not parked: %d %q", resp.StatusCode(), resp.Body())
	}
	if h.refills() != 1 {
		t.Fatal("the refusal asked for no refill")
	}
	if h.s.usageReserved != 0 || h.s.acks.claimed != 0 || h.s.engine.InFlight() != 0 {
		t.Fatal("a waiting request holds a usage slot, ack room or a reservation")
	}
	h.s.Poll(t0 + 2) // no news: still waiting
	if len(h.parked) != 1 {
		t.Fatal("answered without news or deadline")
	}
	h.grant("acme", 1, 100_000, t0+3)
	st, body := h.answer(resp)
	if st != 200 || body["decision"] != "admit" || body["units"] != float64(1210) {
		t.Fatalf("after the grant: %d %v", st, body)
	}
	// It waited and was admitted: no denial.
	if c := h.s.engine.Counters(); c.Admitted != 1 || c.Denials[core.DenyLeaseUnavailable] != 0 {
		t.Fatalf("counters: admitted %d, lease-unavailable %d", c.Admitted, c.Denials[core.DenyLeaseUnavailable])
	}
	if h.s.waited != 1 || len(h.s.waits.order) != 0 || len(h.s.waits.free) != DefaultFundingWaiters {
		t.Fatalf("waited %d, %d still waiting, %d free", h.s.waited, len(h.s.waits.order), len(h.s.waits.free))
	}
}

func TestWaitEndsAtTheDeadlineWithTheRefusal(t *testing.T) {
	h := newHarnessWith(t, Config{Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4, FundingWait: 50e6}, 1024)
	h.unfunded("acme", "key-acme")
	_, _, resp := h.do("POST", "/v1/check", "key-acme", chatBody)
	h.s.Poll(t0 + 50e6) // 1 ns short of the deadline
	if len(h.parked) != 1 {
		t.Fatal("answered before the deadline")
	}
	h.s.Poll(t0 + 1 + 50e6)
	st, body := h.answer(resp)
	if st != 503 || body["code"] != "lease-unavailable" {
		t.Fatalf("at the deadline: %d %v", st, body)
	}
	// One refused answer, one denial, however many times it ran.
	if n := h.s.engine.Counters().Denials[core.DenyLeaseUnavailable]; n != 1 {
		t.Fatalf("lease-unavailable counted %d times for one refused answer", n)
	}
	// Every 503 says when to come back, as a gateway passes it on.
	if ra := string(resp.Header.Peek("Retry-After")); ra != "1" || body["retry_after_ms"] != float64(1000) {
		t.Fatalf("503 with Retry-After %q and retry_after_ms %v, want 1 and 1000", ra, body["retry_after_ms"])
	}
	if ct := string(resp.Header.ContentType()); ct != "application/problem+json" {
		t.Fatalf("content type %q", ct)
	}
	if h.s.waitsExpired != 1 || len(h.s.waits.order) != 0 {
		t.Fatalf("expired %d, %d waiting", h.s.waitsExpired, len(h.s.waits.order))
	}
}

func TestPublishedEvidenceEndsTheWaitWith402(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.unfunded("acme", "key-acme")
	cell := new(core.EvidenceCell)
	h.in.Push(message.Inbound{Kind: message.InEvidence, Account: "acme", Evidence: cell})
	h.s.Poll(t0)
	_, _, resp := h.do("POST", "/v1/check", "key-acme", chatBody)
	if len(h.parked) != 1 {
		t.Fatal("not parked")
	}
	// The plane publishes the ledger's refusal without a message.
	cell.Store(core.FundingEvidence{Remaining: 0, ResetAt: t0 + 3600e9, PeriodEnd: t0 + 3600e9})
	h.s.Poll(t0 + 2)
	st, body := h.answer(resp)
	if st != 402 || body["code"] != "balance-exhausted" {
		t.Fatalf("after the evidence: %d %v", st, body)
	}
}

func TestWaitersAreFundedInArrivalOrder(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.unfunded("acme", "key-acme")
	var resps []*fasthttp.Response
	for range 3 {
		_, _, resp := h.do("POST", "/v1/check", "key-acme", chatBody)
		resps = append(resps, resp)
	}
	h.grant("acme", 1, 1210, t0+2) // enough for one
	if st, _ := h.answer(resps[0]); st != 200 {
		t.Fatalf("first waiter: %d", st)
	}
	if len(h.parked) != 2 {
		t.Fatalf("%d still waiting, want 2", len(h.parked))
	}
	h.grant("acme", 2, 2420, t0+3)
	for i, resp := range resps[1:] {
		if st, _ := h.answer(resp); st != 200 {
			t.Fatalf("waiter %d: %d", i+1, st)
		}
	}
}

func TestStagedAdmitWaitsToo(t *testing.T) {
	h := newHarness(t, 2, 1024)
	h.unfunded("acme", "key-acme")
	_, _, resp := h.do("POST", "/v1/admit", "key-acme", `{"workload":[{"op":"requests","count":3}],"ttl_ms":1000}`)
	h.grant("acme", 1, 100, t0+2)
	st, body := h.answer(resp)
	if st != 200 || body["quote"] != float64(30) {
		t.Fatalf("admit after waiting: %d %v", st, body)
	}
	if res, _ := body["reservation"].(string); len(res) != reservationLen || res[:4] != "0002" {
		t.Fatalf("reservation %q", res)
	}
}

func TestWaiterUnderANewPolicyIsRefusedNotMisread(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.unfunded("acme", "key-acme")
	_, _, resp := h.do("POST", "/v1/check", "key-acme", chatBody)
	// The new generation prices other operations: the waiter's decoded
	// indices would mean something else under it.
	snap := testSnapshot("acme")
	snap.Generation = 2
	snap.Costs.Classes = []core.OpClass{{Name: "images", Weight: 100}, {Name: "input_tokens", Weight: 1}}
	h.in.Push(message.Inbound{Kind: message.InInstall, Snap: snap})
	h.grant("acme", 1, 1_000_000, t0+2)
	st, body := h.answer(resp)
	if st != 503 || body["code"] != "lease-unavailable" {
		t.Fatalf("after a policy change: %d %v", st, body)
	}
	if h.s.engine.Counters().Admitted != 0 || h.s.usageReserved != 0 {
		t.Fatal("a request decoded under the old policy was admitted under the new one")
	}
	if n := h.s.engine.Counters().Denials[core.DenyLeaseUnavailable]; n != 1 {
		t.Fatalf("the refused answer counted %d denials, want 1", n)
	}
}

func TestFullWaitTableAnswersAtOnce(t *testing.T) {
	h := newHarnessWith(t, Config{Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4, FundingWaiters: 2}, 1024)
	h.unfunded("acme", "key-acme")
	h.do("POST", "/v1/check", "key-acme", chatBody)
	h.do("POST", "/v1/check", "key-acme", chatBody)
	st, body, _ := h.do("POST", "/v1/check", "key-acme", chatBody)
	if st != 503 || body["code"] != "lease-unavailable" || h.s.waitsFull != 1 {
		t.Fatalf("third request with two waiting: %d %v (full %d)", st, body, h.s.waitsFull)
	}
}

func TestWaitedCheckIsAcknowledgedOnceDurable(t *testing.T) {
	h := newHarnessWith(t, Config{Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4,
		AckDurable: true, AckQueue: 8}, 1024)
	h.unfunded("acme", "key-acme")
	_, _, resp := h.do("POST", "/v1/check", "key-acme", chatBody)
	if h.s.acks.claimed != 0 {
		t.Fatal("a waiting request holds ack room")
	}
	h.grant("acme", 1, 100_000, t0+2)
	if len(h.parked) != 1 || len(resp.Body()) != 0 {
		t.Fatal("answered before its usage is durable")
	}
	seqs := h.usageSeqs()
	if len(seqs) != 1 {
		t.Fatalf("usage %v", seqs)
	}
	h.s.DurableMark().Publish(seqs[0])
	h.s.Poll(t0 + 3)
	if st, body := h.answer(resp); st != 200 || body["decision"] != "admit" {
		t.Fatalf("after durable: %d %v", st, body)
	}
}

func TestNoWaitWithoutATransportThatDefers(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.unfunded("acme", "key-acme")
	r := reusedCheck()
	r.Defer, r.Now = nil, t0+1
	h.s.Serve(r)
	if resp := r.Resp; resp.StatusCode() != 503 {
		t.Fatalf("%d %q", resp.StatusCode(), resp.Body())
	}
}

func TestWaitingAllocatesNothingWhenWarm(t *testing.T) {
	h := newHarness(t, 0, 1<<16)
	h.unfunded("acme", "key-acme")
	answered := &fasthttp.Response{}
	h.s.SetCompleter(func(_ uint64, fill func(*fasthttp.Response)) {
		answered.Header.Reset() // keeps the body buffer: what the transport pools is not the shard's cost
		fill(answered)
	})
	h.s.SetPending(func(uint64) bool { return true })
	r := reusedCheck()
	now := t0
	token := uint64(0)
	run := func() {
		now += 2e6
		r.Now = now
		h.s.Serve(r) // refused: the last grant was spent exactly
		token++
		h.in.Push(message.Inbound{Kind: message.InGrant, Account: "acme", Token: token, Units: 1210, Until: now + 3600e9})
		h.s.Poll(now)
		for {
			if _, ok := h.out.Ring().Pop(); !ok {
				break
			}
		}
		if len(h.s.waits.order) != 0 || answered.StatusCode() != 200 {
			t.Fatalf("still waiting after its grant, or refused: %d", answered.StatusCode())
		}
	}
	requireNoAllocsWhenWarm(t, "waiting for funding", run)
}

// TestRebindWhileWaitingIsRefusedNotBilledElsewhere: a key rebound to
// another account while its request waits must not have the request run
// under the other account's snapshot, whose generation may well be the
// same number but whose operation indices mean other things.
func TestRebindWhileWaitingIsRefusedNotBilledElsewhere(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.unfunded("acme", "key-acme")
	globex := testSnapshot("globex")
	globex.Costs.Classes = []core.OpClass{{Name: "images", Weight: 100}, {Name: "input_tokens", Weight: 1}}
	hs, _ := credential.NewHasher(testSecret)
	d, _ := hs.Digest([]byte("key-acme"))
	_, _, resp := h.do("POST", "/v1/check", "key-acme", chatBody)
	h.in.Push(message.Inbound{Kind: message.InInstall, Snap: globex})
	h.in.Push(message.Inbound{Kind: message.InBind, Principal: d.Principal(), Digest: d, Account: "globex"})
	h.grant("globex", 1, 1_000_000, t0+2)
	h.s.Poll(t0 + 1 + DefaultFundingWait)
	st, body := h.answer(resp)
	if st != 503 || body["code"] != "lease-unavailable" {
		t.Fatalf("after the rebind: %d %v", st, body)
	}
	for _, m := range h.drainOut() {
		if m.Kind == message.OutUsage {
			t.Fatalf("billed %d units to %s for a body decoded under acme", m.Usage.Units, m.Usage.Account())
		}
	}
}

// TestWaiterWhoseClientLeftIsDroppedUnbilled: when the transport says the
// client is gone, the waiter is dropped, not admitted and billed.
func TestWaiterWhoseClientLeftIsDroppedUnbilled(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.unfunded("acme", "key-acme")
	h.do("POST", "/v1/check", "key-acme", chatBody)
	for ticket := range h.parked {
		delete(h.parked, ticket) // the connection closed
	}
	h.grant("acme", 1, 100_000, t0+2)
	if h.s.engine.Counters().Admitted != 0 || h.s.waitsAbandoned != 1 || len(h.s.waits.order) != 0 {
		t.Fatalf("admitted %d, abandoned %d, waiting %d", h.s.engine.Counters().Admitted, h.s.waitsAbandoned, len(h.s.waits.order))
	}
}

// TestEvidenceAttachedWhileWaitingIsWatched: a request parked before its
// account had an evidence cell still hears the refusal published on the
// cell attached later.
func TestEvidenceAttachedWhileWaitingIsWatched(t *testing.T) {
	h := newHarness(t, 0, 1024)
	h.unfunded("acme", "key-acme")
	_, _, resp := h.do("POST", "/v1/check", "key-acme", chatBody)
	cell := new(core.EvidenceCell)
	h.in.Push(message.Inbound{Kind: message.InEvidence, Account: "acme", Evidence: cell})
	h.s.Poll(t0 + 2) // runs it again: still unfunded, waits on
	if len(h.parked) != 1 {
		t.Fatal("answered without funding")
	}
	cell.Store(core.FundingEvidence{Remaining: 0, ResetAt: t0 + 3600e9, PeriodEnd: t0 + 3600e9})
	h.s.Poll(t0 + 3)
	if st, body := h.answer(resp); st != 402 || body["code"] != "balance-exhausted" {
		t.Fatalf("after the evidence: %d %v", st, body)
	}
}
