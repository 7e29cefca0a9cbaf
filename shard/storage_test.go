package shard

import (
	"bytes"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
)

func storageHarness(t *testing.T) (*harness, *Storage) {
	t.Helper()
	st := new(Storage)
	h := newHarnessWith(t, Config{Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4,
		AckDurable: true, AckQueue: 64, Storage: st}, 1024)
	h.provision("acme", "key-acme", 1_000_000)
	return h, st
}

// TestStorageFullRefusesBeforeAdmission: while the spool cannot take
// records, every request that would bill — /v1/check, /v1/admit — is
// answered 503 at once (nothing parked), a transient problem with
// Retry-After, and changes nothing: no admission, no debit, no usage slot,
// no usage event. A reservation admitted before still finishes and bills;
// /readyz says why it is not ready; once the spool has room, checks are
// admitted again.
func TestStorageFullRefusesBeforeAdmission(t *testing.T) {
	for _, c := range []struct {
		state  StorageState
		reason core.DenyReason
	}{{StorageFull, core.DenyStorageFull}, {StorageFailed, core.DenyStorageFailed}} {
		t.Run(c.reason.Code(), func(t *testing.T) {
			h, st := storageHarness(t)
			status, body, _ := h.do("POST", "/v1/admit", "key-acme", `{"workload":[{"op":"requests","count":1}],"ttl_ms":5000}`)
			if status != 200 {
				t.Fatalf("admit before the fault = %d %v", status, body)
			}
			res := body["reservation"].(string)
			h.do("POST", "/v1/commit", "key-acme", `{"reservation":"`+res+`"}`)
			h.drainOut()
			h.s.DurableMark().Publish(h.s.usageSeq) // the commit's journal entry is durable
			h.s.Poll(t0 + 1)
			if len(h.parked) != 0 {
				t.Fatalf("commit still parked")
			}
			lease, _ := h.s.engine.Lease("acme")
			units, before, slots := lease.Units(), h.s.engine.Counters(), h.s.usageReserved

			st.Set(c.state)
			for _, r := range []struct{ path, body string }{
				{"/v1/check", chatBody},
				{"/v1/admit", `{"workload":[{"op":"requests","count":1}],"ttl_ms":5000}`},
			} {
				status, body, resp := h.do("POST", r.path, "key-acme", r.body)
				if status != 503 || body["code"] != c.reason.Code() || body["retry"] != "transient" ||
					string(resp.Header.Peek("Retry-After")) == "" || string(resp.Header.ContentType()) != "application/problem+json" {
					t.Fatalf("%s = %d %v (Retry-After %q)", r.path, status, body, resp.Header.Peek("Retry-After"))
				}
			}
			if len(h.parked) != 0 || h.s.usageReserved != slots || h.s.acks.claimed != 0 {
				t.Fatalf("parked %d, usage slots %d (had %d), ack room %d", len(h.parked), h.s.usageReserved, slots, h.s.acks.claimed)
			}
			after := h.s.engine.Counters()
			if lease, _ := h.s.engine.Lease("acme"); lease.Units() != units || after.Admitted != before.Admitted ||
				after.Denials[c.reason] != before.Denials[c.reason]+2 {
				t.Fatalf("lease %d→%d, admitted %d→%d, %s %d→%d", units, lease.Units(), before.Admitted, after.Admitted,
					c.reason, before.Denials[c.reason], after.Denials[c.reason])
			}
			for _, m := range h.drainOut() {
				if m.Kind == message.OutUsage {
					t.Fatalf("a refused request sent usage: %+v", m)
				}
			}
			status, body, _ = h.do("GET", "/readyz", "", "")
			if status != 503 || body["code"] != c.reason.Code() {
				t.Fatalf("/readyz = %d %v", status, body)
			}

			// Usage already on its way is never refused.
			status, body, _ = h.do("POST", "/v1/finish", "key-acme", `{"reservation":"`+res+`","units":1}`)
			if status != 200 || body["billed"] != float64(1) || len(h.parked) != 1 {
				t.Fatalf("finish of an earlier reservation = %d %v, parked %d", status, body, len(h.parked))
			}
			if seqs := h.usageSeqs(); len(seqs) != 1 {
				t.Fatalf("finish sent %d usage events", len(seqs))
			}

			st.Set(StorageOK)
			if status, body, _ := h.do("POST", "/v1/check", "key-acme", chatBody); status != 200 || len(h.parked) != 2 {
				t.Fatalf("check once the spool has room = %d %v, parked %d", status, body, len(h.parked))
			}
			if status, body, _ := h.do("GET", "/readyz", "", ""); status != 200 {
				t.Fatalf("/readyz once the spool has room = %d %v", status, body)
			}
		})
	}
}

var storageFullCode = []byte(`"storage-full"`)

// TestStorageRefusalAllocatesNothingWhenWarm: the refusal is a flag read
// and a problem written in the shard's scratch.
func TestStorageRefusalAllocatesNothingWhenWarm(t *testing.T) {
	h, st := storageHarness(t)
	st.Set(StorageFull)
	r := reusedCheck()
	r.Now = t0 + 1
	requireNoAllocsWhenWarm(t, "a check refused storage-full", func() {
		h.s.Serve(r)
		if r.Resp.StatusCode() != fasthttp.StatusServiceUnavailable || !bytes.Contains(r.Resp.Body(), storageFullCode) {
			t.Fatalf("= %d %s", r.Resp.StatusCode(), r.Resp.Body())
		}
	})
}
