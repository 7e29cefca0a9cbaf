package grpcapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/valyala/fasthttp"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/handover"
)

// Config is what a Server is made with.
type Config struct {
	Listen string // the gRPC address
	// Ports are the shards' hand-over ports (node.HandOverPorts), each
	// sized for MaxHandOver calls: decisions are made there.
	Ports []*handover.Port
	// Domain is the rate-limit domain served; AccountEntry the descriptor
	// entry naming the account.
	Domain, AccountEntry string
	// KeyHeader is the header the shards' /v1/authz reads the key from
	// (shard.Config.AuthzKeyHeader): Authorization carries a Bearer key.
	KeyHeader string
	Secret    []byte // the server secret: accounts' own keys derive from it
	Binder    Binder
	// Ready says whether the node serves as /readyz does: the data plane
	// is open, not draining, and its usage spool takes records.
	Ready func() bool
	// MaxHandOver bounds the decisions in flight at once (the ports'
	// size); MaxConns the gRPC connections; MaxStreams the concurrent
	// calls per connection.
	MaxHandOver, MaxConns int
	MaxStreams            uint32
	// Stats, if set, receives the hand-over's counters (else they are
	// kept privately).
	Stats *Stats
	// MaxHeaderBytes bounds an ext_authz check's request line and headers,
	// counted as an HTTP/1.1 head, as the shards bound a forward-auth
	// request's (--max-header-bytes): a larger one is denied 431
	// header-too-large on either path. The daemon passes the data plane's
	// own setting, so the two paths cannot disagree.
	MaxHeaderBytes int
}

// MaxHandOver bounds Config.MaxHandOver.
const MaxHandOver = 1 << 16

// MaxMessageBytes bounds a request message: a CheckRequest carries a
// request's headers, at most a few kilobytes in any gateway's defaults.
const MaxMessageBytes = 64 << 10

// Server is the gRPC listener and its services.
type Server struct {
	cfg    Config
	rules  rateLimitRules
	keys   *accountKeys
	shards *shards
	grpc   *grpc.Server
	ln     net.Listener
	// draining closes when Stop begins: health Watch streams end.
	draining chan struct{}
}

// Validate reports the first setting Listen cannot run with.
func (c *Config) Validate() error {
	switch {
	case c.Domain == "" || len(c.Domain) > 255 || !fitsHeader(c.Domain):
		return errors.New("grpc: the rate-limit domain must be 1 to 255 bytes without control bytes")
	case c.AccountEntry == "" || len(c.AccountEntry) > maxEntryKey || c.AccountEntry == entryMethod || c.AccountEntry == entryPath:
		return fmt.Errorf("grpc: the account's descriptor entry must be 1 to %d bytes, and not %q or %q", maxEntryKey, entryMethod, entryPath)
	case c.Ready == nil:
		return errors.New("grpc: readiness must be given")
	case c.MaxHandOver < 1 || c.MaxConns < 1 || c.MaxStreams < 1 || c.MaxHeaderBytes < 1:
		return errors.New("grpc: the hand-over, connection, stream and header bounds must be positive")
	case c.MaxHandOver > MaxHandOver:
		// Every shard keeps a slot for each: the bound is memory.
		return fmt.Errorf("grpc: at most %d decisions may be handed over at once", MaxHandOver)
	}
	return nil
}

