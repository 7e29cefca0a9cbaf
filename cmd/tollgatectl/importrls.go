package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

// An envoyproxy/ratelimit configuration is a domain and a tree of
// descriptors, each with an optional rate limit. tollgated's limits are an
// account's: a request rate in whole requests per second with a burst.
// So the import reads the top-level descriptors whose key names the
// account (as the gRPC rate-limit service reads them) and sets each such
// account's request rate from its limit; what tollgated cannot enforce as
// written — nested per-value limits, shadow mode, a rate that is not a
// whole number per second — is refused, naming the descriptor, rather
// than approximated silently.

type rlsConfig struct {
	Domain      string          `yaml:"domain"`
	Descriptors []rlsDescriptor `yaml:"descriptors"`
}

type rlsDescriptor struct {
	Key            string          `yaml:"key"`
	Value          string          `yaml:"value"`
	RateLimit      *rlsLimit       `yaml:"rate_limit"`
	Descriptors    []rlsDescriptor `yaml:"descriptors"`
	ShadowMode     bool            `yaml:"shadow_mode"`
	DetailedMetric bool            `yaml:"detailed_metric"`
	ValueToMetric  bool            `yaml:"value_to_metric"`
	ShareThreshold bool            `yaml:"share_threshold"`
}

type rlsLimit struct {
	Name            string   `yaml:"name"`
	RequestsPerUnit uint64   `yaml:"requests_per_unit"`
	Unit            string   `yaml:"unit"`
	UnitMultiplier  uint64   `yaml:"unit_multiplier"`
	Unlimited       bool     `yaml:"unlimited"`
	Replaces        []string `yaml:"replaces"`
}

// unitSeconds are envoyproxy/ratelimit's units.
var unitSeconds = map[string]uint64{"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400,
	"month": 30 * 86400, "year": 365 * 86400}

// accountLimit is what the import sets on one account: a request rate per
// second and its burst (both 0 for unlimited).
type accountLimit struct {
	account     string
	rate, burst uint64
}

const maxRate = 1<<32 - 1 // rates and bursts are uint32 in a policy

// parseEnvoyRateLimit reads a configuration into the accounts' limits.
func parseEnvoyRateLimit(raw []byte, domain, accountKey string) ([]accountLimit, error) {
	var cfg rlsConfig
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("not an envoyproxy/ratelimit configuration: %w", err)
	}
	if cfg.Domain != domain {
		return nil, fmt.Errorf("domain %q: the daemon's rate-limit domain is %q (--domain)", cfg.Domain, domain)
	}
	var out []accountLimit
	seen := map[string]bool{}
	for i, d := range cfg.Descriptors {
		at := fmt.Sprintf("descriptors[%d] (%s=%s)", i, d.Key, d.Value)
		switch {
		case d.Key != accountKey:
			return nil, fmt.Errorf("%s: a top-level descriptor must name an account (key %q)", at, accountKey)
		case d.Value == "":
			return nil, fmt.Errorf("%s: names no account (a value is required: tollgated's limits are per account)", at)
		case seen[d.Value]:
			return nil, fmt.Errorf("%s: account given twice", at)
		case len(d.Descriptors) > 0:
			return nil, fmt.Errorf("%s: nested descriptors are not expressible: an account has one request rate (price routes in its policy's routes instead)", at)
		case d.ShadowMode:
			return nil, fmt.Errorf("%s: shadow_mode is not expressible: tollgated enforces every limit it has", at)
		case d.RateLimit == nil:
			return nil, fmt.Errorf("%s: no rate_limit", at)
		}
		seen[d.Value] = true
		l, err := perSecond(d.RateLimit)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		l.account = d.Value
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, errors.New("no descriptors")
	}
	return out, nil
}

// perSecond is a limit as a request rate: N per unit is N/unit-seconds
// tokens a second with a burst of N — exact only when that is a whole
// number.
func perSecond(l *rlsLimit) (accountLimit, error) {
	if l.Unlimited {
		return accountLimit{}, nil
	}
	if len(l.Replaces) > 0 {
		return accountLimit{}, errors.New("replaces is not expressible: an account has one request rate")
	}
	secs, ok := unitSeconds[l.Unit]
	if !ok {
		return accountLimit{}, fmt.Errorf("unit %q: want second, minute, hour, day, week, month or year", l.Unit)
	}
	if l.UnitMultiplier > 1 {
		secs *= l.UnitMultiplier
	}
	n := l.RequestsPerUnit
	switch {
	case n == 0:
		return accountLimit{}, errors.New("requests_per_unit must be positive (or unlimited: true)")
	case n%secs != 0:
		return accountLimit{}, fmt.Errorf("%d per %d s is not a whole number of requests per second: tollgated's request rate is per second (write it as a per-second limit)", n, secs)
	case n > maxRate:
		return accountLimit{}, fmt.Errorf("requests_per_unit %d: at most %d", n, uint64(maxRate))
	}
	return accountLimit{rate: n / secs, burst: n}, nil
}

