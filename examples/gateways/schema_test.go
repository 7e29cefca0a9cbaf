package gateways

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// Traefik and Envoy are not packaged for Debian, so their example
// configurations cannot run here. These tests check them against the keys
// their documented schemas define and require (Traefik's ForwardAuth
// reference; Envoy's v3 bootstrap, http_connection_manager, ext_authz,
// header_mutation and router protos), and against what tollgated needs: the
// forward-auth path, the headers forwarded upstream and to the client.

type node = map[string]any

// checker collects the problems found in one configuration.
type checker struct{ problems []string }

func (c *checker) fail(path, format string, args ...any) {
	c.problems = append(c.problems, path+": "+fmt.Sprintf(format, args...))
}

// object returns v as an object with only allowed keys and every required
// one (a required key is written with a trailing '!').
func (c *checker) object(path string, v any, keys ...string) node {
	m, ok := v.(node)
	if !ok {
		c.fail(path, "must be an object, is %T", v)
		return node{}
	}
	allowed := map[string]bool{}
	for _, k := range keys {
		name, required := strings.CutSuffix(k, "!")
		allowed[name] = true
		if _, ok := m[name]; required && !ok {
			c.fail(path, "missing required key %q", name)
		}
	}
	for k := range m {
		if !allowed[k] {
			c.fail(path, "unknown key %q", k)
		}
	}
	return m
}

// named returns v as an object whose keys are names the user chose.
func (c *checker) named(path string, v any) node {
	m, ok := v.(node)
	if !ok || len(m) == 0 {
		c.fail(path, "must be a non-empty object")
		return node{}
	}
	return m
}

func (c *checker) list(path string, v any) []any {
	l, ok := v.([]any)
	if !ok || len(l) == 0 {
		c.fail(path, "must be a non-empty list")
	}
	return l
}

func (c *checker) str(path string, v any) string {
	s, ok := v.(string)
	if !ok || s == "" {
		c.fail(path, "must be a non-empty string")
	}
	return s
}

func (c *checker) names(path string, v any) []string {
	var out []string
	for i, e := range c.list(path, v) {
		out = append(out, c.str(fmt.Sprintf("%s[%d]", path, i), e))
	}
	return out
}

func load(t *testing.T, file string) node {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var m node
	if err := yaml.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return m
}

// tollgatedHeaders are the headers a 2xx from /v1/authz carries upstream.
var tollgatedHeaders = []string{"X-Tollgate-Account", "X-Tollgate-Request-Id", "X-Tollgate-Units", "X-Tollgate-Reservation"}

