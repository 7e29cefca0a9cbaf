// Package gateways holds tested configurations that put tollgated in front
// of a service with a gateway's forward-auth feature: nginx (auth_request),
// Caddy (forward_auth), Traefik (ForwardAuth) and Envoy (ext_authz, HTTP
// and gRPC; the rate limit filter over gRPC), and Istio's ingress gateway.
// See docs/GATEWAYS.md.
//
// Its tests run the nginx and Caddy configurations under the real gateways
// (installed from Debian packages by scripts/install-gateways.sh) in front of
// a real tollgated and a recording upstream, all on loopback. Traefik and
// Envoy are not packaged for Debian, and Istio needs a Kubernetes cluster:
// their configurations are checked against the keys their documented
// schemas require, and Envoy's and Istio's against their own protos.
package gateways
