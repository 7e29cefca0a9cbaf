package main

import (
	"io"
	"testing"
)

// TestAuthzKeyHeaderIsTheDaemons: where /v1/authz reads the key is set
// when tollgated starts (flag or TOLLGATED_AUTHZ_KEY_HEADER), Authorization
// by default, and never a header the exchange uses for something else.
func TestAuthzKeyHeaderIsTheDaemons(t *testing.T) {
	c, err := parseConfig(nil, noEnv, io.Discard)
	if err != nil || c.authz.keyHeader != "Authorization" {
		t.Fatalf("default: %q, %v", c.authz.keyHeader, err)
	}
	c, err = parseConfig([]string{"--authz-key-header", "X-Api-Key"}, noEnv, io.Discard)
	if err != nil || c.authz.keyHeader != "X-Api-Key" {
		t.Fatalf("flag: %q, %v", c.authz.keyHeader, err)
	}
	env := map[string]string{"TOLLGATED_AUTHZ_KEY_HEADER": "X-Key"}
	c, err = parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil || c.authz.keyHeader != "X-Key" {
		t.Fatalf("environment: %q, %v", c.authz.keyHeader, err)
	}
	for _, bad := range []string{"", "X Api Key", "X-Original-URI", "x-forwarded-uri", "Content-Length", "X-Tollgate-Account", "Cookie"} {
		if _, err := parseConfig([]string{"--authz-key-header", bad}, noEnv, io.Discard); err == nil {
			t.Errorf("--authz-key-header %q accepted", bad)
		}
	}
}

// TestGRPCListenerIsOffUnlessAsked: without --grpc-listen the daemon
// opens no gRPC listener; with it, the flags reach daemon.Config.
func TestGRPCListenerIsOffUnlessAsked(t *testing.T) {
	c, err := parseConfig(nil, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if g := c.grpc.daemon(); g.Enabled() {
		t.Fatalf("gRPC on by default: %+v", g)
	}
	c, err = parseConfig([]string{"--grpc-listen", ":8081", "--grpc-domain", "edge", "--grpc-account-entry", "tenant", "--grpc-max-held", "8"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := c.daemonConfig()
	if err != nil {
		t.Fatal(err)
	}
	if g := dc.GRPC; !g.Enabled() || g.Listen != ":8081" || g.Domain != "edge" || g.AccountEntry != "tenant" || g.MaxHeld != 8 {
		t.Fatalf("daemon gRPC config %+v", g)
	}
	if err := dc.Validate(); err != nil {
		t.Fatal(err)
	}
}
