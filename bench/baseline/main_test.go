package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestDefaultBodyIsAdmitAnswer(t *testing.T) {
	if defaultBodySize != 166 {
		t.Errorf("default body is %d bytes, want 166", defaultBodySize)
	}
	var v struct {
		Decision       string `json:"decision"`
		RequestID      string `json:"request_id"`
		Units          int    `json:"units"`
		PolicyRevision string `json:"policy_revision"`
	}
	if err := json.Unmarshal([]byte(admitBody(policyRevision)), &v); err != nil {
		t.Fatal(err)
	}
	if v.Decision != "admit" || len(v.RequestID) != 32 || v.Units != 1201 || len(v.PolicyRevision) != 64 {
		t.Errorf("body %+v", v)
	}
}

func TestBodyOfSize(t *testing.T) {
	for _, n := range []int{102, 166, 200, 1000} {
		b, err := bodyOfSize(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != n || !json.Valid([]byte(b)) {
			t.Errorf("size %d: got %d bytes, valid %v", n, len(b), json.Valid([]byte(b)))
		}
	}
	if _, err := bodyOfSize(50); err == nil {
		t.Error("impossible size accepted")
	}
}

func TestServes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, []string{"--listen", "127.0.0.1:0"}, io.Discard, ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(5 * time.Second):
		t.Fatal("not listening")
	}
	for _, path := range []string{"/v1/check", "/anything"} {
		req := fasthttp.AcquireRequest()
		resp := fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + addr + path)
		req.Header.SetMethod("POST")
		req.SetBodyString(`{"x":1}`)
		if err := fasthttp.DoTimeout(req, resp, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode() != 200 || string(resp.Header.ContentType()) != "application/json" ||
			len(resp.Body()) != 166 || !strings.Contains(string(resp.Body()), `"decision":"admit"`) {
			t.Errorf("%s: %d %q %q", path, resp.StatusCode(), resp.Header.ContentType(), resp.Body())
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

func TestRefusesNonLoopback(t *testing.T) {
	err := run(context.Background(), []string{"--listen", "0.0.0.0:0"}, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("got %v", err)
	}
}
