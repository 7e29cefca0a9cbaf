package main

import (
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgated/tollgated/admin"
	"github.com/tollgated/tollgated/affinity"
	"github.com/tollgated/tollgated/control"
	"github.com/tollgated/tollgated/daemon"
	"github.com/tollgated/tollgated/spool"
)

// config is everything tollgated is started with. Every flag has an
// environment variable, TOLLGATED_ followed by the flag's name in capitals
// with '-' as '_'; a flag on the command line wins over the environment.
type config struct {
	listen        string
	admin         string
	adminLimits   adminLimits
	shards        int
	cpus          []int
	dataDir       string
	ledgerURL     string // --ledger: "" for the embedded file in dataDir
	ledgerURLFile string // --ledger-file: a file holding the URL (credentials stay out of the process list)
	logLevel      zerolog.Level
	shutdownGrace time.Duration
	maxInFlight   int // reservations in flight per shard
	secretHex     string
	secretFile    string // where secretHex was read from, if from a file
	demoKey       string
	demoUnits     uint64
	adminToken    string
	leaseTTL      time.Duration
	nodeID        string
	leaseGrace    time.Duration
	fundingWait   time.Duration
	retention     time.Duration
	groupCommit   time.Duration
	usageHistory  int
	events        eventArchive
	authz         authzConfig
	grpc          grpcConfig
	ack           string
	cpuProfile    string
	loop          loopLimits
	// knownEnv holds every TOLLGATED_ variable a flag reads, so that
	// start-up can name the ones that read nothing (typos).
	knownEnv map[string]bool
}

// loopLimits are the per-shard transport bounds.
type loopLimits struct {
	maxHeaderBytes, maxBodyBytes, maxConns, maxOutput int
	idle, header, body                                time.Duration
}

// errHelp and errVersion end start-up successfully before any set-up.
var (
	errHelp    = errors.New("help requested")
	errVersion = errors.New("version requested")
)

