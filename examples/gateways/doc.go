// Package gateways holds tested configurations that put tollgated in front
// of a service with a gateway's forward-auth feature: nginx (auth_request),
// Caddy (forward_auth), Traefik (ForwardAuth) and Envoy (ext_authz, HTTP
// mode). See docs/GATEWAYS.md.
//
// Its tests run the nginx and Caddy configurations under the real gateways
// (installed from Debian packages by scripts/install-gateways.sh) in front of
// a real tollgated and a recording upstream, all on loopback. Traefik and
// Envoy are not packaged for Debian: their configurations are checked
// against the keys their documented schemas require.
package gateways
