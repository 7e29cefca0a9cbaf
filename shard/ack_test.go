package shard

import (
	"encoding/json"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
)

func durableHarness(t *testing.T, queue int) *harness {
	t.Helper()
	h := newHarnessWith(t, Config{Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4,
		AckDurable: true, AckQueue: queue}, 1024)
	h.provision("acme", "key-acme", 1_000_000)
	return h
}

// usageSeqs returns the Seq of every usage event sent so far.
func (h *harness) usageSeqs() []uint64 {
	var seqs []uint64
	for _, m := range h.drainOut() {
		if m.Kind == message.OutUsage {
			seqs = append(seqs, m.Seq)
		}
	}
	return seqs
}

func TestCheckAnswerWaitsForDurableUsage(t *testing.T) {
	h := durableHarness(t, 8)
	for range 3 {
		h.do("POST", "/v1/check", "key-acme", chatBody)
	}
	if len(h.parked) != 3 {
		t.Fatalf("%d answers parked, want 3 (none may be sent before the usage is durable)", len(h.parked))
	}
	seqs := h.usageSeqs()
	if len(seqs) != 3 || seqs[0] != 1 || seqs[2] != 3 {
		t.Fatalf("usage seqs %v", seqs)
	}
	h.s.DurableMark().Publish(2)
	h.s.Poll(t0 + 2)
	if len(h.parked) != 1 || h.parked[3] == nil {
		t.Fatalf("after durable 2: parked %v, want only the third", h.parked)
	}
	h.s.DurableMark().Publish(3)
	h.s.Poll(t0 + 3)
	if len(h.parked) != 0 {
		t.Fatalf("after durable 3: %d still parked", len(h.parked))
	}
}

func TestParkedAnswerIsTheCheckAnswer(t *testing.T) {
	h := durableHarness(t, 8)
	_, _, resp := h.do("POST", "/v1/check", "key-acme", chatBody)
	resp.ResetBody() // what the handler wrote must come back from the queue
	h.s.DurableMark().Publish(1)
	h.s.Poll(t0 + 2)
	var m map[string]any
	if err := json.Unmarshal(resp.Body(), &m); err != nil || resp.StatusCode() != 200 ||
		m["decision"] != "admit" || m["units"] != float64(1210) {
		t.Fatalf("released answer %d %q", resp.StatusCode(), resp.Body())
	}
}

func TestDeniedCheckIsAnsweredAtOnce(t *testing.T) {
	h := durableHarness(t, 8)
	status, body, _ := h.do("POST", "/v1/check", "key-acme", `{"permission":"images","workload":[{"op":"requests","count":1}]}`)
	if status != 403 || len(h.parked) != 0 {
		t.Fatalf("denial: %d %v, parked %d", status, body, len(h.parked))
	}
	if h.s.acks.claimed != 0 {
		t.Fatalf("claimed room leaked: %d", h.s.acks.claimed)
	}
}

func TestFullAckQueueShedsBeforeBilling(t *testing.T) {
	h := durableHarness(t, 2)
	for range 2 {
		h.do("POST", "/v1/check", "key-acme", chatBody)
	}
	status, body, _ := h.do("POST", "/v1/check", "key-acme", chatBody)
	if status != 503 || body["code"] != core.DenyAccountingBackpressure.Code() {
		t.Fatalf("third check with a full queue = %d %v", status, body)
	}
	if seqs := h.usageSeqs(); len(seqs) != 2 {
		t.Fatalf("usage events %v: the shed request must bill nothing", seqs)
	}
}

// TestCommitAndFinishAnswersWaitForDurability: a commit is journaled (a
// node that dies mid-work bills it at its quote) and a finish billed; each
// answer waits until its record is on disk.
func TestCommitAndFinishAnswersWaitForDurability(t *testing.T) {
	h := durableHarness(t, 8)
	_, body, _ := h.do("POST", "/v1/admit", "key-acme", chatBody)
	res := body["reservation"].(string)
	h.do("POST", "/v1/commit", "key-acme", `{"reservation":"`+res+`"}`)
	if len(h.parked) != 1 {
		t.Fatalf("commit answer not parked: %d", len(h.parked))
	}
	m, _ := h.out.Ring().Pop()
	if m.Kind != message.OutCommit || m.Seq != 1 || m.Usage.Units != m.Usage.Quote || m.Usage.RequestID == (core.RequestID{}) {
		t.Fatalf("commit journal entry %+v", m)
	}
	h.do("POST", "/v1/finish", "key-acme", `{"reservation":"`+res+`","units":100}`)
	if len(h.parked) != 2 {
		t.Fatalf("finish answer not parked: %d", len(h.parked))
	}
	u, _ := h.out.Ring().Pop()
	if u.Kind != message.OutUsage || u.Seq != 2 || u.Usage.RequestID != m.Usage.RequestID {
		t.Fatalf("finish usage %+v does not follow commit %+v", u, m)
	}
	h.s.DurableMark().Publish(1)
	h.s.Poll(t0 + 2)
	if len(h.parked) != 1 {
		t.Fatalf("commit answer not released alone: %d parked", len(h.parked))
	}
	h.s.DurableMark().Publish(2)
	h.s.Poll(t0 + 3)
	if len(h.parked) != 0 {
		t.Fatal("finish answer not released")
	}
}

func TestDurableCheckAllocatesNothingWhenWarm(t *testing.T) {
	h := newHarnessWith(t, Config{Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4,
		AckDurable: true, AckQueue: 16}, 1<<16)
	h.provision("acme", "key-acme", 1<<50)
	h.s.SetCompleter(func(uint64, func(*fasthttp.Response)) {})
	r := reusedCheck()
	now := t0
	run := func() {
		now += 2e6
		r.Now = now
		h.s.Serve(r)
		m, _ := h.out.Ring().Pop()
		h.s.DurableMark().Publish(m.Seq)
		h.s.Poll(now)
		if h.s.acks.head != h.s.acks.tail {
			t.Fatal("answer not released")
		}
	}
	requireNoAllocsWhenWarm(t, "durable /v1/check", run)
}
