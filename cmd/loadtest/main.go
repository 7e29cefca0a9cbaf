// Command loadtest sends HTTP load to tollgated's data plane (or to the
// bare fasthttp server in bench/baseline) on this machine and reports
// throughput, latency percentiles, and answers by status and problem code.
//
// Usage:
//
//	loadtest [flags]
//	loadtest --url http://127.0.0.1:8080 -c 64 -d 10s --warmup 2s          # closed loop
//	loadtest --rate 20000 -c 64 -d 30s --hdr-out check.hgrm                 # open loop
//	loadtest --scenario mix --accounts-file accounts.txt --zipf 1.1 --json
//
// Targets must be loopback (127.0.0.0/8, localhost, ::1) unless
// --allow-remote is given. Exit status: 0 for a good run, 1 when the error
// rate exceeded --max-error-rate or nothing was answered (no throughput is
// printed then), 2 for bad flags or setup, 130 for a run cut short by
// Ctrl-C or SIGTERM (the partial result is printed).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/tollgated/tollgated/loadtest"
)

const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitInterrupted = 130
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, restore the default action so that a
		// second Ctrl-C kills a run stuck in its drain.
		<-ctx.Done()
		stop()
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	opts loadtest.Options

	mix           string
	keys          string
	accounts      int
	accountsFile  string
	accountsOut   string
	admin         loadtest.AdminOptions
	adminPolicy   string
	provisionOnly bool

	jsonOut bool
	hdrOut  string
	quiet   bool
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	o := &c.opts
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)

	fs.StringVar(&o.URL, "url", "http://127.0.0.1:8080", "target base URL (loopback only unless --allow-remote)")
	fs.StringVar(&o.URL, "target", "http://127.0.0.1:8080", "same as --url")
	fs.BoolVar(&o.AllowRemote, "allow-remote", false, "allow a target that is not on loopback")
	fs.IntVar(&o.Connections, "connections", 64, "TCP connections")
	fs.IntVar(&o.Connections, "c", 64, "same as --connections")
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "measured duration (at most 1h with the warm-up)")
	fs.DurationVar(&o.Duration, "d", 10*time.Second, "same as --duration")
	fs.DurationVar(&o.Warmup, "warmup", time.Second, "unmeasured warm-up before the measured duration")
	fs.IntVar(&o.Pipeline, "pipeline", 1, "requests in flight per connection (HTTP/1.1 pipelining)")
	fs.IntVar(&o.Pipeline, "p", 1, "same as --pipeline")
	fs.Float64Var(&o.Rate, "rate", 0, "open loop: total requests per second, latency measured from each request's due time; 0 = closed loop")
	fs.DurationVar(&o.Timeout, "timeout", 2*time.Second, "response timeout; also how long in-flight requests may finish after the end")

	engine := fs.String("engine", "", "closed loop: epoll (one thread per CPU drives every connection; Linux, the default there) or goroutines (one per connection)")
	scenario := fs.String("scenario", "check", "check | staged | admission | usage | mix")
	fs.StringVar(&c.mix, "mix", "", "weights for --scenario mix, e.g. check=70,staged=20,admission=5,usage=5")
	fs.IntVar(&c.accounts, "accounts", 0, "number of accounts (default: all in --accounts-file, 100 with --admin, else 1)")
	fs.Float64Var(&o.Zipf, "zipf", 0, "Zipf exponent for account choice (0 = uniform; 1.1 = a few hot accounts)")
	fs.StringVar(&c.accountsFile, "accounts-file", "", "file of \"account_id key\" lines")
	fs.StringVar(&c.keys, "key", "dummy", "API key(s) for synthetic accounts, comma-separated")
	fs.Uint64Var(&o.Seed, "seed", 1, "random seed for account and scenario choice")

	fs.StringVar(&o.CheckBody, "body", loadtest.DefaultCheckBody, "JSON body of /v1/check and /v1/admit")
	fs.IntVar(&o.TTLms, "ttl-ms", 0, "ttl_ms for /v1/admit (0 = server default)")
	fs.StringVar(&o.PlatformToken, "platform-token", os.Getenv("LOADTEST_PLATFORM_TOKEN"), "platform token for /v1/admission and /v1/usage (env LOADTEST_PLATFORM_TOKEN)")
	fs.StringVar(&o.OrgID, "org-id", "", "Org-Id header for /v1/admission (omitted when empty)")
	fs.StringVar(&o.WorkspaceID, "workspace-id", "", "Workspace-Id header for /v1/admission (omitted when empty)")
	fs.IntVar(&o.UsageBatch, "usage-batch", 10, "events per /v1/usage request")
	fs.Int64Var(&o.UsageUnits, "usage-units", 1, "units per usage event")

	fs.StringVar(&c.admin.URL, "admin", "", "admin API URL: provision --accounts accounts with keys before the run (depends on the admin API)")
	fs.StringVar(&c.admin.Token, "admin-token", os.Getenv("LOADTEST_ADMIN_TOKEN"), "admin bearer token (env LOADTEST_ADMIN_TOKEN)")
	fs.StringVar(&c.adminPolicy, "admin-policy", "", "file with a policy JSON document to PUT to each provisioned account")
	fs.Int64Var(&c.admin.Budget, "budget", 1_000_000_000_000, "allowance of each provisioned account")
	fs.StringVar(&c.admin.Period, "budget-period", "none", "budget period of provisioned accounts: none | day | week | month")
	fs.StringVar(&c.admin.Prefix, "account-prefix", "lt-", "id prefix of provisioned and synthetic accounts")
	fs.StringVar(&c.accountsOut, "accounts-out", "", "write the accounts used (e.g. just provisioned) to this file")
	fs.BoolVar(&c.provisionOnly, "provision-only", false, "provision accounts (and write --accounts-out), send no load")

	fs.BoolVar(&c.jsonOut, "json", false, "print the result as JSON instead of a table")
	fs.StringVar(&c.hdrOut, "hdr-out", "", "write the HdrHistogram percentile distribution (ms) to this file")
	fs.Float64Var(&o.MaxErrorRate, "max-error-rate", 0.01, "fail the run above this error rate (fraction; negative = no limit)")
	fs.BoolVar(&o.Count4xx, "count-4xx", false, "count 4xx answers as errors (transport errors, 5xx and unusable answers always count)")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress lines on stderr")
	fs.BoolVar(&c.quiet, "q", false, "same as --quiet")

	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	// The library reads zero as "default"; on the command line a zero is a
	// mistake, so refuse it rather than silently run with the default.
	switch {
	case o.Connections < 1:
		return nil, fmt.Errorf("--connections must be at least 1")
	case o.Pipeline < 1:
		return nil, fmt.Errorf("--pipeline must be at least 1")
	case o.Duration <= 0:
		return nil, fmt.Errorf("--duration must be positive")
	case o.Timeout <= 0:
		return nil, fmt.Errorf("--timeout must be positive")
	case o.UsageBatch < 1 || o.UsageUnits < 1:
		return nil, fmt.Errorf("--usage-batch and --usage-units must be at least 1")
	}
	o.Engine = loadtest.Engine(*engine)
	o.Scenario = loadtest.Scenario(*scenario)
	if err := loadtest.CheckScenario(o.Scenario); err != nil {
		return nil, err
	}
	if c.mix != "" {
		if o.Scenario != loadtest.ScenarioMix {
			return nil, fmt.Errorf("--mix needs --scenario mix")
		}
		m, err := loadtest.ParseMix(c.mix)
		if err != nil {
			return nil, err
		}
		o.Mix = m
	}
	if o.MaxErrorRate == 0 {
		// The library reads 0 as "default"; on the command line 0 means no
		// error is tolerated, which any rate above a tiny epsilon fails.
		o.MaxErrorRate = 1e-12
	}
	return c, nil
}

