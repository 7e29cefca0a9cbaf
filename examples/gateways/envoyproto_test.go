package gateways

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The gRPC configuration is checked against Envoy's own v3 protos (the Go
// module Envoy's control planes use): decoded strictly — an unknown field
// or a wrong type is an error — every typed_config unpacked into its
// message, and each message's protoc-gen-validate rules run (required
// fields, enums, ranges), which are the rules Envoy applies on load.

// envoyBootstrap decodes an Envoy YAML bootstrap into its proto.
func envoyBootstrap(raw []byte) (*bootstrapv3.Bootstrap, error) {
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

type validator interface{ ValidateAll() error }

func validate(what string, m proto.Message) error {
	if v, ok := m.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// grpcEnvoyConfig is what tollgated needs of the gRPC configuration,
// beyond Envoy's schema.
type grpcEnvoyConfig struct {
	authz     []*extauthzv3.ExtAuthz
	ratelimit []*ratelimitv3.RateLimit
	limits    []*routev3.RateLimit
}

// checkEnvoyProto validates boot and collects its ext_authz and rate
// limit filters and routes' rate limits.
func checkEnvoyProto(boot *bootstrapv3.Bootstrap) (grpcEnvoyConfig, error) {
	var out grpcEnvoyConfig
	if err := validate("bootstrap", boot); err != nil {
		return out, err
	}
	for _, c := range boot.GetStaticResources().GetClusters() {
		for name, a := range c.GetTypedExtensionProtocolOptions() {
			var o upstreamhttpv3.HttpProtocolOptions
			if err := a.UnmarshalTo(&o); err != nil {
				return out, fmt.Errorf("cluster %s: %s: %w", c.GetName(), name, err)
			}
			if err := validate("cluster "+c.GetName(), &o); err != nil {
				return out, err
			}
		}
	}
	for _, l := range boot.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
					return out, fmt.Errorf("listener %s: %w", l.GetName(), err)
				}
				if err := validate("listener "+l.GetName(), &hcm); err != nil {
					return out, err
				}
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					for _, r := range vh.GetRoutes() {
						out.limits = append(out.limits, r.GetRoute().GetRateLimits()...)
					}
				}
				for _, hf := range hcm.GetHttpFilters() {
					m, err := hf.GetTypedConfig().UnmarshalNew()
					if err != nil {
						return out, fmt.Errorf("filter %s: %w", hf.GetName(), err)
					}
					if err := validate("filter "+hf.GetName(), m); err != nil {
						return out, err
					}
					switch m := m.(type) {
					case *extauthzv3.ExtAuthz:
						out.authz = append(out.authz, m)
					case *ratelimitv3.RateLimit:
						out.ratelimit = append(out.ratelimit, m)
					}
				}
			}
		}
	}
	return out, nil
}

// TestEnvoyGRPCConfigIsValid: the gRPC example is a valid Envoy v3
// bootstrap whose ext_authz and rate limit filters call tollgated's gRPC
// listener, fail closed, ask the "tollgated" domain and name the account
// in every descriptor.
func TestEnvoyGRPCConfigIsValid(t *testing.T) {
	raw, err := os.ReadFile("envoy/envoy-grpc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	boot, err := envoyBootstrap(raw)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := checkEnvoyProto(boot)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.authz) != 1 || len(cfg.ratelimit) != 1 || len(cfg.limits) == 0 {
		t.Fatalf("%d ext_authz, %d rate limit filters, %d route rate limits: want one, one and some", len(cfg.authz), len(cfg.ratelimit), len(cfg.limits))
	}
	a := cfg.authz[0]
	if a.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "tollgated_grpc" || a.GetFailureModeAllow() {
		t.Fatalf("ext_authz: %v", a)
	}
	r := cfg.ratelimit[0]
	if r.GetDomain() != "tollgated" || !r.GetFailureModeDeny() ||
		r.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName() != "tollgated_grpc" {
		t.Fatalf("rate limit filter: %v", r)
	}
	for _, l := range cfg.limits {
		if !namesAccount(l) {
			t.Fatalf("a route's rate limit names no account: %v", l)
		}
	}
}

// namesAccount reports whether l's descriptor has an "account" entry set
// by the gateway (a generic_key), never by a client's header.
func namesAccount(l *routev3.RateLimit) bool {
	for _, act := range l.GetActions() {
		if act.GetGenericKey().GetDescriptorKey() == "account" {
			return true
		}
	}
	return false
}

// TestEnvoyProtoCheckCatchesMistakes: the check fails on what Envoy
// would refuse to load.
func TestEnvoyProtoCheckCatchesMistakes(t *testing.T) {
	raw, err := os.ReadFile("envoy/envoy-grpc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string][2]string{
		"an unknown field":         {"failure_mode_deny: true", "failure_mode_denied: true"},
		"a missing required field": {"domain: tollgated", "stat_prefix: x"},
		"a bad enum":               {"transport_api_version: V3", "transport_api_version: V9"},
		"an unknown filter type":   {"ratelimit.v3.RateLimit\n", "ratelimit.v3.RateLimits\n"},
	} {
		if !strings.Contains(string(raw), edit[0]) {
			t.Fatalf("%s: %q is not in the example", name, edit[0])
		}
		bad := strings.Replace(string(raw), edit[0], edit[1], 1)
		boot, err := envoyBootstrap([]byte(bad))
		if err == nil {
			_, err = checkEnvoyProto(boot)
		}
		if err == nil {
			t.Errorf("%s passed", name)
		}
	}
}

// TestEnvoyHTTPConfigIsValid: the HTTP ext_authz example passes the same
// proto check.
func TestEnvoyHTTPConfigIsValid(t *testing.T) {
	raw, err := os.ReadFile("envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	boot, err := envoyBootstrap(raw)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := checkEnvoyProto(boot)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.authz) != 1 || cfg.authz[0].GetHttpService().GetPathPrefix() != "/v1/authz" {
		t.Fatalf("ext_authz: %v", cfg.authz)
	}
}
