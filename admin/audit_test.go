package admin

import (
	"context"
	"testing"
)

func TestRecordSkipsUnchangedState(t *testing.T) {
	h := newHarness(t)
	ctx := withActor(context.Background(), "admin/someone")
	var f followUp
	h.srv.record(ctx, &f, "test.same", "t", map[string]int{"a": 1}, map[string]int{"a": 1})
	if n := len(h.auditLog()); n != 0 {
		t.Fatalf("unchanged state recorded: %d records", n)
	}
	h.srv.record(ctx, &f, "test.change", "t", map[string]int{"a": 1}, map[string]int{"a": 2})
	h.srv.record(ctx, &f, "test.create", "t", nil, map[string]int{"a": 3})
	recs := h.auditLog()
	if len(recs) != 2 || recs[0].Action != "test.change" || string(recs[0].Before) != `{"a":1}` || string(recs[0].After) != `{"a":2}` ||
		recs[1].Before != nil || recs[1].Actor != "admin/someone" || recs[0].Actor != "admin/someone" || recs[1].At != startNs {
		t.Fatalf("records %+v", recs)
	}
	if f != (followUp{}) {
		t.Fatalf("follow-up %+v", f)
	}
}

func TestRecordSurvivesACancelledRequest(t *testing.T) {
	// The change is already stored when its record is written: a client
	// that hung up must not cost the audit trail its record.
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var f followUp
	h.srv.record(ctx, &f, "test.cancelled", "t", nil, map[string]int{"a": 1})
	if len(h.auditLog()) != 1 || f.AuditError != "" {
		t.Fatalf("record lost to cancellation: %+v", f)
	}
}

func TestRecordReportsEncodingFailure(t *testing.T) {
	h := newHarness(t)
	var f followUp
	h.srv.record(context.Background(), &f, "test.bad", "t", nil, func() {})
	if f.AuditError == "" || len(h.auditLog()) != 0 {
		t.Fatalf("follow-up %+v", f)
	}
}
