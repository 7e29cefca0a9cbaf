package gateways

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"
)

// The Istio files are checked as the Envoy ones are: each resource's spec
// decoded strictly into Istio's own protos (the istio.io/api module, which
// Istio's CRDs are generated from: an unknown field, a wrong type or an
// unknown enum value is an error), and each EnvoyFilter patch into the Envoy
// message it patches, with Envoy's validation rules run on it.

// istioConfig is what tollgated needs of the Istio files.
type istioConfig struct {
	providers []*meshv1alpha1.MeshConfig_ExtensionProvider
	policies  []*securityv1beta1.AuthorizationPolicy
	filters   []proto.Message // every HTTP filter an EnvoyFilter adds, unpacked
	limits    []*routev3.RateLimit
	limited   []string // the domains whose virtual hosts get the limits
}

// strictJSON decodes v, as read from YAML, into m as protojson does: no
// unknown field, no wrong type.
func strictJSON(v any, m proto.Message) error {
	js, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return protojson.Unmarshal(js, m)
}

// checkIstio reads every resource of the YAML files raw into cfg.
func checkIstio(cfg *istioConfig, raw []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := checkIstioResource(cfg, doc); err != nil {
			return err
		}
	}
}

func checkIstioResource(cfg *istioConfig, doc map[string]any) error {
	if mesh, ok := doc["meshConfig"]; ok { // the istiod chart's values
		var m meshv1alpha1.MeshConfig
		if err := strictJSON(mesh, &m); err != nil {
			return fmt.Errorf("meshConfig: %w", err)
		}
		cfg.providers = append(cfg.providers, m.GetExtensionProviders()...)
		return nil
	}
	kind := fmt.Sprint(doc["apiVersion"], " ", doc["kind"])
	switch kind {
	case "security.istio.io/v1 AuthorizationPolicy":
		var p securityv1beta1.AuthorizationPolicy
		if err := strictJSON(doc["spec"], &p); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		cfg.policies = append(cfg.policies, &p)
	case "networking.istio.io/v1alpha3 EnvoyFilter":
		var f networkingv1alpha3.EnvoyFilter
		if err := strictJSON(doc["spec"], &f); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		for _, p := range f.GetConfigPatches() {
			if err := checkEnvoyPatch(cfg, p); err != nil {
				return fmt.Errorf("%s: %w", kind, err)
			}
		}
	default:
		return fmt.Errorf("a resource this check does not know: %s", kind)
	}
	return nil
}

// checkEnvoyPatch decodes p's value into the Envoy message it patches.
func checkEnvoyPatch(cfg *istioConfig, p *networkingv1alpha3.EnvoyFilter_EnvoyConfigObjectPatch) error {
	js, err := protojson.Marshal(p.GetPatch().GetValue())
	if err != nil {
		return err
	}
	switch p.GetApplyTo() {
	case networkingv1alpha3.EnvoyFilter_HTTP_FILTER:
		var hf hcmv3.HttpFilter
		if err := protojson.Unmarshal(js, &hf); err != nil {
			return fmt.Errorf("HTTP_FILTER: %w", err)
		}
		if err := validate("HTTP_FILTER", &hf); err != nil {
			return err
		}
		m, err := hf.GetTypedConfig().UnmarshalNew()
		if err != nil {
			return fmt.Errorf("filter %s: %w", hf.GetName(), err)
		}
		if err := validate("filter "+hf.GetName(), m); err != nil {
			return err
		}
		cfg.filters = append(cfg.filters, m)
	case networkingv1alpha3.EnvoyFilter_VIRTUAL_HOST:
		// A MERGE: part of a virtual host, so only what it carries is
		// validated.
		var vh routev3.VirtualHost
		if err := protojson.Unmarshal(js, &vh); err != nil {
			return fmt.Errorf("VIRTUAL_HOST: %w", err)
		}
		for _, l := range vh.GetRateLimits() {
			if err := validate("VIRTUAL_HOST rate limit", l); err != nil {
				return err
			}
		}
		cfg.limits = append(cfg.limits, vh.GetRateLimits()...)
		cfg.limited = append(cfg.limited, p.GetMatch().GetRouteConfiguration().GetVhost().GetDomainName())
	default:
		return fmt.Errorf("a patch this check does not know: %v", p.GetApplyTo())
	}
	return nil
}