func (a *app) importCommand() *cobra.Command {
	cmd := group("import", "Import other tools' configurations through the admin API")
	var dryRun bool
	var domain, accountKey string
	rls := &cobra.Command{
		Use:   "envoy-ratelimit FILE",
		Short: "Set accounts' request rates from an envoyproxy/ratelimit YAML configuration",
		Long: `Reads an envoyproxy/ratelimit configuration (domain, descriptors, rate_limit:
{requests_per_unit, unit}). Each top-level descriptor names an account
(key "account", as tollgated's gRPC rate-limit service reads descriptors);
its limit becomes the account's request_rate (per second) and
request_burst (the limit's requests_per_unit). A missing account is
created; the rest of its policy is kept, and a policy without routes gets
a default route (one request of its first operation class) so the
rate-limit service can price it. What tollgated cannot enforce as written
is refused before anything changes.`,
		Example: `  tollgatectl import envoy-ratelimit config.yaml --dry-run
  tollgatectl import envoy-ratelimit config.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			limits, err := parseEnvoyRateLimit(raw, domain, accountKey)
			if err != nil {
				return usageError{fmt.Errorf("%s: %w", args[0], err)}
			}
			for _, l := range limits {
				if err := a.importLimit(cmd.Context(), l, dryRun); err != nil {
					return fmt.Errorf("account %s: %w", l.account, err)
				}
			}
			return nil
		},
	}
	rls.Flags().BoolVar(&dryRun, "dry-run", false, "print what would change, change nothing")
	rls.Flags().StringVar(&domain, "domain", "tollgated", "the domain the file must declare (the daemon's --grpc-domain)")
	rls.Flags().StringVar(&accountKey, "account-entry", "account", "the descriptor key naming the account (the daemon's --grpc-account-entry)")
	cmd.AddCommand(rls)
	return cmd
}

// importLimit sets one account's request rate, creating the account if
// it does not exist.
func (a *app) importLimit(ctx context.Context, l accountLimit, dryRun bool) error {
	created := false
	raw, err := a.c.do(ctx, http.MethodGet, accountPath(l.account, "/policy"), nil, nil)
	var p *problem
	switch {
	case errors.As(err, &p) && p.Status == http.StatusNotFound:
		created, err = true, nil
		if !dryRun {
			if _, err := a.c.do(ctx, http.MethodPost, "/v1/accounts", nil, map[string]any{"id": l.account}); err != nil {
				return err
			}
			raw, err = a.c.do(ctx, http.MethodGet, accountPath(l.account, "/policy"), nil, nil)
		}
	}
	if err != nil {
		return err
	}
	policy := map[string]any{}
	if raw != nil {
		var answer struct {
			Policy map[string]any `json:"policy"`
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&answer); err != nil {
			return err
		}
		policy = answer.Policy
	}
	// A dry run does not create the account: its default policy (no
	// routes) would gain the default route.
	route := raw == nil || withLimit(policy, l)
	what := fmt.Sprintf("%s: request_rate %d/s, request_burst %d", l.account, l.rate, l.burst)
	if l.rate == 0 {
		what = l.account + ": no request rate (unlimited)"
	}
	if created {
		what += ", account created"
	}
	if route {
		what += ", default route added"
	}
	if dryRun {
		fmt.Fprintln(a.out, "would set "+what)
		return nil
	}
	if _, err := a.c.do(ctx, http.MethodPut, accountPath(l.account, "/policy"), nil, policy); err != nil {
		return err
	}
	fmt.Fprintln(a.out, "set "+what)
	return nil
}

// withLimit sets l in a policy document and, if it has no routes, a
// default route of one item of its first operation class; it reports
// whether it added the route.
func withLimit(policy map[string]any, l accountLimit) (routeAdded bool) {
	limits, _ := policy["limits"].(map[string]any)
	if limits == nil {
		limits = map[string]any{}
		policy["limits"] = limits
	}
	limits["request_rate"], limits["request_burst"] = l.rate, l.burst
	if _, ok := policy["routes"]; ok {
		return false
	}
	ops, _ := policy["operations"].(map[string]any)
	first := ""
	for name := range ops {
		if first == "" || name < first {
			first = name
		}
	}
	if first == "" {
		return false // no class to route to: the admin API refuses the document and says why
	}
	policy["routes"] = map[string]any{"default": map[string]any{"op": first, "count": 1}}
	return true
}
