// Command baseline is the reference for tollgated's HTTP performance: a
// bare fasthttp.Server that answers every request, whatever its method,
// path or body, with 200 and a fixed JSON body the size of tollgated's
// /v1/check admit answer. It does no work per request beyond what fasthttp
// itself does, so its throughput on this machine is the ceiling tollgated's
// data plane is measured against (ARCHITECTURE §9: >= 85% of it).
//
// Usage:
//
//	baseline [--listen 127.0.0.1:8081] [--body-size N]
//
// It listens on loopback only.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// The admit answer of POST /v1/check (ARCHITECTURE §6) with a 32-hex
// request id, a four-digit unit count and a 64-hex policy revision. The
// hex strings are fixed: the baseline must not spend time generating them,
// and their content does not change the cost of writing them.
const (
	requestID      = "0123456789abcdef0123456789abcdef"
	policyRevision = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// defaultBodySize is the length of the admit answer above, 166 bytes.
var defaultBodySize = len(admitBody(policyRevision))

func admitBody(revision string) string {
	return `{"decision":"admit","request_id":"` + requestID + `","units":1201,"policy_revision":"` + revision + `"}`
}

// bodyOfSize returns an admit-shaped body of exactly n bytes by changing the
// length of the policy revision, so a different tollgated answer size can
// be matched without changing the shape.
func bodyOfSize(n int) (string, error) {
	fixed := len(admitBody(""))
	if n < fixed {
		return "", fmt.Errorf("body size %d is below the %d bytes of the answer's fixed part", n, fixed)
	}
	rev := strings.Repeat(policyRevision, (n-fixed)/len(policyRevision)+1)[:n-fixed]
	return admitBody(rev), nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintf(os.Stderr, "baseline: %v\n", err)
		os.Exit(1)
	}
}

func newServer(body []byte) *fasthttp.Server {
	return &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("application/json")
			ctx.SetBody(body)
		},
		Name:                  "baseline",
		NoDefaultServerHeader: true,
	}
}

// run serves until ctx is done. ready, when set, receives the bound address.
func run(ctx context.Context, args []string, stderr io.Writer, ready chan<- string) error {
	fs := flag.NewFlagSet("baseline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8081", "loopback address to listen on")
	size := fs.Int("body-size", defaultBodySize, "response body size in bytes (admit-shaped JSON)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	body, err := bodyOfSize(*size)
	if err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("listen address %q is not loopback", *listen)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := newServer([]byte(body))
	fmt.Fprintf(stderr, "baseline: listening on %s, %d-byte body\n", ln.Addr(), len(body))
	if ready != nil {
		ready <- ln.Addr().String()
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return srv.ShutdownWithContext(sctx)
}