// checkTraefik checks Traefik's static and dynamic configuration against
// the file provider's schema and the ForwardAuth middleware's options.
func checkTraefik(static, dynamic node) []string {
	c := &checker{}
	st := c.object("static", static, "entryPoints!", "providers!", "api", "log", "accessLog", "ping", "global", "serversTransport")
	entryPoints := map[string]bool{}
	for name, ep := range c.named("entryPoints", st["entryPoints"]) {
		e := c.object("entryPoints."+name, ep, "address!", "http", "transport", "forwardedHeaders", "proxyProtocol", "asDefault")
		entryPoints[name] = true
		if !strings.HasPrefix(c.str("entryPoints."+name+".address", e["address"]), "127.0.0.1:") {
			c.fail("entryPoints."+name+".address", "the example listens on loopback")
		}
	}
	file := c.object("providers.file", c.object("providers", st["providers"], "file!")["file"], "filename", "directory", "watch")
	if (file["filename"] == nil) == (file["directory"] == nil) {
		c.fail("providers.file", "needs exactly one of filename and directory")
	}

	http := c.object("http", c.object("dynamic", dynamic, "http!", "tcp", "udp", "tls")["http"],
		"routers!", "middlewares!", "services!", "serversTransports")
	middlewares := c.named("http.middlewares", http["middlewares"])
	services := c.named("http.services", http["services"])
	for name, r := range c.named("http.routers", http["routers"]) {
		p := "http.routers." + name
		router := c.object(p, r, "rule!", "service!", "entryPoints", "middlewares", "priority", "tls", "observability", "ruleSyntax")
		c.str(p+".rule", router["rule"])
		if s := c.str(p+".service", router["service"]); services[s] == nil {
			c.fail(p+".service", "names no service %q", s)
		}
		for _, ep := range c.names(p+".entryPoints", router["entryPoints"]) {
			if !entryPoints[ep] {
				c.fail(p+".entryPoints", "names no entry point %q", ep)
			}
		}
		forwardAuth := false
		for _, mw := range c.names(p+".middlewares", router["middlewares"]) {
			if middlewares[mw] == nil {
				c.fail(p+".middlewares", "names no middleware %q", mw)
			} else if m, ok := middlewares[mw].(node); ok && m["forwardAuth"] != nil {
				forwardAuth = true
			}
		}
		if !forwardAuth {
			c.fail(p, "no ForwardAuth middleware guards this router")
		}
	}
	for name, mw := range middlewares {
		p := "http.middlewares." + name
		fa := c.object(p+".forwardAuth", c.object(p, mw, "forwardAuth!")["forwardAuth"],
			"address!", "tls", "trustForwardHeader", "authResponseHeaders", "authResponseHeadersRegex",
			"authRequestHeaders", "addAuthCookiesToResponse", "forwardBody", "maxBodySize", "headerField",
			"preserveLocationHeader", "preserveRequestMethod", "maxResponseBodySize")
		if u, err := url.Parse(c.str(p+".forwardAuth.address", fa["address"])); err != nil || u.Scheme != "http" || u.Path != "/v1/authz" {
			c.fail(p+".forwardAuth.address", "must be tollgated's http://…/v1/authz")
		}
		forwarded := c.names(p+".forwardAuth.authResponseHeaders", fa["authResponseHeaders"])
		for _, h := range tollgatedHeaders {
			if !slices.Contains(forwarded, h) {
				c.fail(p+".forwardAuth.authResponseHeaders", "does not forward %s upstream", h)
			}
		}
		if fa["trustForwardHeader"] == true {
			c.fail(p+".forwardAuth.trustForwardHeader", "would let a client choose X-Forwarded-Uri")
		}
		// Without authRequestHeaders every client header reaches
		// tollgated: a client's own X-Original-URI or count header.
		passed := c.names(p+".forwardAuth.authRequestHeaders", fa["authRequestHeaders"])
		checkPassedHeaders(c, p+".forwardAuth.authRequestHeaders", passed)
	}
	for name, s := range services {
		p := "http.services." + name
		lb := c.object(p+".loadBalancer", c.object(p, s, "loadBalancer!")["loadBalancer"],
			"servers!", "sticky", "healthCheck", "passHostHeader", "responseForwarding", "serversTransport", "strategy")
		for i, srv := range c.list(p+".loadBalancer.servers", lb["servers"]) {
			sp := fmt.Sprintf("%s.loadBalancer.servers[%d]", p, i)
			c.str(sp+".url", c.object(sp, srv, "url!", "weight", "preservePath")["url"])
		}
	}
	return c.problems
}

// Envoy's type URLs for the filters the example uses.
const (
	typeHCM            = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	typeExtAuthz       = "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz"
	typeRouter         = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
	typeHeaderMutation = "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation"
)

