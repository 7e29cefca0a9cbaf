package shard

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/control/message"
)

// TestAPanicWhileDecodingIsAnswered500AndChangesNothing makes every
// decoder panic in turn: each request is answered 500 internal, the shard
// is left exactly as before (usage slot and acknowledgement room handed
// back on the staged path), it is counted, and only the first panic is
// logged, with its stack.
func TestAPanicWhileDecodingIsAnswered500AndChangesNothing(t *testing.T) {
	var log bytes.Buffer
	h := newHarnessWith(t, Config{ID: 0, Secret: testSecret, MaxReservations: 256, UsageHeadroom: 4,
		AckDurable: true, PanicLog: &log}, 1024)
	h.provision("acme", "key-acme", 100_000)
	ph, _ := platformHarness(t) // for the platform token's routes
	res := h.liveReservation(true)
	h.drainOut()
	h.s.DurableMark().Publish(h.s.usageSeq) // the commit's journal entry is on disk
	h.s.Poll(t0)
	h.s.testDecodeFault = func() { panic("decoder bug") }
	ph.s.testDecodeFault = h.s.testDecodeFault
	ph.s.cfg.PanicLog = &log
	for _, c := range []struct {
		h                       *harness
		method, path, key, body string
	}{
		{h, "POST", "/v1/check", "key-acme", chatBody},
		{h, "POST", "/v1/admit", "key-acme", chatBody},
		{h, "POST", "/v1/commit", "", `{"reservation":"` + res + `"}`},
		{h, "POST", "/v1/finish", "key-acme", `{"reservation":"` + res + `"}`},
		{h, "POST", "/v1/cancel", "key-acme", `{"reservation":"` + res + `"}`},
		{ph, "POST", "/v1/usage", platformToken, render(usageTemplate)},
		{ph, "GET", "/v1/admission?agent_id=a1", platformToken, ""},
	} {
		before := c.h.state("acme")
		st, m, resp := c.h.do(c.method, c.path, c.key, c.body)
		if st != 500 || m["code"] != "internal" || string(resp.Header.ContentType()) != "application/problem+json" {
			t.Fatalf("%s: %d %v", c.path, st, m)
		}
		if _, named := m["field"]; named {
			t.Fatalf("%s: a field is named: %v", c.path, m)
		}
		if after := c.h.state("acme"); after != before {
			t.Fatalf("%s changed the shard:\n%+v\n%+v", c.path, before, after)
		}
		if len(c.h.parked) != 0 || len(c.h.drainOut()) != 0 {
			t.Fatalf("%s: parked or sent something", c.path)
		}
	}
	h.s.PublishStats()
	ph.s.PublishStats()
	if n, m := h.s.Stats().InternalErrors, ph.s.Stats().InternalErrors; n != 5 || m != 2 {
		t.Fatalf("internal errors %d and %d, want 5 and 2", n, m)
	}
	// One line per shard, whatever the number of panics.
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d log lines:\n%s", len(lines), log.String())
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil || line["level"] != "error" ||
		line["panic"] != "decoder bug" || !strings.Contains(line["stack"].(string), "decodeAdmit") {
		t.Fatalf("log line %s: %v", lines[0], err)
	}
	// The reservation is untouched and the shard serves on.
	h.s.testDecodeFault = nil
	h.do("POST", "/v1/finish", "key-acme", `{"reservation":"`+res+`"}`)
	if out := h.drainOut(); len(h.parked) != 1 || len(out) == 0 || out[0].Kind != message.OutUsage || out[0].Usage.Units != 10 {
		t.Fatalf("finish after the panics: %d parked, sent %+v", len(h.parked), out)
	}
	h.requireConserved(t, "acme")
}

// TestAPanicOutsideTheDecodersIsNotRecovered: past decoding, state may be
// half changed, so the panic goes on (and the process crashes).
func TestAPanicOutsideTheDecodersIsNotRecovered(t *testing.T) {
	h, _ := platformHarness(t)
	req, resp := fasthttp.AcquireRequest(), &fasthttp.Response{}
	req.Header.SetMethod("POST")
	req.SetRequestURI("/v1/commit")
	req.Header.Set("Authorization", "Bearer key-acme")
	req.SetBodyString(`{"reservation":"` + reservationOf(7, 1) + `"}`) // another shard's: forwarded
	defer func() {
		if recover() == nil {
			t.Fatal("a panic while forwarding was swallowed")
		}
		if h.s.internalErrors != 0 {
			t.Fatal("a panic outside the decoders was counted as recovered")
		}
	}()
	h.s.Serve(&Request{Req: req, Resp: resp, Now: t0 + 1, Defer: func() uint64 { panic("transport bug") }})
}