// setupAccounts fills c.opts.Accounts from the file, the admin API, or
// synthetic ids with the given keys.
func setupAccounts(ctx context.Context, c *config, stderr io.Writer) error {
	o := &c.opts
	switch {
	case c.accountsFile != "" && c.admin.URL != "":
		return errors.New("--accounts-file and --admin are exclusive")
	case c.accountsFile != "":
		f, err := os.Open(c.accountsFile)
		if err != nil {
			return err
		}
		defer f.Close()
		accts, err := loadtest.ReadAccounts(f)
		if err != nil {
			return fmt.Errorf("%s: %w", c.accountsFile, err)
		}
		if c.accounts > len(accts) {
			return fmt.Errorf("--accounts %d but %s has only %d", c.accounts, c.accountsFile, len(accts))
		}
		if c.accounts > 0 {
			accts = accts[:c.accounts]
		}
		o.Accounts = accts
	case c.admin.URL != "":
		c.admin.AllowRemote = o.AllowRemote
		c.admin.Count = c.accounts
		if c.admin.Count == 0 {
			c.admin.Count = 100
		}
		if c.adminPolicy != "" {
			p, err := os.ReadFile(c.adminPolicy)
			if err != nil {
				return err
			}
			c.admin.Policy = p
		}
		start := time.Now()
		accts, err := loadtest.Provision(ctx, c.admin)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "loadtest: provisioned %d accounts in %v\n", len(accts), time.Since(start).Round(time.Millisecond))
		o.Accounts = accts
		needsPlatform := o.Scenario == loadtest.ScenarioAdmission || o.Scenario == loadtest.ScenarioMix
		if needsPlatform && o.PlatformToken == "" {
			tok, err := loadtest.IssuePlatformToken(ctx, c.admin)
			if err != nil {
				return fmt.Errorf("platform token: %w", err)
			}
			o.PlatformToken = tok
		}
	default:
		n := max(c.accounts, 1)
		accts, err := loadtest.SyntheticAccounts(n, c.admin.Prefix, strings.Split(c.keys, ","))
		if err != nil {
			return err
		}
		o.Accounts = accts
	}
	if c.accountsOut != "" {
		f, err := os.OpenFile(c.accountsOut, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		if err := loadtest.WriteAccounts(f, o.Accounts); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return exitUsage
	}
	// Refuse a remote target before anything else talks to anyone.
	if _, err := loadtest.CheckTarget(c.opts.URL, c.opts.AllowRemote); err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return exitUsage
	}
	if err := setupAccounts(ctx, c, stderr); err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return exitUsage
	}
	if c.provisionOnly {
		return exitOK
	}
	if !c.quiet {
		c.opts.Progress = stderr
	}

	res, err := loadtest.Run(ctx, c.opts)
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return exitUsage
	}

	if c.hdrOut != "" {
		if err := writeHistogram(c.hdrOut, res); err != nil {
			fmt.Fprintf(stderr, "loadtest: %v\n", err)
		}
	}
	if c.jsonOut {
		enc := json.NewEncoder(stdout)
		if err := enc.Encode(res); err != nil {
			fmt.Fprintf(stderr, "loadtest: %v\n", err)
		}
	} else {
		res.WriteText(stdout)
	}

	if res.Mode == "open" && res.Missed > 0 {
		fmt.Fprintf(stderr, "loadtest: WARNING: %d sends due in the measured window were never written; the rate of %g req/s was not held\n",
			res.Missed, res.TargetRate)
	}
	switch {
	case res.Failed:
		fmt.Fprintf(stderr, "\nloadtest: !!! RUN FAILED: %s\n", res.Failure)
		fmt.Fprintf(stderr, "loadtest: !!! no throughput is reported for this run\n\n")
		return exitFailed
	case res.Interrupted:
		fmt.Fprintf(stderr, "loadtest: interrupted: the result covers %.2fs only\n", res.ElapsedSec)
		return exitInterrupted
	}
	return exitOK
}

func writeHistogram(path string, res *loadtest.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := res.WriteHistogram(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