// checkEnvoy checks an Envoy bootstrap against the v3 schema of the parts
// the example uses.
func checkEnvoy(boot node) []string {
	c := &checker{}
	sr := c.object("static_resources", c.object("bootstrap", boot, "static_resources!", "admin", "node")["static_resources"], "listeners!", "clusters!")
	clusters := map[string]bool{}
	for i, cl := range c.list("clusters", sr["clusters"]) {
		p := fmt.Sprintf("clusters[%d]", i)
		m := c.object(p, cl, "name!", "type!", "connect_timeout!", "load_assignment!", "lb_policy", "typed_extension_protocol_options")
		name := c.str(p+".name", m["name"])
		clusters[name] = true
		la := c.object(p+".load_assignment", m["load_assignment"], "cluster_name!", "endpoints!")
		if la["cluster_name"] != name {
			c.fail(p+".load_assignment.cluster_name", "must be the cluster's name %q", name)
		}
		for j, ep := range c.list(p+".load_assignment.endpoints", la["endpoints"]) {
			ep := c.object(fmt.Sprintf("%s.endpoints[%d]", p, j), ep, "lb_endpoints!", "locality", "priority")
			for k, lbe := range c.list(p+".lb_endpoints", ep["lb_endpoints"]) {
				e := c.object(fmt.Sprintf("%s.lb_endpoints[%d].endpoint", p, k), c.object(p+".lb_endpoint", lbe, "endpoint!")["endpoint"], "address!")
				checkSocketAddress(c, p+".endpoint.address", e["address"])
			}
		}
	}
	for i, l := range c.list("listeners", sr["listeners"]) {
		p := fmt.Sprintf("listeners[%d]", i)
		m := c.object(p, l, "name!", "address!", "filter_chains!")
		checkSocketAddress(c, p+".address", m["address"])
		for j, fc := range c.list(p+".filter_chains", m["filter_chains"]) {
			fp := fmt.Sprintf("%s.filter_chains[%d]", p, j)
			for k, f := range c.list(fp+".filters", c.object(fp, fc, "filters!", "filter_chain_match", "transport_socket")["filters"]) {
				f := c.object(fmt.Sprintf("%s.filters[%d]", fp, k), f, "name!", "typed_config!")
				if f["name"] != "envoy.filters.network.http_connection_manager" {
					c.fail(fp, "the example's only network filter is the HTTP connection manager")
					continue
				}
				checkHCM(c, fp+".http_connection_manager", f["typed_config"], clusters)
			}
		}
	}
	return c.problems
}

func checkSocketAddress(c *checker, path string, v any) {
	sa := c.object(path+".socket_address", c.object(path, v, "socket_address!")["socket_address"], "address!", "port_value!", "protocol")
	if sa["address"] != "127.0.0.1" {
		c.fail(path, "the example uses loopback addresses")
	}
	if p, ok := sa["port_value"].(int); !ok || p <= 0 || p > 65535 {
		c.fail(path+".port_value", "must be a port number")
	}
}

func checkHCM(c *checker, path string, v any, clusters map[string]bool) {
	hcm := c.object(path, v, "@type!", "stat_prefix!", "route_config!", "http_filters!", "codec_type", "access_log")
	if hcm["@type"] != typeHCM {
		c.fail(path+".@type", "must be %s", typeHCM)
	}
	rc := c.object(path+".route_config", hcm["route_config"], "name", "virtual_hosts!")
	for i, vh := range c.list(path+".virtual_hosts", rc["virtual_hosts"]) {
		vp := fmt.Sprintf("%s.virtual_hosts[%d]", path, i)
		vh := c.object(vp, vh, "name!", "domains!", "routes!")
		c.names(vp+".domains", vh["domains"])
		for j, r := range c.list(vp+".routes", vh["routes"]) {
			rp := fmt.Sprintf("%s.routes[%d]", vp, j)
			r := c.object(rp, r, "match!", "route!")
			c.object(rp+".match", r["match"], "prefix", "path", "safe_regex")
			if cl := c.object(rp+".route", r["route"], "cluster!", "timeout")["cluster"]; !clusters[c.str(rp+".route.cluster", cl)] {
				c.fail(rp+".route.cluster", "names no cluster %v", cl)
			}
		}
	}
	filters := c.list(path+".http_filters", hcm["http_filters"])
	sawAuthz, sawMutation := false, false
	for i, f := range filters {
		fp := fmt.Sprintf("%s.http_filters[%d]", path, i)
		f := c.object(fp, f, "name!", "typed_config!")
		tc := c.object(fp+".typed_config", f["typed_config"], "@type!", "mutations", "failure_mode_allow",
			"status_on_error", "http_service", "grpc_service", "transport_api_version", "with_request_body",
			"clear_route_cache", "allowed_headers", "disallowed_headers", "include_peer_certificate", "stat_prefix")
		switch f["name"] {
		case "envoy.filters.http.header_mutation":
			if tc["@type"] != typeHeaderMutation || sawAuthz {
				c.fail(fp, "header_mutation (%s) must come before ext_authz", typeHeaderMutation)
			}
			m := c.object(fp+".mutations", tc["mutations"], "request_mutations!", "response_mutations")
			var removed []string
			for j, rm := range c.list(fp+".request_mutations", m["request_mutations"]) {
				removed = append(removed, c.str(fmt.Sprintf("%s.request_mutations[%d].remove", fp, j),
					c.object(fp+".request_mutation", rm, "remove", "append")["remove"]))
			}
			for _, h := range tollgatedHeaders {
				if !slices.Contains(removed, strings.ToLower(h)) {
					c.fail(fp, "does not drop a client's %s", h)
				}
			}
			sawMutation = true
		case "envoy.filters.http.ext_authz":
			if tc["@type"] != typeExtAuthz {
				c.fail(fp+".@type", "must be %s", typeExtAuthz)
			}
			checkExtAuthz(c, fp, tc, clusters)
			sawAuthz = true
		case "envoy.filters.http.router":
			if tc["@type"] != typeRouter || i != len(filters)-1 {
				c.fail(fp, "the router (%s) must be the last HTTP filter", typeRouter)
			}
		default:
			c.fail(fp+".name", "unexpected filter %v", f["name"])
		}
	}
	if !sawAuthz || !sawMutation {
		c.fail(path+".http_filters", "needs header_mutation then ext_authz")
	}
}

