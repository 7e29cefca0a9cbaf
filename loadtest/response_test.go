package loadtest

import "testing"

func newTestRecv() *recvState {
	return &recvState{rec: newRecorder(newHistSet(1e9, nil))}
}

func TestHandleProblemCodes(t *testing.T) {
	r := newTestRecv()
	o := &op{next: kindCheck}
	r.resp.SetStatusCode(429)
	r.resp.SetBodyString(` {"code":"rate_limited","retry":"transient"}`)
	if r.handle(o, 100, true) {
		t.Error("a refused check continued")
	}
	r.resp.SetStatusCode(503)
	r.resp.SetBodyString(`<html>oops</html>`)
	r.handle(o, 100, true)
	r.resp.SetStatusCode(402)
	r.resp.SetBodyString(`{"code":"balance_exhausted"}`)
	r.handle(o, 100, false) // warm-up: not counted
	if len(r.rec.codes) != 1 || *r.rec.codes["rate_limited"] != 1 {
		t.Errorf("codes %v", r.rec.codes)
	}
	if r.rec.status[429] != 1 || r.rec.status[503] != 1 || r.rec.status[402] != 0 || r.rec.ops != 2 {
		t.Errorf("statuses 429=%d 503=%d 402=%d ops %d", r.rec.status[429], r.rec.status[503], r.rec.status[402], r.rec.ops)
	}
}

func TestHandleStagedSteps(t *testing.T) {
	r := newTestRecv()
	o := &op{next: kindAdmit}
	r.resp.SetStatusCode(200)
	r.resp.SetBodyString(`{"reservation":"res-\"1","quote":1201,"expires_at":"2030-01-01T00:00:00Z"}`)
	if !r.handle(o, 10, true) || o.next != kindCommit || string(o.reservation) != `res-"1` || o.quote != 1201 {
		t.Fatalf("after admit: next %v reservation %q quote %d", o.next, o.reservation, o.quote)
	}
	r.resp.SetBodyString(`{}`)
	if !r.handle(o, 10, true) || o.next != kindFinish {
		t.Fatalf("after commit: next %v", o.next)
	}
	r.resp.SetBodyString(`{"billed":1201}`)
	if r.handle(o, 10, true) {
		t.Fatal("finish continued")
	}
	if r.rec.ops != 1 || r.rec.invalid != 0 {
		t.Errorf("ops %d invalid %d", r.rec.ops, r.rec.invalid)
	}

	// A 200 admit without a reservation cannot continue: unusable.
	o = &op{next: kindAdmit}
	r.resp.SetBodyString(`{"quote":5}`)
	if r.handle(o, 10, true) || r.rec.invalid != 1 {
		t.Errorf("admit without reservation: invalid %d", r.rec.invalid)
	}
	// A refused commit ends the operation.
	o = &op{next: kindCommit}
	r.resp.SetStatusCode(409)
	r.resp.SetBodyString(`{"code":"funding-expired-at-start"}`)
	if r.handle(o, 10, true) || *r.rec.codes["funding-expired-at-start"] != 1 {
		t.Error("refused commit")
	}
}

func TestHandleAdmissionDecisions(t *testing.T) {
	r := newTestRecv()
	r.resp.SetStatusCode(200)
	for _, body := range []string{`{"decision":"admit"}`, `{"decision":"deny"}`, `{"decision":"deny"}`, `{}`, `garbage`} {
		r.resp.SetBodyString(body)
		r.handle(&op{next: kindAdmission}, 10, true)
	}
	d := r.rec.decisions
	if *d["admit"] != 1 || *d["deny"] != 2 || *d["(missing)"] != 2 {
		t.Errorf("decisions %v", d)
	}
}
