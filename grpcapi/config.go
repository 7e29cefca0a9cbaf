package grpcapi

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/h2"
	"github.com/tollgated/tollgated/httploop"
)

// The services' gRPC paths, in the order h2.Config.Methods lists them: a
// stream's method is its index here.
const (
	methodShouldRateLimit = iota
	methodCheck
	methodHealthCheck
	methodHealthWatch
	methodReflectionV1
	methodReflectionV1Alpha
	numMethods
)

// Methods are the paths served, by method index (h2.Config.Methods).
var Methods = []string{
	methodShouldRateLimit:   "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
	methodCheck:             "/envoy.service.auth.v3.Authorization/Check",
	methodHealthCheck:       "/grpc.health.v1.Health/Check",
	methodHealthWatch:       "/grpc.health.v1.Health/Watch",
	methodReflectionV1:      "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
	methodReflectionV1Alpha: "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
}

// gRPC status codes the services answer with.
const (
	codeOK                = 0
	codeCancelled         = 1
	codeInvalidArgument   = 3
	codeNotFound          = 5
	codePermissionDenied  = 7
	codeResourceExhausted = 8
	codeUnimplemented     = 12
	codeInternal          = 13
	codeUnavailable       = 14
	codeUnauthenticated   = 16
)

// Config is what every shard's Service shares.
type Config struct {
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
	// MaxHeld bounds the calls one shard holds at once: decisions waiting
	// for the disk or for funding, and descriptors waiting for their
	// account's key. A call beyond it is refused RESOURCE_EXHAUSTED at
	// once; it never queues.
	MaxHeld int
	// MaxHeaderBytes bounds an ext_authz check's request line and headers,
	// counted as an HTTP/1.1 head, as the shards bound a forward-auth
	// request's (--max-header-bytes): a larger one is denied 431
	// header-too-large on either path.
	MaxHeaderBytes int
	// AnswerTimeout is how long a held call may wait for its shard's
	// answer before it is answered as the loop answers a postponed
	// request it gives up on (504 answer-timeout): the loop's
	// DeferTimeout.
	AnswerTimeout int64
	// Stats, if set, receives the services' counters.
	Stats *Stats
}

// MaxHeld bounds Config.MaxHeld.
const MaxHeld = 1 << 16

// MaxMessageBytes bounds a request message: a CheckRequest carries a
// request's headers, at most a few kilobytes in any gateway's defaults.
const MaxMessageBytes = 64 << 10

// Validate reports the first setting the services cannot run with.
func (c *Config) Validate() error {
	switch {
	case c.Domain == "" || len(c.Domain) > 255 || !fitsHeader(c.Domain):
		return errors.New("grpc: the rate-limit domain must be 1 to 255 bytes without control bytes")
	case c.AccountEntry == "" || len(c.AccountEntry) > maxEntryKey || c.AccountEntry == entryMethod || c.AccountEntry == entryPath:
		return fmt.Errorf("grpc: the account's descriptor entry must be 1 to %d bytes, and not %q or %q", maxEntryKey, entryMethod, entryPath)
	case c.Ready == nil:
		return errors.New("grpc: readiness must be given")
	case c.MaxHeld < 1 || c.MaxHeaderBytes < 1:
		return errors.New("grpc: the held-call and header bounds must be positive")
	case c.MaxHeld > MaxHeld:
		// Every shard keeps a slot for each: the bound is memory.
		return fmt.Errorf("grpc: at most %d calls may be held per shard", MaxHeld)
	case c.AnswerTimeout <= 0:
		return errors.New("grpc: the answer timeout must be positive")
	}
	return nil
}

// Stats are the services' counters, for metrics; the daemon makes them
// once. Every field is updated by the shards' threads.
type Stats struct {
	// Held counts the calls held now, on every shard.
	Held atomic.Int64
	// Busy: refused because a shard held MaxHeld calls; NoAnswer:
	// answered 504 after AnswerTimeout (outcome unknown); Abandoned: held
	// calls whose client reset the stream or closed the connection first.
	Busy, NoAnswer, Abandoned atomic.Uint64
}

// Shared is what the shards' services share: the rules, the accounts'
// keys and their bindings, and the reflection service.
type Shared struct {
	cfg    Config
	rules  rateLimitRules
	keys   *accountKeys
	bearer bool // the key header is Authorization: keys travel as Bearer
	// keyHeader is the key header's name in canonical form.
	keyHeader []byte
	reflect   *reflector
	stats     *Stats
}

// NewShared makes what the shards' services share.
func NewShared(cfg Config) (*Shared, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	keys, err := newAccountKeys(cfg.Secret, cfg.Binder)
	if err != nil {
		return nil, err
	}
	r, err := newReflector()
	if err != nil {
		return nil, err
	}
	sh := &Shared{cfg: cfg, rules: rateLimitRules{domain: cfg.Domain, accountEntry: cfg.AccountEntry},
		keys: keys, bearer: isAuthorization(cfg.KeyHeader), keyHeader: fasthttp.AppendNormalizedHeaderKey(nil, cfg.KeyHeader),
		reflect: r, stats: cfg.Stats}
	if sh.stats == nil {
		sh.stats = new(Stats)
	}
	return sh, nil
}

func isAuthorization(name string) bool { return strings.EqualFold(name, "Authorization") }

// H2 is the HTTP/2 configuration the loops serve the services with.
func H2(maxStreams uint32, maxHeaderListBytes int) h2.Config {
	return h2.Config{Methods: Methods, MaxStreams: maxStreams, MaxMessageBytes: MaxMessageBytes,
		MaxHeaderListBytes: maxHeaderListBytes}
}

// Answerer is where a Service writes its answers: the loop its streams
// belong to (*httploop.Loop).
type Answerer interface {
	Answer(r httploop.StreamRef, msg []byte) bool
	Fail(r httploop.StreamRef, code uint32, msg string) bool
	Send(r httploop.StreamRef, msg []byte) bool
	Finish(r httploop.StreamRef, code uint32, msg string) bool
	StreamLive(r httploop.StreamRef) bool
}

// Decider serves a forward-auth request on the shard's thread, as a
// request read from a socket is served: it writes the answer into resp, or
// calls postpone and completes the answer later through the Service's
// Complete, under the ticket postpone returned.
type Decider func(req *fasthttp.Request, resp *fasthttp.Response, postpone func() uint64)