func checkExtAuthz(c *checker, path string, tc node, clusters map[string]bool) {
	if tc["failure_mode_allow"] != false {
		c.fail(path+".failure_mode_allow", "must be false: an unreachable tollgated must not admit everything")
	}
	if tc["grpc_service"] != nil || tc["http_service"] == nil {
		c.fail(path, "tollgated's route is an HTTP service (http_service, not grpc_service)")
	}
	c.object(path+".status_on_error", tc["status_on_error"], "code!")
	hs := c.object(path+".http_service", tc["http_service"], "server_uri!", "path_prefix", "authorization_request",
		"authorization_response", "retry_policy")
	uri := c.object(path+".server_uri", hs["server_uri"], "uri!", "cluster!", "timeout!")
	if !clusters[c.str(path+".server_uri.cluster", uri["cluster"])] {
		c.fail(path+".server_uri.cluster", "names no cluster %v", uri["cluster"])
	}
	if d, err := time.ParseDuration(fmt.Sprint(uri["timeout"])); err != nil || d < minAuthzTimeout {
		c.fail(path+".server_uri.timeout", "must be at least %v: tollgated's funding wait (200 ms) and durable write", minAuthzTimeout)
	}
	var passed []string
	if tc["allowed_headers"] != nil {
		for i, pat := range c.list(path+".allowed_headers.patterns", c.object(path+".allowed_headers", tc["allowed_headers"], "patterns!")["patterns"]) {
			m := c.object(fmt.Sprintf("%s.allowed_headers.patterns[%d]", path, i), pat, "exact", "prefix", "suffix", "contains", "safe_regex", "ignore_case")
			if s, ok := m["exact"].(string); ok {
				passed = append(passed, s)
			} else {
				c.fail(path+".allowed_headers", "name headers exactly: a pattern could pass a client's X-Original-URI")
			}
		}
	}
	checkPassedHeaders(c, path+".allowed_headers", append(passed, "authorization"))
	if hs["path_prefix"] != "/v1/authz" {
		c.fail(path+".path_prefix", "must be /v1/authz: tollgated reads the original path after it")
	}
	resp := c.object(path+".authorization_response", hs["authorization_response"], "allowed_upstream_headers!",
		"allowed_upstream_headers_to_append", "allowed_client_headers", "allowed_client_headers_on_success",
		"dynamic_metadata_from_headers")
	exact := func(p string, v any) []string {
		var out []string
		for i, pat := range c.list(p+".patterns", c.object(p, v, "patterns!")["patterns"]) {
			m := c.object(fmt.Sprintf("%s.patterns[%d]", p, i), pat, "exact", "prefix", "suffix", "contains", "safe_regex", "ignore_case")
			if s, ok := m["exact"].(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	upstream := exact(path+".allowed_upstream_headers", resp["allowed_upstream_headers"])
	for _, h := range tollgatedHeaders {
		if !slices.Contains(upstream, strings.ToLower(h)) {
			c.fail(path+".allowed_upstream_headers", "does not forward %s upstream", h)
		}
	}
	if resp["allowed_client_headers"] != nil {
		client := exact(path+".allowed_client_headers", resp["allowed_client_headers"])
		for _, h := range []string{"content-type", "retry-after", "ratelimit", "ratelimit-policy"} {
			if !slices.Contains(client, h) {
				c.fail(path+".allowed_client_headers", "does not pass %s to the client", h)
			}
		}
	}
	if resp["allowed_client_headers_on_success"] != nil {
		client := exact(path+".allowed_client_headers_on_success", resp["allowed_client_headers_on_success"])
		for _, h := range []string{"ratelimit", "ratelimit-policy"} {
			if !slices.Contains(client, h) {
				c.fail(path+".allowed_client_headers_on_success", "does not pass %s to the client", h)
			}
		}
	}
}

// minAuthzTimeout is the least time a gateway should wait for tollgated:
// the default funding wait (200 ms) plus the durable write, rounded up.
const minAuthzTimeout = time.Second

// checkPassedHeaders checks the client headers a gateway passes to
// tollgated: the credential and the method overrides (so that tollgated
// sees what the service will), and none of the headers tollgated trusts
// only from the gateway.
func checkPassedHeaders(c *checker, path string, passed []string) {
	has := func(h string) bool {
		return slices.ContainsFunc(passed, func(p string) bool { return strings.EqualFold(p, h) })
	}
	for _, h := range []string{"Authorization", "X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"} {
		if !has(h) {
			c.fail(path, "does not pass %s to tollgated", h)
		}
	}
	for _, h := range []string{"X-Original-Method", "X-Original-URI", "X-Forwarded-Method", "X-Forwarded-Uri", "X-Content-Length"} {
		if has(h) {
			c.fail(path, "passes a client's %s to tollgated", h)
		}
	}
}

func TestTraefikConfigMatchesItsSchema(t *testing.T) {
	if p := checkTraefik(load(t, "traefik/traefik.yml"), load(t, "traefik/dynamic.yml")); len(p) > 0 {
		t.Fatalf("traefik configuration:\n%s", strings.Join(p, "\n"))
	}
}

func TestEnvoyConfigMatchesItsSchema(t *testing.T) {
	if p := checkEnvoy(load(t, "envoy/envoy.yaml")); len(p) > 0 {
		t.Fatalf("envoy configuration:\n%s", strings.Join(p, "\n"))
	}
}

// TestSchemaChecksCatchMistakes: each check finds a plausible mistake made
// to the example, so the two tests above can fail.
func TestSchemaChecksCatchMistakes(t *testing.T) {
	traefik := []struct {
		name string
		edit func(static, dynamic node)
	}{
		{"misspelt option", func(_, d node) { fa(d)["authResponseHeader"] = []any{"X-Tollgate-Account"} }},
		{"no address", func(_, d node) { delete(fa(d), "address") }},
		{"wrong path", func(_, d node) { fa(d)["address"] = "http://127.0.0.1:8080/v1/check" }},
		{"reservation not forwarded", func(_, d node) { fa(d)["authResponseHeaders"] = []any{"X-Tollgate-Account"} }},
		{"trusted forward headers", func(_, d node) { fa(d)["trustForwardHeader"] = true }},
		{"every client header passed", func(_, d node) { delete(fa(d), "authRequestHeaders") }},
		{"a client's count header passed", func(_, d node) {
			fa(d)["authRequestHeaders"] = append(fa(d)["authRequestHeaders"].([]any), "X-Content-Length")
		}},
		{"overrides not passed", func(_, d node) { fa(d)["authRequestHeaders"] = []any{"Authorization"} }},
		{"unknown service", func(_, d node) { router(d)["service"] = "nope" }},
		{"unguarded router", func(_, d node) { delete(router(d), "middlewares") }},
		{"unknown entry point", func(_, d node) { router(d)["entryPoints"] = []any{"websecure"} }},
	}
	for _, c := range traefik {
		s, d := load(t, "traefik/traefik.yml"), load(t, "traefik/dynamic.yml")
		c.edit(s, d)
		if len(checkTraefik(s, d)) == 0 {
			t.Errorf("traefik: %s not found", c.name)
		}
	}
	envoy := []struct {
		name string
		edit func(authz node)
	}{
		{"no path prefix", func(a node) { delete(a["http_service"].(node), "path_prefix") }},
		{"fail open", func(a node) { a["failure_mode_allow"] = true }},
		{"misspelt option", func(a node) { a["http_servce"] = a["http_service"] }},
		{"no timeout", func(a node) { delete(a["http_service"].(node)["server_uri"].(node), "timeout") }},
		{"timeout below the funding wait", func(a node) { a["http_service"].(node)["server_uri"].(node)["timeout"] = "0.25s" }},
		{"overrides not passed", func(a node) { delete(a, "allowed_headers") }},
		{"a client's original URI passed", func(a node) {
			p := a["allowed_headers"].(node)
			p["patterns"] = append(p["patterns"].([]any), node{"exact": "x-original-uri"})
		}},
		{"unknown cluster", func(a node) { a["http_service"].(node)["server_uri"].(node)["cluster"] = "nope" }},
		{"headers not forwarded", func(a node) {
			a["http_service"].(node)["authorization_response"].(node)["allowed_upstream_headers"] = node{"patterns": []any{node{"exact": "x-tollgate-account"}}}
		}},
	}
	for _, c := range envoy {
		b := load(t, "envoy/envoy.yaml")
		c.edit(envoyFilter(b, "envoy.filters.http.ext_authz"))
		if len(checkEnvoy(b)) == 0 {
			t.Errorf("envoy: %s not found", c.name)
		}
	}
	b := load(t, "envoy/envoy.yaml")
	hcm := envoyHCM(b)
	filters := hcm["http_filters"].([]any)
	hcm["http_filters"] = []any{filters[1], filters[0], filters[2]} // ext_authz before header_mutation
	if len(checkEnvoy(b)) == 0 {
		t.Error("envoy: client headers dropped after ext_authz not found")
	}
}

func fa(dynamic node) node {
	return dynamic["http"].(node)["middlewares"].(node)["tollgated"].(node)["forwardAuth"].(node)
}

func router(dynamic node) node { return dynamic["http"].(node)["routers"].(node)["app"].(node) }

func envoyHCM(boot node) node {
	l := boot["static_resources"].(node)["listeners"].([]any)[0].(node)
	f := l["filter_chains"].([]any)[0].(node)["filters"].([]any)[0].(node)
	return f["typed_config"].(node)
}

func envoyFilter(boot node, name string) node {
	for _, f := range envoyHCM(boot)["http_filters"].([]any) {
		if f.(node)["name"] == name {
			return f.(node)["typed_config"].(node)
		}
	}
	return nil
}

// TestExamplePolicyDefaultIsNotCheaperThanItsRules: a request the rules
// miss (a path the service routes in a way no rule foresaw) must never be
// cheaper than a route it may really be, so the example's default costs at
// least what its costliest rule can.
func TestExamplePolicyDefaultIsNotCheaperThanItsRules(t *testing.T) {
	raw, err := os.ReadFile("policy.json")
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Operations map[string]struct{ Weight uint64 }
		Routes     struct {
			Rules []struct {
				Path, Op string
				Count    uint64
				Deny     bool
			}
			Default *struct {
				Op    string
				Count uint64
			}
		}
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	if p.Routes.Default == nil {
		return // unmatched requests are refused: nothing to undercut
	}
	def := p.Operations[p.Routes.Default.Op].Weight * p.Routes.Default.Count
	for _, r := range p.Routes.Rules {
		if cost := p.Operations[r.Op].Weight * r.Count; !r.Deny && cost > def {
			t.Errorf("the default costs %d, less than %s's %d", def, r.Path, cost)
		}
	}
}
