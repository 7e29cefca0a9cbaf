package loadtest

// Provisioning through tollgated's admin API.
//
// DEPENDS ON THE ADMIN API, which is specified only as a sketch in
// ARCHITECTURE §6 while this is written. The shapes assumed here:
//
//	POST /v1/accounts                {"id":"<id>","parent":null}   2xx, or 409 if it exists
//	PUT  /v1/accounts/{id}/policy    <the --admin-policy file, verbatim>   (only if given)
//	PUT  /v1/accounts/{id}/budget    {"allowance":N,"period":"day|week|month"}, or
//	POST /v1/accounts/{id}/deposits  {"units":N,...} when the period is "none"
//	POST /v1/accounts/{id}/keys      {}  ->  {"key":"<secret>", ...}
//	POST /v1/platform-tokens         {}  ->  {"token":"<secret>", ...}
//
// all with "Authorization: Bearer <admin token>". The secret is taken from
// the first of "key", "secret", "api_key", "token" that is a string, so a
// renamed field is a one-line change here. Align with docs/API.md once it
// exists.

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// AdminOptions configure provisioning.
type AdminOptions struct {
	URL         string // admin listener, e.g. http://127.0.0.1:9091
	Token       string
	AllowRemote bool

	Count  int    // accounts to create
	Prefix string // account ids are Prefix0 … Prefix(Count-1); default "lt-"
	Budget int64  // allowance per account; default 1e12
	Period string // budget period; default "none"
	Policy []byte // optional policy document PUT to every account

	Concurrency int           // requests in parallel; default 8
	Timeout     time.Duration // per request; default 5s
}

func (o *AdminOptions) setDefaults() {
	if o.Prefix == "" {
		o.Prefix = "lt-"
	}
	if o.Budget == 0 {
		o.Budget = 1_000_000_000_000
	}
	if o.Period == "" {
		o.Period = "none"
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
}

type adminClient struct {
	hc     *fasthttp.HostClient
	target *Target
	auth   string
	to     time.Duration
}

func newAdminClient(o *AdminOptions) (*adminClient, error) {
	t, err := CheckTarget(o.URL, o.AllowRemote)
	if err != nil {
		return nil, fmt.Errorf("admin %w", err)
	}
	if o.Token == "" {
		return nil, fmt.Errorf("admin token is required")
	}
	return &adminClient{
		hc:     &fasthttp.HostClient{Addr: t.Addr, MaxConns: o.Concurrency},
		target: t,
		auth:   "Bearer " + o.Token,
		to:     o.Timeout,
	}, nil
}

// do sends one admin request and returns the status and a copy of the body.
func (a *adminClient) do(method, path string, body []byte) (int, []byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI(a.target.Base + path)
	req.Header.SetHost(a.target.Host)
	req.Header.Set("Authorization", a.auth)
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBody(body)
	}
	if err := a.hc.DoTimeout(req, resp, a.to); err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...), nil
}

// expect2xx turns a non-2xx answer into an error carrying its problem code.
func expect2xx(method, path string, status int, body []byte) error {
	if status >= 200 && status <= 299 {
		return nil
	}
	code := ""
	if v, err := fastjson.ParseBytes(body); err == nil {
		code = string(v.GetStringBytes("code"))
	}
	if len(body) > 200 {
		body = body[:200]
	}
	return fmt.Errorf("%s %s: HTTP %d %s: %s", method, path, status, code, body)
}

// secretFrom extracts the secret of a key or token answer.
func secretFrom(body []byte) (string, error) {
	v, err := fastjson.ParseBytes(body)
	if err != nil {
		return "", fmt.Errorf("answer is not JSON: %w", err)
	}
	for _, f := range []string{"key", "secret", "api_key", "token"} {
		if s := v.GetStringBytes(f); len(s) > 0 {
			return string(s), nil
		}
	}
	return "", fmt.Errorf("answer has no key/secret/api_key/token string: %.200s", body)
}

func (a *adminClient) provisionOne(o *AdminOptions, id string) (Account, error) {
	base := "/v1/accounts/" + url.PathEscape(id)
	body := append(append([]byte(`{"id":`), appendJSONString(nil, []byte(id))...), `,"parent":null}`...)
	st, b, err := a.do("POST", "/v1/accounts", body)
	if err != nil {
		return Account{}, err
	}
	if st != 409 { // already exists: reuse it, a rerun is not an error
		if err := expect2xx("POST", "/v1/accounts", st, b); err != nil {
			return Account{}, err
		}
	}
	if len(o.Policy) > 0 {
		st, b, err := a.do("PUT", base+"/policy", o.Policy)
		if err != nil {
			return Account{}, err
		}
		if err := expect2xx("PUT", base+"/policy", st, b); err != nil {
			return Account{}, err
		}
	}
	// An allowance renews each period; without one the funds are a
	// deposit (the admin API refuses an allowance with period "none").
	method, path, body := "PUT", base+"/budget", []byte(`{"allowance":`+strconv.FormatInt(o.Budget, 10)+`,"period":`+
		string(appendJSONString(nil, []byte(o.Period)))+`}`)
	if o.Period == "" || o.Period == "none" {
		method, path = "POST", base+"/deposits"
		body = []byte(`{"units":` + strconv.FormatInt(o.Budget, 10) + `,"idempotency_key":"loadtest"}`)
	}
	st, b, err = a.do(method, path, body)
	if err != nil {
		return Account{}, err
	}
	if err := expect2xx(method, path, st, b); err != nil {
		return Account{}, err
	}
	st, b, err = a.do("POST", base+"/keys", []byte("{}"))
	if err != nil {
		return Account{}, err
	}
	if err := expect2xx("POST", base+"/keys", st, b); err != nil {
		return Account{}, err
	}
	key, err := secretFrom(b)
	if err != nil {
		return Account{}, fmt.Errorf("POST %s/keys: %w", base, err)
	}
	return Account{ID: id, Key: key}, nil
}

// Provision creates o.Count accounts with a budget and one key each, and
// returns them in id order. It stops at the first failure.
func Provision(ctx context.Context, o AdminOptions) ([]Account, error) {
	o.setDefaults()
	if o.Count <= 0 {
		return nil, fmt.Errorf("need at least one account to provision")
	}
	a, err := newAdminClient(&o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make([]Account, o.Count)
	next := make(chan int)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				acct, err := a.provisionOne(&o, o.Prefix+strconv.Itoa(i))
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
				out[i] = acct
			}
		}()
	}
feed:
	for i := 0; i < o.Count; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, fmt.Errorf("provisioning: %w", firstErr)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("provisioning: %w", err)
	}
	return out, nil
}

// IssuePlatformToken asks the admin API for a seed-000 platform token.
func IssuePlatformToken(ctx context.Context, o AdminOptions) (string, error) {
	o.setDefaults()
	a, err := newAdminClient(&o)
	if err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	st, b, err := a.do("POST", "/v1/platform-tokens", []byte("{}"))
	if err != nil {
		return "", err
	}
	if err := expect2xx("POST", "/v1/platform-tokens", st, b); err != nil {
		return "", err
	}
	return secretFrom(b)
}