func readIstio(t *testing.T) *istioConfig {
	t.Helper()
	var cfg istioConfig
	for _, f := range []string{"istio/mesh-config.yaml", "istio/ext-authz.yaml", "istio/ratelimit.yaml"} {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkIstio(&cfg, raw); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	return &cfg
}

// TestIstioConfigIsValid: the Istio files are valid for Istio and for the
// Envoy they patch, and say what tollgated needs: the ext_authz provider is
// tollgated's gRPC port and fails closed, the gateway's CUSTOM policy uses
// it for every host the rate limit filter does not bill (a request is
// billed once), a client's X-Tollgate-* headers are dropped first, the rate
// limit filter asks the "tollgated" domain of the same service and fails
// closed, every descriptor names its account, and only the gateway may call
// tollgated's gRPC port.
func TestIstioConfigIsValid(t *testing.T) {
	cfg := readIstio(t)
	if len(cfg.providers) != 1 {
		t.Fatalf("%d extension providers, want 1", len(cfg.providers))
	}
	pv := cfg.providers[0]
	az := pv.GetEnvoyExtAuthzGrpc()
	if az == nil || az.GetPort() != 8081 || az.GetFailOpen() || az.GetTimeout().AsDuration().Seconds() != 1 {
		t.Fatalf("the ext_authz provider: %v", pv)
	}
	var custom, callers bool
	var authorized []string // hosts the CUSTOM policy leaves alone
	for _, p := range cfg.policies {
		switch p.GetAction() {
		case securityv1beta1.AuthorizationPolicy_CUSTOM:
			custom = p.GetProvider().GetName() == pv.GetName() && len(p.GetRules()) > 0
			for _, r := range p.GetRules() {
				for _, to := range r.GetTo() {
					authorized = append(authorized, to.GetOperation().GetNotHosts()...)
				}
			}
		case securityv1beta1.AuthorizationPolicy_ALLOW:
			callers = len(p.GetRules()) == 1 && slices.Equal(p.GetRules()[0].GetTo()[0].GetOperation().GetPorts(), []string{"8081"}) &&
				len(p.GetRules()[0].GetFrom()[0].GetSource().GetPrincipals()) == 1
		}
	}
	if !custom || !callers {
		t.Fatalf("a CUSTOM policy using %q: %v; the gRPC port's callers limited: %v", pv.GetName(), custom, callers)
	}
	var stripped []string
	var rl []*ratelimitv3.RateLimit
	for _, f := range cfg.filters {
		switch f := f.(type) {
		case *headermutationv3.HeaderMutation:
			for _, m := range f.GetMutations().GetRequestMutations() {
				stripped = append(stripped, m.GetRemove())
			}
		case *ratelimitv3.RateLimit:
			rl = append(rl, f)
		}
	}
	for _, h := range []string{"x-tollgate-account", "x-tollgate-request-id", "x-tollgate-units", "x-tollgate-reservation"} {
		if !slices.Contains(stripped, h) {
			t.Fatalf("a client's %s is not dropped (dropped: %v)", h, stripped)
		}
	}
	want := "outbound|8081||" + az.GetService()
	if len(rl) != 1 || rl[0].GetDomain() != "tollgated" || !rl[0].GetFailureModeDeny() ||
		rl[0].GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName() != want {
		t.Fatalf("rate limit filters %v; want one asking domain tollgated of %s, failing closed", rl, want)
	}
	if len(cfg.limits) == 0 {
		t.Fatal("no virtual host makes a descriptor")
	}
	// A request is billed once: the rate-limited domains are left out of
	// the CUSTOM policy, with and without a port.
	for _, h := range cfg.limited {
		if h == "" || !slices.Contains(authorized, h) || !slices.Contains(authorized, h+":*") {
			t.Fatalf("the rate-limited domain %q is also sent to ext_authz (left out: %v)", h, authorized)
		}
	}
	for _, l := range cfg.limits {
		if !namesAccount(l) {
			t.Fatalf("a rate limit names no account: %v", l)
		}
	}
}

// TestIstioCheckCatchesMistakes: the check fails on what Istio or the
// Envoy it patches would refuse.
func TestIstioCheckCatchesMistakes(t *testing.T) {
	for name, edit := range map[string][3]string{
		"an unknown Istio field":       {"istio/mesh-config.yaml", "failOpen: false", "failOpenly: false"},
		"an unknown Istio enum":        {"istio/ext-authz.yaml", "action: CUSTOM", "action: CUSTOMS"},
		"a wrong type in Istio":        {"istio/mesh-config.yaml", "port: 8081", "port: grpc"},
		"an unknown patch context":     {"istio/ratelimit.yaml", "context: GATEWAY", "context: GATEWAYS"},
		"an unknown Envoy field":       {"istio/ratelimit.yaml", "failure_mode_deny: true", "failure_mode_denied: true"},
		"a missing Envoy field":        {"istio/ratelimit.yaml", "domain: tollgated", "stat_prefix: x"},
		"an unknown Envoy filter type": {"istio/ext-authz.yaml", "header_mutation.v3.HeaderMutation\n", "header_mutation.v3.HeaderMutations\n"},
		"an empty descriptor action":   {"istio/ratelimit.yaml", "- generic_key: {descriptor_key: account, descriptor_value: acme}", "- generic_key: {descriptor_key: account}"},
		"an unknown vhost match field": {"istio/ratelimit.yaml", "domainName: acme.example.com", "domain: acme.example.com"},
	} {
		raw, err := os.ReadFile(edit[0])
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(raw), edit[1]) {
			t.Fatalf("%s: %q is not in %s", name, edit[1], edit[0])
		}
		bad := strings.Replace(string(raw), edit[1], edit[2], 1)
		if err := checkIstio(new(istioConfig), []byte(bad)); err == nil {
			t.Errorf("%s passed", name)
		}
	}
}
