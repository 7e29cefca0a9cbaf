package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgated/tollgated/control/record"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ledger/boltstore"
)

// FuzzEventsQuery drives GET /v1/events's query decoder over a real spool
// whose archive has dropped its oldest events, so cursors can be valid,
// expired, ahead, another node's or nonsense. For any query it asserts: no
// panic; a documented status (200, 400, 409, 410; 401 without the token);
// every error a problem naming its code; every 200 a page of at most limit
// CloudEvents of this node with a next_cursor that is never null and that
// the route takes back.
func FuzzEventsQuery(f *testing.F) {
	dir := f.TempDir()
	store, err := boltstore.Open(filepath.Join(dir, "ledger.db"), boltstore.Options{NoSync: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { store.Close() })
	if _, err := store.SetAdminTokenDigest(context.Background(), sha256.Sum256([]byte(fuzzToken))); err != nil {
		f.Fatal(err)
	}
	s := eventSpool(f, dir, 4096)
	var last uint64
	for i := range 200 {
		last = spoolRecord(f, s, usageRecord(byte(i), "acme", record.SourceLease, 3, startNs))
	}
	if err := s.Sync(); err != nil {
		f.Fatal(err)
	}
	if err := s.Release(last - 20); err != nil {
		f.Fatal(err)
	}
	hasher, err := credential.NewHasher(testSecret)
	if err != nil {
		f.Fatal(err)
	}
	srv, err := New(Config{Store: store, Hasher: hasher, Publisher: newRecordingPublisher(), Registry: prometheus.NewRegistry(),
		Now: func() int64 { return fuzzNow }, Events: s, Node: "node-a"})
	if err != nil {
		f.Fatal(err)
	}

	cursor := func(after string) string { return base64.RawURLEncoding.EncodeToString([]byte("events:" + after)) }
	for _, q := range []string{"", "limit=1", "limit=1000", "limit=0", "limit=1001", "limit=-1", "limit=1e3", "limit=1&limit=2",
		"cursor=" + cursor("node-a/0"), "cursor=" + cursor("node-a/150"), "cursor=" + cursor("node-a/200"),
		"cursor=" + cursor("node-a/201"), "cursor=" + cursor("node-a/18446744073709551615"), "cursor=" + cursor("node-a/18446744073709551616"),
		"cursor=" + cursor("node-b/150"), "cursor=" + cursor("node-a/"), "cursor=" + cursor("/150"), "cursor=" + cursor("node-a/1/2"),
		"cursor=" + cursor("node-a/+5"), "cursor=" + cursor("node-a/0x10"), "cursor=" + cursor("node-a/\xff"),
		"cursor=" + base64.RawURLEncoding.EncodeToString([]byte("audit:5")), "cursor=", "cursor=%zz", "after=5", "%",
		"limit=5&cursor=" + cursor("node-a/190"), "cursor=" + cursor("node-a/190") + "&cursor=" + cursor("node-a/191")} {
		for auth := range uint8(2) {
			f.Add(auth, q)
		}
	}
	route := fuzzRoute{method: "GET", path: "/v1/events", statuses: []int{200, 400, 409, 410}}
	f.Fuzz(func(t *testing.T, auth uint8, query string) {
		req, err := newFuzzRequest("GET", "/v1/events?"+query, nil)
		if err != nil {
			return
		}
		if auth%2 == 0 {
			req.Header.Set("Authorization", "Bearer "+fuzzToken)
		}
		w := httptest.NewRecorder()
		srv.Handler().ServeHTTP(w, req)
		checkAnswer(t, route, auth%2 == 0, w)
		if n := testutil.ToFloat64(srv.metrics.panics); n != 0 {
			t.Fatalf("%q: a handler panicked", query)
		}
		if w.Code != http.StatusOK {
			return
		}
		var page struct {
			Items      []cloudEvent `json:"items"`
			NextCursor *string      `json:"next_cursor"`
		}
		dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&page); err != nil || page.NextCursor == nil || page.Items == nil {
			t.Fatalf("%q: page %s: %v", query, w.Body.Bytes(), err)
		}
		limit := DefaultListLimit
		if v, ok := req.URL.Query()["limit"]; ok {
			limit, _ = strconv.Atoi(v[0])
		}
		if len(page.Items) > limit {
			t.Fatalf("%q: %d items", query, len(page.Items))
		}
		for _, ev := range page.Items {
			if ev.Source != "node-a" || ev.SpecVersion != "1.0" || ev.Subject != "acme" || len(ev.ID) != 32 {
				t.Fatalf("%q: event %+v", query, ev)
			}
		}
		back := httptest.NewRecorder()
		req = httptest.NewRequest("GET", "/v1/events?cursor="+*page.NextCursor, nil)
		req.Header.Set("Authorization", "Bearer "+fuzzToken)
		srv.Handler().ServeHTTP(back, req)
		if back.Code != http.StatusOK {
			t.Fatalf("%q: its next_cursor %s answers %d %s", query, *page.NextCursor, back.Code, back.Body.Bytes())
		}
	})
}
