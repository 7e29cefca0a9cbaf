package loadtest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// fakeAdmin implements the admin API shapes admin.go assumes.
type fakeAdmin struct {
	mu       sync.Mutex
	accounts map[string]bool
	budgets  map[string]string
	policies map[string]string
	keys     map[string]string // key -> account
	calls    []string
	failKeys bool
}

func startFakeAdmin(t *testing.T, token string) (*fakeAdmin, string) {
	t.Helper()
	a := &fakeAdmin{
		accounts: map[string]bool{},
		budgets:  map[string]string{},
		policies: map[string]string{},
		keys:     map[string]string{},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		a.mu.Lock()
		defer a.mu.Unlock()
		method, path := string(ctx.Method()), string(ctx.Path())
		a.calls = append(a.calls, method+" "+path)
		if string(ctx.Request.Header.Peek("Authorization")) != "Bearer "+token {
			ctx.SetStatusCode(401)
			ctx.SetBodyString(`{"code":"unknown_credential"}`)
			return
		}
		parts := strings.Split(strings.TrimPrefix(path, "/v1/"), "/")
		switch {
		case method == "POST" && path == "/v1/accounts":
			v, err := fastjson.ParseBytes(ctx.PostBody())
			if err != nil || v.Get("parent").Type() != fastjson.TypeNull {
				ctx.SetStatusCode(400)
				return
			}
			id := string(v.GetStringBytes("id"))
			if a.accounts[id] {
				ctx.SetStatusCode(409)
				return
			}
			a.accounts[id] = true
			ctx.SetStatusCode(201)
		case method == "PUT" && len(parts) == 3 && parts[2] == "budget" && a.accounts[parts[1]]:
			a.budgets[parts[1]] = string(ctx.PostBody())
		case method == "POST" && len(parts) == 3 && parts[2] == "deposits" && a.accounts[parts[1]]:
			a.budgets[parts[1]] = "deposit " + string(ctx.PostBody())
			ctx.SetStatusCode(201)
		case method == "PUT" && len(parts) == 3 && parts[2] == "policy" && a.accounts[parts[1]]:
			a.policies[parts[1]] = string(ctx.PostBody())
		case method == "POST" && len(parts) == 3 && parts[2] == "keys" && a.accounts[parts[1]]:
			if a.failKeys {
				ctx.SetStatusCode(500)
				ctx.SetBodyString(`{"code":"internal"}`)
				return
			}
			k := fmt.Sprintf("key-%s-%d", parts[1], len(a.keys))
			a.keys[k] = parts[1]
			ctx.SetStatusCode(201)
			fmt.Fprintf(ctx, `{"key_id":"kid","key":%q}`, k)
		case method == "POST" && path == "/v1/platform-tokens":
			ctx.SetBodyString(`{"token":"ptok"}`)
		default:
			ctx.SetStatusCode(404)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return a, "http://" + ln.Addr().String()
}

func TestProvision(t *testing.T) {
	a, url := startFakeAdmin(t, "adm")
	a.accounts["lt-1"] = true // exists already: a rerun must not fail
	accts, err := Provision(context.Background(), AdminOptions{
		URL: url, Token: "adm", Count: 5, Budget: 500, Period: "day",
		Policy: []byte(`{"permissions":{"chat":1}}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(accts) != 5 {
		t.Fatalf("%d accounts", len(accts))
	}
	for i, acct := range accts {
		if acct.ID != fmt.Sprintf("lt-%d", i) || a.keys[acct.Key] != acct.ID {
			t.Errorf("account %d = %+v; key belongs to %q", i, acct, a.keys[acct.Key])
		}
		if got := a.budgets[acct.ID]; got != `{"allowance":500,"period":"day"}` {
			t.Errorf("%s budget %s", acct.ID, got)
		}
		if got := a.policies[acct.ID]; got != `{"permissions":{"chat":1}}` {
			t.Errorf("%s policy %s", acct.ID, got)
		}
	}
	tok, err := IssuePlatformToken(context.Background(), AdminOptions{URL: url, Token: "adm"})
	if err != nil || tok != "ptok" {
		t.Errorf("platform token %q, %v", tok, err)
	}
}

func TestProvisionedKeysAreUsed(t *testing.T) {
	a, url := startFakeAdmin(t, "adm")
	accts, err := Provision(context.Background(), AdminOptions{URL: url, Token: "adm", Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeServer(t)
	f.keys = map[string]bool{}
	for k := range a.keys {
		f.keys[k] = true
	}
	f.serve()
	res := mustRun(t, context.Background(), Options{
		URL: f.url, Accounts: accts, Connections: 2, Duration: 200 * time.Millisecond,
	})
	if f.badAuth != 0 || res.ByStatus[401] != 0 || res.ByStatus[200] != res.Requests || res.Requests == 0 {
		t.Errorf("bad auth %d, statuses %v", f.badAuth, res.ByStatus)
	}
}

func TestProvisionErrors(t *testing.T) {
	a, url := startFakeAdmin(t, "adm")
	if _, err := Provision(context.Background(), AdminOptions{URL: url, Token: "wrong", Count: 2}); err == nil ||
		!strings.Contains(err.Error(), "401") {
		t.Errorf("wrong token: %v", err)
	}
	a.failKeys = true
	if _, err := Provision(context.Background(), AdminOptions{URL: url, Token: "adm", Count: 20}); err == nil ||
		!strings.Contains(err.Error(), "internal") {
		t.Errorf("failing keys: %v", err)
	}
	if _, err := Provision(context.Background(), AdminOptions{URL: "http://10.0.0.1:9091", Token: "adm", Count: 1}); err == nil {
		t.Error("remote admin accepted")
	}
}

func TestSecretFrom(t *testing.T) {
	for body, want := range map[string]string{
		`{"key":"a"}`:               "a",
		`{"id":"x","secret":"b"}`:   "b",
		`{"api_key":"c"}`:           "c",
		`{"token":"d","key":5}`:     "d",
		`{"key":"","secret":"e"}`:   "e",
		`{"key_id":"x","key":"ff"}`: "ff",
	} {
		got, err := secretFrom([]byte(body))
		if err != nil || got != want {
			t.Errorf("%s: %q, %v", body, got, err)
		}
	}
	for _, body := range []string{`nope`, `{"id":"x"}`} {
		if _, err := secretFrom([]byte(body)); err == nil {
			t.Errorf("%s accepted", body)
		}
	}
}
