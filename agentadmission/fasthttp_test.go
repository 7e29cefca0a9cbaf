package agentadmission

import (
	"net"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// fastServer runs the fasthttp middleware over an in-memory listener and
// returns a client for it and a count of wrapped-handler runs.
func fastServer(t *testing.T, c *Checker) (*fasthttp.Client, *atomic.Int64) {
	t.Helper()
	var ran atomic.Int64
	ln := fasthttputil.NewInmemoryListener()
	s := &fasthttp.Server{Handler: c.FastMiddleware(func(ctx *fasthttp.RequestCtx) {
		ran.Add(1)
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.SetBodyString("done")
	})}
	go s.Serve(ln)
	t.Cleanup(func() { s.Shutdown() })
	client := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	return client, &ran
}

// fastGet sends a GET for path, optionally naming the agent in a header.
func fastGet(t *testing.T, client *fasthttp.Client, path, agent string) *fasthttp.Response {
	t.Helper()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI("http://agent" + path)
	if agent != "" {
		req.Header.Set("X-Agent", agent)
	}
	resp := &fasthttp.Response{}
	if err := client.Do(req, resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestFastHTTPDeny(t *testing.T) {
	r := newRig(t, platform(t, answer(200, denyJSON)).URL)
	client, ran := fastServer(t, r.c)

	resp := fastGet(t, client, "/a2a", "")
	if resp.StatusCode() != fasthttp.StatusPaymentRequired {
		t.Fatalf("status %d", resp.StatusCode())
	}
	if ct := string(resp.Header.ContentType()); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	if ra := string(resp.Header.Peek("Retry-After")); ra != "107078" {
		t.Fatalf("Retry-After %q", ra)
	}
	const want = `{"error":"admission_denied","reason":"cost_limit_exceeded","scope":"workspace","window":"daily","reset_at":"2026-06-28T14:00:00Z"}`
	if got := string(resp.Body()); got != want {
		t.Fatalf("body\n got %s\nwant %s", got, want)
	}
	if ran.Load() != 0 {
		t.Fatal("handler ran on deny")
	}

	// Cached deny: same answer, no call, audited as cached.
	if resp := fastGet(t, client, "/a2a", ""); resp.StatusCode() != fasthttp.StatusPaymentRequired {
		t.Fatalf("cached deny status %d", resp.StatusCode())
	}
	if n := r.calls.n.Load(); n != 1 {
		t.Fatalf("%d calls", n)
	}
	evs := r.events.list()
	if len(evs) != 2 || evs[0].Fields.Cached || !evs[1].Fields.Cached {
		t.Fatalf("events %+v", evs)
	}
}

func TestFastHTTPNullResetOmitsRetryAfter(t *testing.T) {
	r := newRig(t, platform(t, answer(200, `{"decision":"deny","reason":"r","scope":"org","window":"w","reset_at":null}`)).URL)
	client, _ := fastServer(t, r.c)
	resp := fastGet(t, client, "/a2a", "")
	if resp.Header.Peek("Retry-After") != nil {
		t.Fatalf("Retry-After %q without a reset", resp.Header.Peek("Retry-After"))
	}
	if got := string(resp.Body()); got != `{"error":"admission_denied","reason":"r","scope":"org","window":"w","reset_at":null}` {
		t.Fatalf("body %s", got)
	}
}

func TestFastHTTPAdmitExemptAndSubject(t *testing.T) {
	r := newRig(t, platform(t, denyOnly("spender")).URL,
		WithExemptPaths("/healthz"),
		WithFastHTTPSubject(func(ctx *fasthttp.RequestCtx) Subject {
			return Subject{AgentID: string(ctx.Request.Header.Peek("X-Agent"))}
		}))
	client, ran := fastServer(t, r.c)

	if resp := fastGet(t, client, "/healthz", "spender"); resp.StatusCode() != fasthttp.StatusOK {
		t.Fatalf("exempt path: %d", resp.StatusCode())
	}
	if n := r.calls.n.Load(); n != 0 {
		t.Fatalf("%d calls for an exempt path", n)
	}
	if resp := fastGet(t, client, "/a2a", "spender"); resp.StatusCode() != fasthttp.StatusPaymentRequired {
		t.Fatalf("spender: %d", resp.StatusCode())
	}
	if resp := fastGet(t, client, "/a2a", "saver"); resp.StatusCode() != fasthttp.StatusOK || string(resp.Body()) != "done" {
		t.Fatalf("saver: %d %s", resp.StatusCode(), resp.Body())
	}
	// No agent in the request: the configured one, which is admitted.
	if resp := fastGet(t, client, "/a2a", ""); resp.StatusCode() != fasthttp.StatusOK {
		t.Fatalf("default agent: %d", resp.StatusCode())
	}
	if ran.Load() != 3 {
		t.Fatalf("handler ran %d times, want 3", ran.Load())
	}
	if n := r.calls.n.Load(); n != 3 {
		t.Fatalf("%d calls, want one per agent", n)
	}
}

func TestFastHTTPPassThroughWhenOff(t *testing.T) {
	c := New(Config{AgentID: "a"})
	client, ran := fastServer(t, c)
	if resp := fastGet(t, client, "/a2a", ""); resp.StatusCode() != fasthttp.StatusOK || ran.Load() != 1 {
		t.Fatalf("status %d, ran %d", resp.StatusCode(), ran.Load())
	}
}
