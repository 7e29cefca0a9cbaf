//go:build linux

package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
	"github.com/tollgated/tollgated/shard"
)

// streamed is one CloudEvent as GET /v1/events serves it.
type streamed struct {
	SpecVersion string `json:"specversion"`
	Type        string `json:"type"`
	Source      string `json:"source"`
	Subject     string `json:"subject"`
	ID          string `json:"id"`
	Time        string `json:"time"`
	Data        struct {
		Units          uint64 `json:"units"`
		Kind           string `json:"kind"`
		RequestID      string `json:"request_id"`
		EventID        string `json:"event_id"`
		PolicyRevision string `json:"policy_revision"`
		LeaseID        uint64 `json:"lease_id"`
	} `json:"data"`
}

// consumer follows a node's billed-event stream as a billing system would:
// it keeps every event it was served and the cursor to resume from.
type consumer struct {
	t      *testing.T
	cursor string
	seen   []streamed
}

// page asks for the next page from p; it returns the status, and on a 200
// keeps the events and moves the cursor. A transport error (the daemon
// died) is status 0.
func (c *consumer) page(p *proc, limit int) (int, string) {
	c.t.Helper()
	q := fmt.Sprintf("/v1/events?limit=%d", limit)
	if c.cursor != "" {
		q += "&cursor=" + url.QueryEscape(c.cursor)
	}
	req, _ := http.NewRequest("GET", "http://"+p.adm+q, nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		var prob struct{ Code string }
		json.Unmarshal(raw, &prob)
		return resp.StatusCode, prob.Code
	}
	var body struct {
		Items      []streamed `json:"items"`
		NextCursor *string    `json:"next_cursor"`
	}
	if err := json.Unmarshal(raw, &body); err != nil || body.NextCursor == nil {
		c.t.Fatalf("GET %s: %s (%v)", q, raw, err)
	}
	c.seen = append(c.seen, body.Items...)
	c.cursor = *body.NextCursor
	return http.StatusOK, fmt.Sprint(len(body.Items))
}

// drain pages until a page comes back empty.
func (c *consumer) drain(p *proc) {
	c.t.Helper()
	if status, what := c.tryDrain(p); status != http.StatusOK {
		c.t.Fatalf("GET /v1/events: %d %s", status, what)
	}
}

// tryDrain is drain, returning the first refusal instead of failing.
func (c *consumer) tryDrain(p *proc) (int, string) {
	c.t.Helper()
	for range 10_000 {
		status, what := c.page(p, 97)
		if status != http.StatusOK || what == "0" {
			return status, what
		}
	}
	c.t.Fatal("the stream did not end")
	return 0, ""
}

// byID indexes what c saw, failing on an event served twice.
func (c *consumer) byID() map[string]streamed {
	c.t.Helper()
	out := make(map[string]streamed, len(c.seen))
	for _, ev := range c.seen {
		if _, dup := out[ev.ID]; dup {
			c.t.Fatalf("event %s served twice", ev.ID)
		}
		out[ev.ID] = ev
	}
	return out
}

// checkAll asserts every acknowledged check and post-paid event is in
// what c saw, once, with its fields.
func (c *consumer) checkAll(node, account string, price uint64, checks map[string]uint64, postPaid map[string]uint64, unanswered int) {
	c.t.Helper()
	seen := c.byID()
	for id, units := range checks {
		ev, ok := seen[id]
		if !ok {
			c.t.Fatalf("acknowledged request %s is not in the stream (%d events seen, %d checks acknowledged)", id, len(seen), len(checks))
		}
		if ev.SpecVersion != "1.0" || ev.Type != "tollgated.usage" || ev.Source != node || ev.Subject != account ||
			ev.Data.Units != units || ev.Data.RequestID != id || ev.Data.Kind != "lease" || ev.Data.LeaseID == 0 ||
			len(ev.Data.PolicyRevision) != 64 || ev.Time == "" {
			c.t.Fatalf("event of request %s: %+v (want units %d)", id, ev, units)
		}
	}
	for reporterID, units := range postPaid {
		id := shard.PostPaidID([]byte(reporterID))
		ev, ok := seen[hex.EncodeToString(id[:])]
		if !ok {
			c.t.Fatalf("post-paid event %s is not in the stream", reporterID)
		}
		if ev.Source != node || ev.Subject != account || ev.Data.Units != units || ev.Data.Kind != "post_paid" || ev.Data.RequestID != "" ||
			ev.Data.EventID != reporterID {
			c.t.Fatalf("post-paid event %s: %+v", reporterID, ev)
		}
	}
	if want := len(checks) + len(postPaid); len(seen) < want || len(seen) > want+unanswered {
		c.t.Fatalf("the stream holds %d events, %d were acknowledged and %d not answered", len(seen), want, unanswered)
	}
}