// parseConfig reads args and the environment. It touches nothing else, so
// --help and --version work on any machine.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("tollgated", flag.ContinueOnError)
	fs.SetOutput(out)
	var c config
	var err error
	var cpus, level, adminTokenFile string
	var help, version bool
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "data-plane listen address (every shard binds it with SO_REUSEPORT)")
	fs.StringVar(&c.admin, "admin", "127.0.0.1:9091", "admin API listen address, loopback by default")
	fs.StringVar(&c.adminToken, "admin-token", "", "admin API bearer token; a flag's value shows in ps to every user of the machine: prefer --admin-token-file or TOLLGATED_ADMIN_TOKEN (default: generated on first start, printed once)")
	fs.StringVar(&adminTokenFile, "admin-token-file", "", "read the admin API bearer token from this file (its whole content, surrounding whitespace trimmed)")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", time.Minute, "lifetime of a node lease from the ledger; a busy account's lease is extended every half of it, an idle one's handed back; a node that never returns after a crash forfeits its unspent units this long (plus --lease-grace) after its last extension")
	fs.StringVar(&c.nodeID, "node-id", "", "this node's id, recorded on the leases it holds (default: the one stored in --data-dir, or a new random one stored there on first start)")
	fs.IntVar(&c.shards, "shards", 0, "number of shards (default: one per allowed CPU)")
	fs.StringVar(&cpus, "cpus", "", "CPUs to pin shards to, Linux cpulist syntax such as 0-3,6 (default: the CPUs this process may use)")
	fs.DurationVar(&c.leaseGrace, "lease-grace", 10*time.Second, "how long past expiry a lease may still be released before its remainder is forfeited")
	fs.DurationVar(&c.fundingWait, "funding-wait", 200*time.Millisecond, "how long a request refused only because its shard's lease slice ran out (or has not arrived yet) waits for the refill before it is answered 503; 0 answers at once")
	fs.DurationVar(&c.retention, "event-retention", control.DefaultEventRetention, "how long the ledger remembers a post-paid event's id: a reporter's retry is a duplicate within it; bounds the ledger's growth")
	fs.DurationVar(&c.groupCommit, "group-commit", 0, "how long the usage spool may wait to gather more records into one fsync; 0 starts the next fsync as soon as the last ends (the lowest acknowledgement latency; more fsyncs a second under load)")
	fs.StringVar(&c.ack, "ack", "durable", "when answers that bill usage are sent: durable (once the usage is fsync'd to the spool: survives kill -9 and power loss) or immediate (at once; usage reaches the spool within a flush interval, and is lost if the process dies first — spend stays bounded)")
	fs.IntVar(&c.usageHistory, "usage-history", 1000, "usage events kept per account for GET /v1/accounts/{id}/usage")
	c.events.register(fs)
	c.authz.register(fs)
	c.grpc.register(fs)
	fs.StringVar(&c.dataDir, "data-dir", "./tollgated-data", "directory for the ledger, the usage spool and the server secret")
	fs.StringVar(&c.ledgerURL, "ledger", "", "where the ledger lives: empty for the embedded file in --data-dir, or a PostgreSQL URL (postgres://user@host/db) shared by a fleet")
	fs.StringVar(&c.ledgerURLFile, "ledger-file", "", "a file holding the --ledger URL, so its password stays out of the process list and the environment")
	fs.StringVar(&level, "log-level", "info", "log level: debug, info, warn, error")
	fs.DurationVar(&c.shutdownGrace, "shutdown-grace", 10*time.Second, "how long SIGTERM waits for in-flight requests")
	fs.IntVar(&c.maxInFlight, "max-in-flight", 1<<16, "reservations in flight per shard")
	fs.StringVar(&c.secretHex, "secret", "", "server secret for key digests, hex, at least 32 bytes; a flag's value shows in ps to every user of the machine: prefer --secret-file (default: generated in --data-dir on first start)")
	fs.StringVar(&c.secretFile, "secret-file", "", "read the server secret from this file (hex, at least 32 bytes, surrounding whitespace trimmed)")
	fs.StringVar(&c.demoKey, "demo-key", "", "provision account \"demo\" in the ledger with this API key (for trying tollgated and for benchmarks)")
	fs.Uint64Var(&c.demoUnits, "demo-units", 1<<40, "units the demo account is funded with, once")
	fs.IntVar(&c.loop.maxHeaderBytes, "max-header-bytes", 8<<10, "largest request head per request (431 beyond)")
	fs.IntVar(&c.loop.maxBodyBytes, "max-body-bytes", 1<<20, "largest request body (413 beyond)")
	fs.IntVar(&c.loop.maxConns, "max-conns", 10_000, "connections per shard")
	fs.IntVar(&c.loop.maxOutput, "max-output", 64<<10, "response bytes a connection may leave unread before the shard stops reading it")
	fs.DurationVar(&c.loop.idle, "idle-timeout", 60*time.Second, "close keep-alive connections idle this long")
	fs.DurationVar(&c.loop.header, "header-timeout", 10*time.Second, "time allowed from a request's first byte to the end of its head")
	fs.DurationVar(&c.loop.body, "body-timeout", 30*time.Second, "time allowed to receive a request body")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (for performance work)")
	c.adminLimits.register(fs)
	fs.BoolVar(&help, "help", false, "print this help and exit")
	fs.BoolVar(&version, "version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(out, "tollgated — admission and metering daemon\n\nUsage: tollgated [flags]\n       tollgated spool verify|quarantine [--data-dir D]   (see tollgated spool --help)\n\nFlags (each also read from TOLLGATED_<NAME>):\n")
		fs.PrintDefaults()
	}
	if c.knownEnv, err = applyEnv(fs, getenv); err != nil {
		return c, err
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, errHelp
		}
		return c, err
	}
	if help {
		fs.Usage()
		return c, errHelp
	}
	if version {
		return c, errVersion
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := c.readSecretFiles(adminTokenFile); err != nil {
		return c, err
	}
	return c, c.finish(cpus, level)
}

