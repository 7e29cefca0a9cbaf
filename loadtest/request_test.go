package loadtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func testEncoder(t *testing.T, o Options) (*encoder, *sendState) {
	t.Helper()
	o.URL = "http://127.0.0.1:8080/base/"
	o.setDefaults()
	if err := o.check(); err != nil {
		t.Fatal(err)
	}
	tg, err := CheckTarget(o.URL, false)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := NewPicker(len(o.Accounts), 0)
	return newEncoder(tg, &o), &sendState{
		rng:      rand.New(rand.NewPCG(1, 1)),
		picker:   p,
		accounts: newWireAccounts(o.Accounts),
		conn:     3,
	}
}

// parse reads raw back with fasthttp, the way a server would.
func parse(t *testing.T, raw []byte) *fasthttp.Request {
	t.Helper()
	var req fasthttp.Request
	br := bufio.NewReader(bytes.NewReader(raw))
	if err := req.Read(br); err != nil {
		t.Fatalf("%v in %q", err, raw)
	}
	if br.Buffered() != 0 {
		t.Fatalf("%d bytes after the request in %q", br.Buffered(), raw)
	}
	return &req
}

func TestEncodeCheckAndStaged(t *testing.T) {
	e, s := testEncoder(t, Options{
		Accounts: []Account{{"acme", "sk-1"}},
		TTLms:    250,
	})
	o := &op{next: kindCheck}
	req := parse(t, e.appendRequest(nil, o, s))
	if string(req.Header.Method()) != "POST" || string(req.RequestURI()) != "/base/v1/check" ||
		string(req.Header.Peek("Authorization")) != "Bearer sk-1" ||
		string(req.Header.ContentType()) != "application/json" ||
		string(req.Header.Host()) != "127.0.0.1:8080" ||
		string(req.Body()) != DefaultCheckBody {
		t.Errorf("check request:\n%s", req)
	}

	o.next = kindAdmit
	req = parse(t, e.appendRequest(nil, o, s))
	var admit map[string]any
	if err := json.Unmarshal(req.Body(), &admit); err != nil || admit["ttl_ms"] != 250.0 || admit["permission"] != "chat" {
		t.Errorf("admit body %s: %v", req.Body(), err)
	}

	o.reservation = []byte("r\"1\\\x01é")
	o.quote = 1201
	o.next = kindCommit
	req = parse(t, e.appendRequest(nil, o, s))
	var commit struct{ Reservation string }
	if err := json.Unmarshal(req.Body(), &commit); err != nil || commit.Reservation != string(o.reservation) {
		t.Errorf("commit body %s: %v", req.Body(), err)
	}
	o.next = kindFinish
	req = parse(t, e.appendRequest(nil, o, s))
	var finish struct {
		Reservation string
		Units       int64
	}
	if err := json.Unmarshal(req.Body(), &finish); err != nil || finish.Reservation != string(o.reservation) || finish.Units != 1201 {
		t.Errorf("finish body %s: %v", req.Body(), err)
	}
}

func TestEncodeAdmission(t *testing.T) {
	e, s := testEncoder(t, Options{
		Accounts:      []Account{{"my agent&1", "sk"}},
		PlatformToken: "pt",
		OrgID:         "org-1",
	})
	req := parse(t, e.appendRequest(nil, &op{next: kindAdmission}, s))
	if string(req.Header.Method()) != "GET" || string(req.URI().QueryArgs().Peek("agent_id")) != "my agent&1" ||
		string(req.Header.Peek("Authorization")) != "Bearer pt" || string(req.Header.Peek("Org-Id")) != "org-1" ||
		len(req.Body()) != 0 {
		t.Errorf("admission request:\n%s", req)
	}
	// An empty tenancy value is omitted, not sent empty (seed 000).
	if strings.Contains(req.String(), "Workspace-Id") {
		t.Errorf("empty Workspace-Id sent:\n%s", req)
	}
}

func TestEncodeUsageUniqueIDs(t *testing.T) {
	e, s := testEncoder(t, Options{
		Accounts:   []Account{{"a", "k"}, {"b", "k"}},
		UsageBatch: 4,
		UsageUnits: 7,
		RunID:      "run1",
	})
	seen := map[string]bool{}
	for range 3 {
		req := parse(t, e.appendRequest(nil, &op{next: kindUsage}, s))
		var body struct {
			Events []struct {
				ID         string `json:"id"`
				AgentID    string `json:"agent_id"`
				Units      int64  `json:"units"`
				OccurredAt string `json:"occurred_at"`
			} `json:"events"`
		}
		if err := json.Unmarshal(req.Body(), &body); err != nil {
			t.Fatalf("%v: %s", err, req.Body())
		}
		if len(body.Events) != 4 {
			t.Fatalf("%d events", len(body.Events))
		}
		for _, ev := range body.Events {
			if seen[ev.ID] || !strings.HasPrefix(ev.ID, "run1-3-") {
				t.Errorf("id %q repeated or malformed", ev.ID)
			}
			seen[ev.ID] = true
			if (ev.AgentID != "a" && ev.AgentID != "b") || ev.Units != 7 || ev.OccurredAt == "" {
				t.Errorf("event %+v", ev)
			}
		}
		// Without a platform token, usage goes out with the account key.
		if string(req.Header.Peek("Authorization")) != "Bearer k" {
			t.Errorf("usage auth %q", req.Header.Peek("Authorization"))
		}
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"b\s`, "\x00\x1f\n\t", "héllo 世界", "bad\xffutf8"} {
		got := appendJSONString(nil, []byte(s))
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Errorf("%q -> %s: %v", s, got, err)
			continue
		}
		want := strings.ToValidUTF8(s, "\uFFFD")
		if back != want {
			t.Errorf("%q -> %s -> %q", s, got, back)
		}
	}
}

func TestWithTTL(t *testing.T) {
	got := string(withTTL([]byte(`{"a":1} `), 30))
	if got != `{"a":1,"ttl_ms":30} ` {
		t.Errorf("got %s", got)
	}
}

func TestEncodeAllocatesNothing(t *testing.T) {
	e, s := testEncoder(t, Options{Accounts: []Account{{"a", "k"}}})
	o := &op{next: kindCommit, reservation: []byte("res"), quote: 1}
	buf := make([]byte, 0, 4096)
	s.body = make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		for _, k := range []kind{kindCheck, kindAdmit, kindCommit, kindFinish, kindAdmission} {
			o.next = k
			buf = e.appendRequest(buf[:0], o, s)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per batch of requests", allocs)
	}
}