// checks sends /v1/check requests one after another until n are
// acknowledged and returns them: request id → units. A loaded machine may
// answer one 503 or 504 (not acknowledged: its usage may or may not be
// billed); those are retried, at most n of them, and counted in
// unanswered.
func checks(t *testing.T, p *proc, key string, n int, unanswered *int) map[string]uint64 {
	t.Helper()
	out := make(map[string]uint64, n)
	for retries := 0; len(out) < n; {
		req, _ := http.NewRequest("POST", "http://"+p.listen+"/v1/check",
			strings.NewReader(`{"permission":"chat","workload":[{"op":"requests","count":1}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			RequestID string `json:"request_id"`
			Units     uint64 `json:"units"`
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if (resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout) && retries < n {
			retries++
			*unanswered++
			continue
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &m) != nil || m.RequestID == "" {
			t.Fatalf("check: %d %s", resp.StatusCode, raw)
		}
		out[m.RequestID] = m.Units
	}
	return out
}

func nodeOf(t *testing.T, dataDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, nodeIDFile))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestEventsStreamSurvivesRestartsAndCrashes: a billing system follows a
// real daemon's GET /v1/events while it serves checks and post-paid
// reports, is stopped with SIGTERM and killed with SIGKILL, and resumes
// each time from its last cursor. It sees every acknowledged event exactly
// once, with its fields, and nothing else.
func TestEventsStreamSurvivesRestartsAndCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills real processes")
	}
	t.Parallel()
	dir := t.TempDir()
	flags := []string{"--spool-segment-bytes", "4096", "--lease-ttl", "5s", "--lease-grace", "1s"}
	const price = 7
	p := startProc(t, dir, flags...)
	node := nodeOf(t, dir)
	key := p.provision("ev", 1<<40, price)
	tok := p.adminCall("POST", "/v1/platform-tokens", nil, http.StatusCreated)["token"].(string)
	c := &consumer{t: t}

	unanswered := 0
	acked := checks(t, p, key, 150, &unanswered)
	post := map[string]uint64{}
	if r := p.postUsage(tok, "ev", 20, 11, "run-a"); r["accepted"] != float64(20) {
		t.Fatalf("post-paid: %v", r)
	}
	for i := range 20 {
		post[fmt.Sprintf("run-a-%d", i)] = 11
	}
	c.drain(p)
	c.checkAll(node, "ev", price, acked, post, unanswered)
	if len(acked) != 150 {
		t.Fatalf("%d distinct request ids for 150 checks", len(acked))
	}

	// SIGTERM, more traffic after the restart: resume from the cursor.
	p.stop()
	p = startProc(t, dir, flags...)
	for id, u := range checks(t, p, key, 100, &unanswered) {
		acked[id] = u
	}
	c.drain(p)
	c.checkAll(node, "ev", price, acked, post, unanswered)

	// kill -9 under load while the consumer reads: it resumes after the
	// restart from the last cursor it was given.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := load(ctx, p.listen, key, 8)
	stopReading := make(chan struct{})
	read := make(chan struct{})
	var pages atomic.Int32
	go func() {
		defer close(read)
		for {
			select {
			case <-stopReading:
				return
			default:
			}
			if status, _ := c.page(p, 50); status != http.StatusOK {
				return // the daemon is gone
			}
			pages.Add(1)
		}
	}()
	// The consumer reads along with the load for a while, then stops
	// before the kill, so that it resumes from behind events written
	// before it.
	a.awaitAcked(t, 500)
	await.True(t, "the consumer reading pages", func() bool { return pages.Load() >= 5 })
	close(stopReading)
	<-read
	readBeforeKill := len(c.seen)
	a.awaitAcked(t, a.count()+100)
	p.kill9()
	a.wait()
	cancel()
	if len(a.units) == 0 {
		t.Fatalf("nothing acknowledged before the kill (%v)", a.denied)
	}
	t.Logf("before kill -9: %d acknowledged under load, %d events read so far", len(a.units), readBeforeKill)
	for id, u := range a.units {
		acked[id] = u
	}
	p = startProc(t, dir, flags...)
	after := checks(t, p, key, 30, &unanswered)
	for id, u := range after {
		acked[id] = u
		a.units[id] = u
	}
	c.drain(p)
	if len(c.seen)-readBeforeKill < len(after)+100 {
		t.Fatalf("after the restart the consumer read only %d events: the kill left nothing behind its cursor", len(c.seen)-readBeforeKill)
	}
	// The stream may hold events a client never saw answered (the process
	// died between durability and the answer): they are billed, so they
	// are in it. Everything acknowledged is there once.
	seen := c.byID()
	for reporterID := range post {
		id := shard.PostPaidID([]byte(reporterID))
		acked[hex.EncodeToString(id[:])] = 11
	}
	extra := 0
	for id := range seen {
		if _, ok := acked[id]; !ok {
			extra++
		}
	}
	for id, units := range a.units {
		if ev, ok := seen[id]; !ok || ev.Data.Units != units {
			t.Fatalf("acknowledged request %s: streamed %+v (present %v)", id, ev, ok)
		}
	}
	// At most one request per connection was in flight when it died.
	if extra > 8+unanswered {
		t.Fatalf("%d streamed events were never acknowledged; 8 connections had at most 8 in flight, %d checks were not answered", extra, unanswered)
	}
	t.Logf("after the restart: %d events streamed once each, %d of them in flight (not acknowledged) at the kill", len(seen), extra)

	// A reporter's retry is spooled and billed as a duplicate: it is a
	// second event with the same CloudEvents id, which consumers dedupe.
	if r := p.postUsage(tok, "ev", 1, 11, "run-a"); r["duplicate"] != float64(1) {
		t.Fatalf("re-sent post-paid event: %v", r)
	}
	retry := &consumer{t: t, cursor: c.cursor}
	retry.drain(p)
	first := shard.PostPaidID([]byte("run-a-0"))
	if len(retry.seen) != 1 || retry.seen[0].ID != hex.EncodeToString(first[:]) || retry.seen[0].Data.Kind != "post_paid" ||
		retry.seen[0].Data.EventID != "run-a-0" {
		t.Fatalf("after a re-sent report the stream added %+v", retry.seen)
	}
	p.stop()
}

// TestEventsRetentionExpiresOldCursors: with a small archive, the oldest
// billed events are dropped once released, and a consumer that kept a
// cursor from before them is told 410 cursor-expired; one without a cursor
// starts at the oldest event kept.
func TestEventsRetentionExpiresOldCursors(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	dir := t.TempDir()
	p := startProc(t, dir, "--spool-segment-bytes", "4096", "--event-archive-bytes", "8192")
	key := p.provision("ev", 1<<40, 3)
	early := &consumer{t: t}
	if status, _ := early.page(p, 1); status != http.StatusOK {
		t.Fatalf("first page: %d", status)
	}
	var unanswered int
	acked := checks(t, p, key, 400, &unanswered)
	await.True(t, "the old cursor expired", func() bool {
		status, code := (&consumer{t: t, cursor: early.cursor}).page(p, 10)
		if status != http.StatusOK && !(status == http.StatusGone && code == "cursor-expired") {
			t.Fatalf("an old cursor: %d %s", status, code)
		}
		return status == http.StatusGone
	})
	if n := p.metric("tollgated_event_archive_pruned_segments_total"); n == 0 {
		t.Fatal("a cursor expired but no segment was pruned")
	}
	if b := p.metric("tollgated_event_archive_bytes"); b > 8192 || b == 0 {
		t.Fatalf("archive holds %v bytes, bound 8192", b)
	}
	ahead := &consumer{t: t, cursor: base64.RawURLEncoding.EncodeToString([]byte("events:" + nodeOf(t, dir) + "/1000000000"))}
	if status, code := ahead.page(p, 10); status != http.StatusConflict || code != "cursor-ahead" {
		t.Fatalf("a cursor from the future: %d %s", status, code)
	}
	// Events billed by the last checks may still be pruning older ones
	// while this consumer reads: told its cursor expired, it starts again
	// from the oldest kept, as a consumer should. Pruning ends once the
	// exporter has caught up.
	var fresh *consumer
	for attempt := 1; ; attempt++ {
		fresh = &consumer{t: t}
		status, code := fresh.tryDrain(p)
		if status == http.StatusOK {
			break
		}
		if status != http.StatusGone || code != "cursor-expired" || attempt == 20 {
			t.Fatalf("reading from the oldest kept (attempt %d): %d %s", attempt, status, code)
		}
	}
	seen := fresh.byID()
	if len(seen) == 0 || len(seen) >= len(acked) {
		t.Fatalf("from the oldest kept: %d of %d events", len(seen), len(acked))
	}
	stray := 0
	for id := range seen {
		if _, ok := acked[id]; !ok {
			stray++
		}
	}
	if stray > unanswered {
		t.Fatalf("%d streamed events were never acknowledged, %d checks were not answered", stray, unanswered)
	}
	p.stop()
}

// count is how many requests were acknowledged so far.
func (a *acked) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.units)
}
