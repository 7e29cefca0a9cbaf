package loadtest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// fakeServer imitates tollgated's data plane on 127.0.0.1 and counts what
// it answered, so tests can compare the generator's report with the truth.
type fakeServer struct {
	t    *testing.T
	addr string
	url  string
	srv  *fasthttp.Server
	done chan struct{}

	// statusFor picks the answer to the nth /v1/check (0-based): a status
	// and, for errors, the problem code ("" = no body).
	statusFor func(n int64) (int, string)
	// delayFor stalls the nth request of any kind before answering.
	delayFor func(n int64) time.Duration
	// keys, when set, are the only accepted bearer tokens.
	keys map[string]bool

	n      atomic.Int64 // requests of any kind
	checks atomic.Int64

	mu       sync.Mutex
	byStatus map[int]int64
	byCode   map[string]int64
	byPath   map[string]int64
	arrivals []time.Duration // since start, every request
	start    time.Time
	issued   map[string]bool
	commits  map[string]bool
	events   map[string]bool
	dupes    int
	badAuth  int
	protoErr []string
}

func newFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	f := &fakeServer{
		t:        t,
		done:     make(chan struct{}),
		byStatus: map[int]int64{},
		byCode:   map[string]int64{},
		byPath:   map[string]int64{},
		issued:   map[string]bool{},
		commits:  map[string]bool{},
		events:   map[string]bool{},
		start:    time.Now(),
	}
	return f
}

func (f *fakeServer) serve() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	f.url = "http://" + f.addr
	f.srv = &fasthttp.Server{Handler: f.handle, NoDefaultServerHeader: true}
	go f.srv.Serve(ln)
	f.t.Cleanup(func() {
		close(f.done)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		f.srv.ShutdownWithContext(ctx)
	})
}

func (f *fakeServer) problem(ctx *fasthttp.RequestCtx, status int, code string) {
	ctx.SetStatusCode(status)
	if code != "" {
		ctx.SetContentType("application/problem+json")
		fmt.Fprintf(ctx, `{"type":"about:blank","title":"x","status":%d,"code":%q,"retry":"never"}`, status, code)
	}
	f.byCode[code]++
}

func (f *fakeServer) handle(ctx *fasthttp.RequestCtx) {
	n := f.n.Add(1) - 1
	if f.delayFor != nil {
		if d := f.delayFor(n); d > 0 {
			select {
			case <-time.After(d):
			case <-f.done:
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	path := string(ctx.Path())
	f.byPath[path]++
	f.arrivals = append(f.arrivals, time.Since(f.start))
	defer func() { f.byStatus[ctx.Response.StatusCode()]++ }()

	auth := string(ctx.Request.Header.Peek("Authorization"))
	if f.keys != nil && path != "/v1/admission" && !f.keys[strings.TrimPrefix(auth, "Bearer ")] {
		f.badAuth++
		f.problem(ctx, 401, "unknown_credential")
		return
	}
	body := ctx.PostBody()
	switch path {
	case "/v1/check":
		c := f.checks.Add(1) - 1
		st, code := 200, ""
		if f.statusFor != nil {
			st, code = f.statusFor(c)
		}
		if st != 200 {
			f.problem(ctx, st, code)
			return
		}
		ctx.SetContentType("application/json")
		ctx.WriteString(`{"decision":"admit","request_id":"0123456789abcdef0123456789abcdef","units":1201,"policy_revision":"x"}`)
	case "/v1/admit":
		if n%5 == 0 {
			f.problem(ctx, 402, "balance_exhausted")
			return
		}
		res := "r-" + strconv.FormatInt(n, 10) + `-"q`
		f.issued[res] = true
		ctx.SetContentType("application/json")
		fmt.Fprintf(ctx, `{"reservation":%q,"quote":1201,"expires_at":"2030-01-01T00:00:00Z"}`, res)
	case "/v1/commit":
		v, err := fastjson.ParseBytes(body)
		res := ""
		if err == nil {
			res = string(v.GetStringBytes("reservation"))
		}
		if !f.issued[res] || f.commits[res] {
			f.protoErr = append(f.protoErr, "commit of "+res)
			f.problem(ctx, 409, "unknown_reservation")
			return
		}
		f.commits[res] = true
		ctx.SetContentType("application/json")
		ctx.WriteString(`{}`)
	case "/v1/finish":
		v, err := fastjson.ParseBytes(body)
		if err != nil || !f.commits[string(v.GetStringBytes("reservation"))] || v.GetInt64("units") != 1201 {
			f.protoErr = append(f.protoErr, "finish "+string(body))
			f.problem(ctx, 409, "not_committed")
			return
		}
		delete(f.commits, string(v.GetStringBytes("reservation")))
		ctx.SetContentType("application/json")
		ctx.WriteString(`{"billed":1201}`)
	case "/v1/admission":
		if len(ctx.QueryArgs().Peek("agent_id")) == 0 || auth != "Bearer ptok" ||
			string(ctx.Request.Header.Peek("Org-Id")) != "org-1" {
			f.protoErr = append(f.protoErr, "admission "+ctx.URI().String())
		}
		d := "admit"
		if n%2 == 1 {
			d = "deny"
		}
		ctx.SetContentType("application/json")
		fmt.Fprintf(ctx, `{"decision":%q,"reason":"x","scope":"agent","window":"daily","reset_at":null}`, d)
	case "/v1/usage":
		v, err := fastjson.ParseBytes(body)
		if err != nil {
			f.protoErr = append(f.protoErr, "usage body "+err.Error())
			f.problem(ctx, 400, "bad_body")
			return
		}
		acc, dup := 0, 0
		for _, e := range v.GetArray("events") {
			id := string(e.GetStringBytes("id"))
			if len(e.GetStringBytes("agent_id")) == 0 || len(e.GetStringBytes("occurred_at")) == 0 {
				f.protoErr = append(f.protoErr, "usage event "+e.String())
			}
			if f.events[id] {
				dup++
				f.dupes++
				continue
			}
			f.events[id] = true
			acc++
		}
		ctx.SetContentType("application/json")
		fmt.Fprintf(ctx, `{"accepted":%d,"duplicate":%d,"rejected":0}`, acc, dup)
	default:
		f.problem(ctx, 404, "not_found")
	}
}

func (f *fakeServer) snapshot() (byStatus map[int]int64, byCode map[string]int64, byPath map[string]int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	byStatus = map[int]int64{}
	for k, v := range f.byStatus {
		byStatus[k] = v
	}
	byCode = map[string]int64{}
	for k, v := range f.byCode {
		if k != "" {
			byCode[k] = v
		}
	}
	byPath = map[string]int64{}
	for k, v := range f.byPath {
		byPath[k] = v
	}
	return
}