// applyEnv sets each flag from its environment variable, if present, and
// returns the names of the variables it reads.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) (map[string]bool, error) {
	var err error
	known := make(map[string]bool)
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "help" || f.Name == "version" || err != nil {
			return
		}
		name := "TOLLGATED_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		known[name] = true
		if v := getenv(name); v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %v", name, v, e)
			}
		}
	})
	return known, err
}

// unknownEnv returns, sorted, the TOLLGATED_ variables of environ (as
// os.Environ gives it) that no flag reads: a misspelt one would otherwise
// do nothing, silently.
func unknownEnv(environ []string, known map[string]bool) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "TOLLGATED_") && !known[name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// readSecretFiles reads --secret-file and --admin-token-file, so that the
// secrets never need to be on the command line, where ps shows them.
func (c *config) readSecretFiles(adminTokenFile string) error {
	if c.secretFile != "" {
		if c.secretHex != "" {
			return fmt.Errorf("give --secret or --secret-file, not both")
		}
		b, err := os.ReadFile(c.secretFile)
		if err != nil {
			return fmt.Errorf("--secret-file: %w", err)
		}
		c.secretHex = strings.TrimSpace(string(b))
		if d, err := hex.DecodeString(c.secretHex); err != nil || len(d) < 32 {
			return fmt.Errorf("--secret-file %s: not a hex secret of at least 32 bytes", c.secretFile)
		}
	}
	if adminTokenFile != "" {
		if c.adminToken != "" {
			return fmt.Errorf("give --admin-token or --admin-token-file, not both")
		}
		b, err := os.ReadFile(adminTokenFile)
		if err != nil {
			return fmt.Errorf("--admin-token-file: %w", err)
		}
		if c.adminToken = strings.TrimSpace(string(b)); c.adminToken == "" {
			return fmt.Errorf("--admin-token-file %s is empty", adminTokenFile)
		}
	}
	return nil
}

func (c *config) finish(cpus, level string) error {
	lv, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	c.logLevel = lv
	if cpus != "" {
		if c.cpus, err = affinity.ParseList(cpus); err != nil {
			return fmt.Errorf("--cpus: %v", err)
		}
	}
	if c.shards < 0 || c.shards > 1024 {
		return fmt.Errorf("--shards %d: want 0 (one per CPU) to 1024", c.shards)
	}
	if c.maxInFlight < 1 || c.maxInFlight > 1<<24 {
		return fmt.Errorf("--max-in-flight %d: want 1 to %d", c.maxInFlight, 1<<24)
	}
	if c.leaseTTL < 5*time.Second || c.leaseTTL > 24*time.Hour {
		return fmt.Errorf("--lease-ttl %v: want 5s to 24h", c.leaseTTL)
	}
	if c.leaseGrace < 0 || c.leaseGrace > time.Hour {
		return fmt.Errorf("--lease-grace %v: want 0 to 1h", c.leaseGrace)
	}
	if c.retention < time.Minute || c.retention > 5*366*24*time.Hour {
		return fmt.Errorf("--event-retention %v: want 1m to 5 years", c.retention)
	}
	if c.groupCommit < 0 || c.groupCommit > 100*time.Millisecond {
		return fmt.Errorf("--group-commit %v: want 0 to 100ms", c.groupCommit)
	}
	if c.fundingWait < 0 || c.fundingWait > 2*time.Second {
		return fmt.Errorf("--funding-wait %v: want 0 to 2s", c.fundingWait)
	}
	if c.ack != "durable" && c.ack != "immediate" {
		return fmt.Errorf("--ack %q: want durable or immediate", c.ack)
	}
	if c.usageHistory < 1 || c.usageHistory > 10_000_000 {
		return fmt.Errorf("--usage-history %d: want 1 to 10000000", c.usageHistory)
	}
	if err := c.events.check(); err != nil {
		return err
	}
	if err := c.authz.check(); err != nil {
		return err
	}
	if c.dataDir == "" {
		return fmt.Errorf("--data-dir must not be empty")
	}
	if err := checkLedgerFlags(c.ledgerURL, c.ledgerURLFile); err != nil {
		return err
	}
	if c.shutdownGrace <= 0 {
		return fmt.Errorf("--shutdown-grace must be positive")
	}
	if c.secretHex != "" {
		b, err := hex.DecodeString(c.secretHex)
		if err != nil || len(b) < 32 {
			return fmt.Errorf("--secret must be at least 64 hex digits")
		}
	}
	l := c.loop
	if l.maxHeaderBytes < 256 || l.maxBodyBytes < 1 || l.maxConns < 1 || l.maxOutput < 1 || l.idle <= 0 || l.header <= 0 || l.body <= 0 {
		return fmt.Errorf("transport limits must be positive (max-header-bytes at least 256)")
	}
	return nil
}

// adminLimits are the admin listener's flags; its timeouts are
// admin.DefaultLimits'.
type adminLimits struct {
	maxConns int
}

// register adds the admin listener's flags to fs, each checked as it is
// parsed.
func (a *adminLimits) register(fs *flag.FlagSet) {
	a.maxConns = admin.DefaultLimits().MaxConns
	fs.Func("admin-max-conns", fmt.Sprintf("open connections the admin API accepts; beyond it a connection is answered 503 and closed, so idle sockets cannot use up file descriptors the data plane needs (default %d)", a.maxConns),
		func(v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 10_000 {
				return fmt.Errorf("want 1 to 10000")
			}
			a.maxConns = n
			return nil
		})
}

// limits is the admin.Limits the flags ask for.
func (a adminLimits) limits() admin.Limits { return admin.Limits{MaxConns: a.maxConns} }

// eventArchive sizes the billed-event stream (GET /v1/events): released
// spool segments are kept in --data-dir/events until the archive holds
// maxBytes or its oldest segment's last event is maxAge old. A segment
// (segmentBytes) is the unit the spool releases and the archive drops.
type eventArchive struct {
	maxBytes     int64
	maxAge       time.Duration
	segmentBytes int64
}

func (e *eventArchive) register(fs *flag.FlagSet) {
	fs.Int64Var(&e.maxBytes, "event-archive-bytes", 1<<30, "bytes of billed events kept for GET /v1/events after they are billed (whole spool segments; a data-plane event takes about 100 bytes plus its account id, docs/OPERATIONS.md); the oldest segments go first")
	fs.DurationVar(&e.maxAge, "event-archive-age", 7*24*time.Hour, "how long billed events are kept for GET /v1/events after their segment's last write; a consumer that falls further behind gets 410 cursor-expired")
	fs.Int64Var(&e.segmentBytes, "spool-segment-bytes", spool.DefaultSegmentBytes, "size at which the usage spool starts a new segment file: the unit billed events are released, archived and dropped in")
}

func (e eventArchive) check() error {
	switch {
	case e.segmentBytes < 4<<10 || e.segmentBytes > 1<<40:
		return fmt.Errorf("--spool-segment-bytes %d: want 4096 to 2^40", e.segmentBytes)
	case e.maxBytes < 4<<10 || e.maxBytes > 1<<50:
		return fmt.Errorf("--event-archive-bytes %d: want 4096 to 2^50", e.maxBytes)
	case e.maxAge < time.Minute || e.maxAge > 5*366*24*time.Hour:
		return fmt.Errorf("--event-archive-age %v: want 1m to 5 years", e.maxAge)
	}
	return nil
}

// daemonConfig is the daemon.Config the flags ask for. It reads what
// parseConfig leaves alone: the --ledger-file, and the CPUs this process
// may use.
func (c *config) daemonConfig() (daemon.Config, error) {
	ledgerURL, err := ledgerLocation(*c)
	if err != nil {
		return daemon.Config{}, err
	}
	cpus, err := shardCPUs(c.cpus, c.shards)
	if err != nil {
		return daemon.Config{}, err
	}
	var secret []byte
	if c.secretHex != "" {
		if secret, err = hex.DecodeString(c.secretHex); err != nil {
			return daemon.Config{}, fmt.Errorf("--secret: %w", err)
		}
	}
	l := c.loop
	return daemon.Config{
		Listen: c.listen, Admin: c.admin, AdminLimits: c.adminLimits.limits(),
		CPUs: cpus, DataDir: c.dataDir, LedgerURL: ledgerURL, UsageHistory: c.usageHistory,
		Secret: secret, SecretSource: c.secretSource(), AdminToken: c.adminToken, NodeID: c.nodeID,
		DemoKey: c.demoKey, DemoUnits: c.demoUnits,
		Durable: c.ack == "durable", ShutdownGrace: c.shutdownGrace, MaxInFlight: c.maxInFlight,
		LeaseTTL: c.leaseTTL, LeaseGrace: c.leaseGrace, FundingWait: c.fundingWait,
		EventRetention: c.retention, GroupCommit: c.groupCommit,
		Events:         daemon.EventArchive{MaxBytes: c.events.maxBytes, MaxAge: c.events.maxAge, SegmentBytes: c.events.segmentBytes},
		AuthzKeyHeader: c.authz.keyHeader,
		GRPC:           c.grpc.daemon(),
		Transport: daemon.Transport{MaxHeaderBytes: l.maxHeaderBytes, MaxBodyBytes: l.maxBodyBytes, MaxConns: l.maxConns,
			MaxOutput: l.maxOutput, IdleTimeout: l.idle, HeaderTimeout: l.header, BodyTimeout: l.body},
		Build: build(),
	}, nil
}

// secretSource says where --secret came from, for the error that refuses
// it ("" when the data directory's secret is used).
func (c *config) secretSource() string {
	switch {
	case c.secretFile != "":
		return "--secret-file " + c.secretFile
	case c.secretHex != "":
		return "--secret (or TOLLGATED_SECRET)"
	}
	return ""
}

// shardCPUs is one CPU per shard: --cpus (default: the CPUs this process
// may use), cycled through for --shards of them (default: one each).
func shardCPUs(cpus []int, shards int) ([]int, error) {
	if len(cpus) == 0 {
		var err error
		if cpus, err = affinity.Allowed(); err != nil {
			return nil, fmt.Errorf("listing allowed CPUs: %w", err)
		}
	}
	n := shards
	if n == 0 {
		n = len(cpus)
	}
	out := make([]int, n)
	for i := range out {
		out[i] = cpus[i%len(cpus)]
	}
	return out, nil
}

// checkLedgerFlags validates --ledger and --ledger-file (at most one; a
// URL must be PostgreSQL's).
func checkLedgerFlags(ledgerURL, file string) error {
	if ledgerURL != "" && file != "" {
		return fmt.Errorf("--ledger and --ledger-file both set: give the URL once")
	}
	if ledgerURL != "" && !isPostgresURL(ledgerURL) {
		return fmt.Errorf("--ledger: want a postgres:// or postgresql:// URL (or nothing, for the embedded file)")
	}
	return nil
}

func isPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// ledgerLocation returns the PostgreSQL URL the configuration names (read
// from --ledger-file if that is set), or "" for the embedded file.
func ledgerLocation(cfg config) (string, error) {
	if cfg.ledgerURLFile == "" {
		return cfg.ledgerURL, nil
	}
	b, err := os.ReadFile(cfg.ledgerURLFile)
	if err != nil {
		return "", fmt.Errorf("--ledger-file: %w", err)
	}
	u := strings.TrimSpace(string(b))
	if !isPostgresURL(u) {
		return "", fmt.Errorf("--ledger-file %s: want one postgres:// or postgresql:// URL", cfg.ledgerURLFile)
	}
	return u, nil
}
