package daemon

import (
	"fmt"
	"net"

	"github.com/tollgated/tollgated/grpcapi"
	"github.com/tollgated/tollgated/httploop"
	"github.com/tollgated/tollgated/node"
	"github.com/tollgated/tollgated/shard"
)

// The gRPC services are served by the shards' loops, on an address each
// shard binds beside the data plane's (node.Config.GRPCListen): it opens
// with the data plane and drains with it.

// grpcListen is the gRPC address the node binds: loopback when no host is
// given; "" when the services are off.
func (g GRPC) grpcListen() (string, error) {
	if !g.Enabled() {
		return "", nil
	}
	host, port, err := net.SplitHostPort(g.Listen)
	if err != nil {
		return "", fmt.Errorf("grpc: listen address %q: %w", g.Listen, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// serveGRPC tells the bound node how its shards serve the gRPC address,
// once the plane the services bind accounts' keys through exists.
func (d *Daemon) serveGRPC(secret []byte) error {
	if !d.cfg.GRPC.Enabled() {
		return nil
	}
	g := d.cfg.GRPC
	sh, err := grpcapi.NewShared(g.services(d.cfg.AuthzKeyHeader, d.cfg.Transport.MaxHeaderBytes, secret, d.node.Plane(), d.serves, &d.grpcStats))
	if err != nil {
		return err
	}
	return d.node.ServeGRPC(node.GRPC{Shared: sh, MaxStreams: g.MaxStreams, MaxHeaderListBytes: maxGRPCHeaderList, MaxConns: g.MaxConns})
}

// maxGRPCHeaderList bounds a gRPC call's headers (SETTINGS_MAX_HEADER_LIST_SIZE):
// a call's own are a few hundred bytes; a CheckRequest carries the checked
// request's headers in its message, not here.
const maxGRPCHeaderList = 16 << 10

// services is the configuration of the gRPC services.
func (g GRPC) services(keyHeader string, maxHeaderBytes int, secret []byte, b grpcapi.Binder, ready func() bool, stats *grpcapi.Stats) grpcapi.Config {
	return grpcapi.Config{Domain: g.Domain, AccountEntry: g.AccountEntry, KeyHeader: keyHeader, Secret: secret,
		Binder: b, Ready: ready, MaxHeld: g.MaxHeld, MaxHeaderBytes: maxHeaderBytes,
		AnswerTimeout: int64(httploop.DefaultDeferTimeout), Stats: stats}
}

// openGRPC marks the gRPC services ready, once the data plane serves.
func (d *Daemon) openGRPC() {
	if !d.cfg.GRPC.Enabled() {
		return
	}
	if addr := d.node.GRPCAddr(); !loopbackOnly(addr) {
		d.log.Warn().Str("grpc", addr).Msg("the gRPC listener listens beyond loopback: whoever reaches it can bill any account a rate-limit descriptor names; bind it to 127.0.0.1 or allow only the gateways")
	}
	d.serving.Store(true)
}

// serves is readiness as /readyz answers it: the data plane is open and
// not draining, and the usage spool takes records.
func (d *Daemon) serves() bool {
	return d.serving.Load() && d.storage.Load() == shard.StorageOK
}

// stopGRPC is the first step of the shutdown order: health turns
// NOT_SERVING; the calls in flight end as the data plane drains.
func (d *Daemon) stopGRPC() {
	if d.serving.Swap(false) && d.cfg.GRPC.Enabled() {
		d.log.Info().Msg("gRPC services not serving: health is NOT_SERVING; calls in flight end as the data plane drains")
	}
}

// GRPCAddr is the address the gRPC services listen on, "" when off.
func (d *Daemon) GRPCAddr() string {
	if d.node == nil {
		return ""
	}
	return d.node.GRPCAddr()
}
