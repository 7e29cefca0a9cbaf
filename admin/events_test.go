package admin

import (
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/tollgated/tollgated/control/record"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/spool"
)

// eventSpool is a spool with an archive, in small segments so that a few
// hundred records span many, for the billed-event stream's tests.
func eventSpool(t testing.TB, dir string, archiveBytes int64) *spool.Spool {
	t.Helper()
	s, err := spool.Open(filepath.Join(dir, "spool"), spool.Options{SegmentBytes: 2048,
		ArchiveDir: filepath.Join(dir, "events"), ArchiveMaxBytes: archiveBytes, ArchiveMaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Replay(func(uint64, []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	return s
}

// spoolRecord appends r to s.
func spoolRecord(t testing.TB, s *spool.Spool, r record.Record) uint64 {
	t.Helper()
	seq, err := s.Append(record.Append(nil, &r))
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// withEvents serves h's ledger again with an event log, as node.
func (h *harness) withEvents(log EventLog, node string) {
	h.t.Helper()
	hasher, err := credential.NewHasher(testSecret)
	if err != nil {
		h.t.Fatal(err)
	}
	h.srv, err = New(Config{Store: h.store, Hasher: hasher, Publisher: h.pub, Now: h.now.Load, Events: log, Node: node})
	if err != nil {
		h.t.Fatal(err)
	}
	h.serve(Limits{})
}

func usageRecord(id byte, account core.AccountID, src record.Source, units core.CostUnits, at int64) record.Record {
	r := record.Record{Kind: record.Usage, Usage: record.Event{ID: [16]byte{id, 0xee}, Account: account, Source: src, Units: units, OccurredAt: at}}
	if src == record.SourceLease {
		r.Usage.LeaseID, r.Usage.Token = 7, 3
		r.Revision = core.PolicyRevision{id, 0xab}
	}
	return r
}

// TestEventsStreamEveryBilledEventOnce: the stream shows each usage
// record — lease, overage, post-paid — as a CloudEvent, once, in spool
// order, and skips commit journal entries; its cursor is never null.
func TestEventsStreamEveryBilledEventOnce(t *testing.T) {
	h := newHarness(t)
	s := eventSpool(t, t.TempDir(), 1<<20)
	h.withEvents(s, "node-a")
	at := time.Date(2026, 12, 3, 10, 0, 0, 123, time.UTC).UnixNano()

	empty := h.ok(http.StatusOK, "GET", "/v1/events", "")
	if items := empty["items"].([]any); len(items) != 0 {
		t.Fatalf("an empty spool streams %v", items)
	}
	start := empty["next_cursor"].(string)

	want := []record.Record{
		usageRecord(1, "acme", record.SourceLease, 10, at),
		{Kind: record.Commit, Usage: record.Event{ID: [16]byte{2}, Account: "acme", Source: record.SourceLease, LeaseID: 7, Units: 5, OccurredAt: at}},
		usageRecord(3, "acme", record.SourceOverage, 4, at+1),
		usageRecord(4, "agent", record.SourcePostPaid, 120, at+2),
		usageRecord(5, "agent", record.SourcePostPaid, 30, at+3), // spooled before reporters' ids were kept
	}
	want[3].EventID = "run-7/event-1"
	for _, r := range want {
		spoolRecord(t, s, r)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	page := h.ok(http.StatusOK, "GET", "/v1/events?limit=2&cursor="+start, "")
	items := page["items"].([]any)
	if len(items) != 2 {
		t.Fatalf("first page: %v", page)
	}
	next := page["next_cursor"].(string)
	page = h.ok(http.StatusOK, "GET", "/v1/events?limit=2&cursor="+next, "")
	items = append(items, page["items"].([]any)...)
	if len(items) != 4 {
		t.Fatalf("events %v", items)
	}
	end := page["next_cursor"].(string)
	again := h.ok(http.StatusOK, "GET", "/v1/events?cursor="+end, "")
	if len(again["items"].([]any)) != 0 || again["next_cursor"] != end {
		t.Fatalf("after the last event: %v, want no items and the same cursor %s", again, end)
	}
	if all := h.ok(http.StatusOK, "GET", "/v1/events?limit=1000", ""); len(all["items"].([]any)) != 4 {
		t.Fatalf("from the start without a cursor: %v", all)
	}

	for i, r := range []record.Record{want[0], want[2], want[3], want[4]} {
		ev := items[i].(map[string]any)
		data := ev["data"].(map[string]any)
		id := hex.EncodeToString(r.Usage.ID[:])
		kind := map[record.Source]string{record.SourceLease: "lease", record.SourceOverage: "overage", record.SourcePostPaid: "post_paid"}[r.Usage.Source]
		if ev["specversion"] != "1.0" || ev["type"] != "tollgated.usage" || ev["source"] != "node-a" ||
			ev["subject"] != string(r.Usage.Account) || ev["id"] != id || ev["datacontenttype"] != "application/json" ||
			ev["time"] != time.Unix(0, r.Usage.OccurredAt).UTC().Format(time.RFC3339Nano) ||
			data["units"] != float64(r.Usage.Units) || data["kind"] != kind {
			t.Fatalf("event %d: %v, want %+v", i, ev, r)
		}
		switch r.Usage.Source {
		case record.SourceLease:
			if data["request_id"] != id || data["policy_revision"] != hex.EncodeToString(r.Revision[:]) || data["lease_id"] != float64(7) {
				t.Fatalf("lease event data %v", data)
			}
		case record.SourceOverage:
			if data["request_id"] != id || data["policy_revision"] != nil || data["lease_id"] != nil {
				t.Fatalf("overage event data %v", data)
			}
		case record.SourcePostPaid:
			want := any(nil) // spooled before reporters' ids were kept
			if r.EventID != "" {
				want = r.EventID
			}
			if data["request_id"] != nil || data["policy_revision"] != nil || data["event_id"] != want {
				t.Fatalf("post-paid event data %v, want event_id %v", data, want)
			}
		}
	}
}

// TestEventsCursorProblems: a cursor the retention dropped is 410
// cursor-expired, one past the end 409 cursor-ahead, another node's or a
// malformed one 400 invalid-query; each names the cursor.
func TestEventsCursorProblems(t *testing.T) {
	h := newHarness(t)
	s := eventSpool(t, t.TempDir(), 4096)
	h.withEvents(s, "node-a")
	first := h.ok(http.StatusOK, "GET", "/v1/events", "")["next_cursor"].(string)
	var last uint64
	for i := range 300 {
		last = spoolRecord(t, s, usageRecord(byte(i), "acme", record.SourceOverage, 1, startNs))
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(last); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Pruned == 0 || st.Oldest <= 1 {
		t.Fatalf("the archive's bound pruned nothing: %+v", st)
	}
	p := h.fails(http.StatusGone, codeCursorExpired, "GET", "/v1/events?cursor="+first, "")
	if p.Field != "cursor" {
		t.Fatalf("cursor-expired names %q", p.Field)
	}
	// Without a cursor the stream starts at the oldest event kept.
	page := h.ok(http.StatusOK, "GET", "/v1/events?limit=1000", "")
	if n := uint64(len(page["items"].([]any))); n != last-s.Oldest()+1 {
		t.Fatalf("from the oldest kept: %d events, want %d", n, last-s.Oldest()+1)
	}

	cursor := func(after string) string { return base64.RawURLEncoding.EncodeToString([]byte("events:" + after)) }
	h.fails(http.StatusConflict, codeCursorAhead, "GET", "/v1/events?cursor="+cursor("node-a/1000000"), "")
	for _, bad := range []string{cursor("node-b/10"), cursor("node-a/x"), cursor("node-a/-1"), cursor("node-a/010"), cursor("node-a"),
		base64.RawURLEncoding.EncodeToString([]byte("audit:5")), "!!", ""} {
		p := h.fails(http.StatusBadRequest, codeInvalidQuery, "GET", "/v1/events?cursor="+bad, "")
		if p.Field != "cursor" {
			t.Fatalf("cursor %q: problem names %q", bad, p.Field)
		}
	}
	h.fails(http.StatusBadRequest, codeInvalidQuery, "GET", "/v1/events?after=1", "")
	h.fails(http.StatusBadRequest, codeDuplicateField, "GET", "/v1/events?limit=1&limit=2", "")
	h.fails(http.StatusBadRequest, codeInvalidQuery, "GET", "/v1/events?limit=1001", "")
}

// TestEventsWithoutALogIsNotFound: a Server built without an event log
// (a tool, a test) has no stream.
func TestEventsWithoutALogIsNotFound(t *testing.T) {
	h := newHarness(t)
	h.fails(http.StatusNotFound, codeNotFound, "GET", "/v1/events", "")
	h.fails(http.StatusMethodNotAllowed, codeMethodNotAllowed, "POST", "/v1/events", "")
}
