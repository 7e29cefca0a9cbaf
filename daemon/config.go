package daemon

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tollgated/tollgated/admin"
	"github.com/tollgated/tollgated/clock"
	"github.com/tollgated/tollgated/grpcapi"
	"github.com/tollgated/tollgated/route"
)

// Config is everything a daemon is opened with. The command line builds it
// (cmd/tollgated); Open checks it with Validate before it touches anything.
type Config struct {
	Listen      string       // data-plane address every shard binds
	Admin       string       // admin API address
	AdminLimits admin.Limits // the admin listener's bounds
	// CPUs lists one CPU per shard; a shard is pinned to its CPU.
	CPUs    []int
	DataDir string // the ledger (unless LedgerURL), the spool, the secret, the node id
	// LedgerURL is the PostgreSQL ledger a fleet shares; "" keeps the
	// ledger in DataDir.
	LedgerURL    string
	UsageHistory int // usage events kept per account in the ledger
	// Secret is the server secret for key digests; nil uses the one kept
	// in DataDir, made on first start. SecretSource says where a given
	// one came from, for the error that refuses it.
	Secret       []byte
	SecretSource string
	AdminToken   string // "" keeps the ledger's, or makes one on first start
	NodeID       string // "" keeps DataDir's, or makes one on first start
	// DemoKey, if set, provisions account "demo" with this API key, funded
	// once with DemoUnits.
	DemoKey   string
	DemoUnits uint64
	// Durable holds answers that bill until their usage is on disk;
	// without it they go at once and a crash can lose the last few
	// milliseconds of billed usage.
	Durable       bool
	ShutdownGrace time.Duration // how long Close waits for requests in flight
	MaxInFlight   int           // reservations in flight per shard
	LeaseTTL      time.Duration
	LeaseGrace    time.Duration
	// FundingWait bounds a request's wait for its shard's next lease
	// slice; 0 answers at once.
	FundingWait time.Duration
	// EventRetention is how long the ledger remembers a post-paid event's
	// id (a retry within it is a duplicate).
	EventRetention time.Duration
	// GroupCommit is how long the spool may wait to gather records into
	// one fsync; 0 starts the next as soon as the last ends.
	GroupCommit time.Duration
	Events      EventArchive
	// AuthzKeyHeader is the header /v1/authz reads the customer's key
	// from (shard.Config.AuthzKeyHeader).
	AuthzKeyHeader string
	// GRPC is the Envoy-facing gRPC listener (rate-limit service and
	// ext_authz); off while its Listen is "".
	GRPC      GRPC
	Transport Transport
	Build     Build // reported as tollgated_build_info
	// Clock dates everything that is money (leases, idleness, settlement,
	// forfeits); nil is the wall clock. Only tests set one, to advance it.
	Clock *clock.Clock
}

// EventArchive sizes the billed-event stream (GET /v1/events): released
// spool segments are kept in DataDir/events until the archive holds
// MaxBytes or its oldest segment's last event is MaxAge old. A segment
// (SegmentBytes) is the unit the spool releases and the archive drops.
type EventArchive struct {
	MaxBytes     int64
	MaxAge       time.Duration
	SegmentBytes int64
}

// GRPC configures the gRPC services (grpcapi), served by the shards' loops:
// their address (loopback when no host is given), the rate-limit domain and
// the descriptor entry naming the account, and their bounds: calls each
// shard may hold at once (waiting for the disk, funding or an account's
// key), gRPC connections, and calls per connection.
type GRPC struct {
	Listen, Domain, AccountEntry string
	MaxHeld, MaxConns            int
	MaxStreams                   uint32
}

// Enabled reports whether the gRPC listener runs.
func (g GRPC) Enabled() bool { return g.Listen != "" }

// validate checks g as the listener would be given it, with the data
// plane's header bound (the transport is validated first).
func (g GRPC) validate(maxHeaderBytes int) error {
	if !g.Enabled() {
		return nil
	}
	if _, err := g.grpcListen(); err != nil {
		return err
	}
	if g.MaxConns < 1 {
		return errors.New("grpc: the connection bound must be positive")
	}
	h := grpcapi.H2(g.MaxStreams, maxGRPCHeaderList)
	if err := h.Validate(); err != nil {
		return fmt.Errorf("grpc: %w", err)
	}
	c := g.services("Authorization", maxHeaderBytes, nil, nil, func() bool { return false }, nil)
	return c.Validate()
}