// Listen binds cfg.Listen (loopback when no host is given) and makes the
// server; nothing is answered until Serve.
func Listen(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.Ports) == 0 {
		return nil, errors.New("grpc: the shards' hand-over ports must be given")
	}
	keys, err := newAccountKeys(cfg.Secret, cfg.Binder)
	if err != nil {
		return nil, err
	}
	addr, err := defaultLoopback(cfg.Listen)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, rules: rateLimitRules{domain: cfg.Domain, accountEntry: cfg.AccountEntry},
		keys: keys, shards: &shards{ports: cfg.Ports, max: int64(cfg.MaxHandOver), stats: cmp.Or(cfg.Stats, new(Stats))}, ln: netutil.LimitListener(ln, cfg.MaxConns),
		draining: make(chan struct{})}
	s.grpc = grpc.NewServer(grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.MaxConcurrentStreams(cfg.MaxStreams),
		grpc.MaxHeaderListSize(16<<10), grpc.ConnectionTimeout(5*time.Second),
		// A call waits on its hand-over, so at most MaxHandOver are
		// being decided at once: as many workers serve them, and keep
		// the stacks a call grows (a goroutine per call grew a new one
		// each time: 9% of the listener's CPU).
		grpc.NumStreamWorkers(uint32(cfg.MaxHandOver)))
	rlsv3.RegisterRateLimitServiceServer(s.grpc, rateLimitService{s: s})
	authv3.RegisterAuthorizationServer(s.grpc, authorizationService{s: s})
	healthpb.RegisterHealthServer(s.grpc, healthService{ready: cfg.Ready, draining: s.draining})
	reflection.Register(s.grpc)
	return s, nil
}

// defaultLoopback gives an address without a host the loopback host.
func defaultLoopback(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("grpc: listen address %q: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve answers calls until Stop; run it on its own goroutine.
func (s *Server) Serve() error { return s.grpc.Serve(s.ln) }

// Stop stops accepting, lets calls in flight end until deadline (their
// answers wait for the data plane, which still serves), then ends the rest.
func (s *Server) Stop(deadline time.Time) {
	close(s.draining)
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		s.grpc.Stop()
		<-done
	}
}

// decide hands call to a shard and returns the hand-over with the shard's
// answer in its Resp; the caller releases it (handover.Release).
func (s *Server) decide(ctx context.Context, call *forwardCall) (*handover.Call, error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	c := handover.Acquire()
	call.request(&c.Req)
	if err := s.shards.exchange(c, call.hint); err != nil {
		return nil, err
	}
	return c, nil
}

// boundWait is how long a call for an account whose key was bound by that
// very call waits for every shard to apply the binding: the plane has put
// it in every shard's ring, and a shard applies its ring between requests.
const (
	boundTries = 20
	boundWait  = time.Millisecond
)

// decideForAccount decides a rate-limit descriptor with its account's own
// key.
func (s *Server) decideForAccount(ctx context.Context, call *forwardCall) (*rlsv3.RateLimitResponse_DescriptorStatus, []*corev3.HeaderValue, error) {
	key, fresh, err := s.keys.keyFor(call.account)
	switch {
	case errors.Is(err, plane.ErrUnknownAccount):
		return unknownAccount()
	case err != nil:
		return nil, nil, status.Errorf(codes.Unavailable, "tollgated: the account's key could not be published to the shards: %v", err)
	}
	keyValue := key
	if isAuthorization(s.cfg.KeyHeader) {
		keyValue = "Bearer " + key
	}
	call.headers = append(call.headers, header{s.cfg.KeyHeader, keyValue})
	for try := 0; ; try++ {
		c, err := s.decide(ctx, call)
		if err != nil {
			return nil, nil, err
		}
		if c.Resp.StatusCode() != fasthttp.StatusUnauthorized {
			defer handover.Release(c)
			return rateStatus(&c.Resp)
		}
		handover.Release(c)
		if !fresh || try == boundTries {
			// The shards do not know the key any more (the account
			// is gone): forget it, so the next call asks the plane.
			s.keys.forget(call.account)
			return unknownAccount()
		}
		time.Sleep(boundWait)
	}
}

func isAuthorization(name string) bool { return strings.EqualFold(name, hdrAuthorization) }

// unknownAccount is the status of a descriptor naming an account no shard
// knows: over the limit, so a gateway that fails open on errors still
// refuses work nobody can be billed for.
func unknownAccount() (*rlsv3.RateLimitResponse_DescriptorStatus, []*corev3.HeaderValue, error) {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT},
		[]*corev3.HeaderValue{{Key: hdrReason, Value: "unknown-account"}}, nil
}
