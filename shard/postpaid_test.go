package shard

import (
	"encoding/json"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/control/message"
)

func (h *harness) postUsage(body string, deferred bool) (int, map[string]any, *fasthttp.Response) {
	h.t.Helper()
	req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
	req.Header.SetMethod("POST")
	req.SetRequestURI("/v1/usage")
	req.Header.Set("Authorization", "Bearer "+platformToken)
	req.SetBodyString(body)
	r := &Request{Req: req, Resp: resp, Now: t0 + 1}
	if deferred {
		r.Defer = func() uint64 { h.tickets++; h.parked[h.tickets] = resp; return h.tickets }
	}
	h.s.Serve(r)
	var m map[string]any
	json.Unmarshal(resp.Body(), &m)
	return resp.StatusCode(), m, resp
}

func TestPostPaidBatchGoesToThePlaneAndIsAnsweredWithItsCounts(t *testing.T) {
	h, _ := agentHarness(t, 0)
	h.drainOut()
	status, _, resp := h.postUsage(`{"events":[
		{"id":"e1","agent_id":"a1","units":5,"occurred_at":"2026-12-02T17:00:00Z"},
		{"id":"e2","agent_id":"ghost","units":5,"occurred_at":"2026-12-02T17:00:00Z"}]}`, true)
	if len(h.parked) != 1 {
		t.Fatalf("answer not parked: %d %s", status, resp.Body())
	}
	var batch *message.PostPaidBatch
	for _, m := range h.drainOut() {
		if m.Kind == message.OutPostPaid {
			batch = m.Batch
			h.in.Push(message.Inbound{Kind: message.InPostPaidDone, Ticket: m.Ticket, Batch: m.Batch})
		}
	}
	if batch == nil || len(batch.Events) != 1 || batch.Rejected != 1 || batch.Events[0].ID != PostPaidID([]byte("e1")) {
		t.Fatalf("batch sent to the plane: %+v", batch)
	}
	batch.Accepted = 1 // the plane's count
	h.s.Poll(t0 + 2)
	if len(h.parked) != 0 || string(resp.Body()) != `{"accepted":1,"duplicate":0,"rejected":1}` {
		t.Fatalf("answer %d %s", resp.StatusCode(), resp.Body())
	}
}

func TestPostPaidRefusals(t *testing.T) {
	h, _ := agentHarness(t, 0)
	for _, c := range []struct{ body, code, field string }{
		{`[]`, "invalid-body", ""},
		{`{"events":[]}`, "invalid-body", "events"},
		{`{"events":[{"id":"","agent_id":"a1","units":1,"occurred_at":"2026-12-02T17:00:00Z"}]}`, "invalid-body", "events[0].id"},
		{`{"events":[{"id":"x","agent_id":"a1","units":0,"occurred_at":"2026-12-02T17:00:00Z"}]}`, "invalid-body", "events[0].units"},
		{`{"events":[{"id":"x","agent_id":"a1","units":1,"occurred_at":"yesterday"}]}`, "invalid-body", "events[0].occurred_at"},
	} {
		status, m, _ := h.postUsage(c.body, true)
		if status != 400 || m["code"] != c.code || m["detail"] == "" || (c.field != "" && m["field"] != c.field) {
			t.Errorf("%s: %d %v, want 400 %s naming %q", c.body, status, m, c.code, c.field)
		}
	}
	if status, m, _ := h.postUsage(`{"events":[{"id":"x","agent_id":"a1","units":1,"occurred_at":"2026-12-02T17:00:00Z"}]}`, false); status != 503 || m["code"] != "usage-unavailable" {
		t.Fatalf("without a way to wait: %d %v", status, m)
	}
}