// Transport is each shard's bounds on its clients (httploop.Config).
type Transport struct {
	MaxHeaderBytes, MaxBodyBytes, MaxConns, MaxOutput int
	IdleTimeout, HeaderTimeout, BodyTimeout           time.Duration
}

// Build names the binary: its version, VCS revision and Go version.
type Build struct {
	Version, Revision, GoVersion string
}

// Validate reports the first setting Open cannot run with.
func (c *Config) Validate() error {
	switch {
	case c.Listen == "" || c.Admin == "":
		return errors.New("daemon: the data-plane and the admin address are both required")
	case c.DataDir == "":
		return errors.New("daemon: the data directory is required")
	case len(c.CPUs) == 0 || len(c.CPUs) > 1024:
		return fmt.Errorf("daemon: %d shards: want 1 to 1024", len(c.CPUs))
	case c.MaxInFlight < 1 || c.MaxInFlight > 1<<24:
		return fmt.Errorf("daemon: %d reservations in flight per shard: want 1 to %d", c.MaxInFlight, 1<<24)
	case c.LeaseTTL < 5*time.Second || c.LeaseTTL > 24*time.Hour:
		return fmt.Errorf("daemon: lease TTL %v: want 5s to 24h", c.LeaseTTL)
	case c.LeaseGrace < 0 || c.LeaseGrace > time.Hour:
		return fmt.Errorf("daemon: lease grace %v: want 0 to 1h", c.LeaseGrace)
	case c.EventRetention < time.Minute || c.EventRetention > 5*366*24*time.Hour:
		return fmt.Errorf("daemon: event retention %v: want 1m to 5 years", c.EventRetention)
	case c.GroupCommit < 0 || c.GroupCommit > 100*time.Millisecond:
		return fmt.Errorf("daemon: group commit %v: want 0 to 100ms", c.GroupCommit)
	case c.FundingWait < 0 || c.FundingWait > 2*time.Second:
		return fmt.Errorf("daemon: funding wait %v: want 0 to 2s", c.FundingWait)
	case c.UsageHistory < 1 || c.UsageHistory > 10_000_000:
		return fmt.Errorf("daemon: usage history %d: want 1 to 10000000", c.UsageHistory)
	case c.ShutdownGrace <= 0:
		return errors.New("daemon: the shutdown grace must be positive")
	case c.Secret != nil && len(c.Secret) < 32:
		return errors.New("daemon: the server secret must be at least 32 bytes")
	case c.LedgerURL != "" && !strings.HasPrefix(c.LedgerURL, "postgres://") && !strings.HasPrefix(c.LedgerURL, "postgresql://"):
		return errors.New("daemon: the ledger URL must be postgres:// or postgresql://")
	case c.AdminLimits.MaxConns < 1:
		return errors.New("daemon: the admin API must accept a connection")
	}
	if !route.ValidHeaderName(c.AuthzKeyHeader) {
		return fmt.Errorf("daemon: authz key header %q is not a header name", c.AuthzKeyHeader)
	}
	if err := c.Transport.validate(); err != nil {
		return err
	}
	if err := c.GRPC.validate(c.Transport.MaxHeaderBytes); err != nil {
		return err
	}
	return c.Events.validate()
}

func (e EventArchive) validate() error {
	switch {
	case e.SegmentBytes < 4<<10 || e.SegmentBytes > 1<<40:
		return fmt.Errorf("daemon: spool segment of %d bytes: want 4096 to 2^40", e.SegmentBytes)
	case e.MaxBytes < 4<<10 || e.MaxBytes > 1<<50:
		return fmt.Errorf("daemon: event archive of %d bytes: want 4096 to 2^50", e.MaxBytes)
	case e.MaxAge < time.Minute || e.MaxAge > 5*366*24*time.Hour:
		return fmt.Errorf("daemon: event archive age %v: want 1m to 5 years", e.MaxAge)
	}
	return nil
}

func (t Transport) validate() error {
	if t.MaxHeaderBytes < 256 || t.MaxBodyBytes < 1 || t.MaxConns < 1 || t.MaxOutput < 1 ||
		t.IdleTimeout <= 0 || t.HeaderTimeout <= 0 || t.BodyTimeout <= 0 {
		return errors.New("daemon: transport limits must be positive (the largest request head at least 256 bytes)")
	}
	return nil
}
