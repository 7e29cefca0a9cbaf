package daemon

import (
	"fmt"
	"time"

	"github.com/tollgated/tollgated/grpcapi"
	"github.com/tollgated/tollgated/shard"
)

// openGRPC starts the gRPC listener, if configured. It hands every decision
// to a shard through the shard's hand-over port, so it opens after the data
// plane; it closes before it (Close).
func (d *Daemon) openGRPC(secret []byte) error {
	if !d.cfg.GRPC.Enabled() {
		return nil
	}
	g := d.cfg.GRPC
	srv, err := grpcapi.Listen(grpcapi.Config{Listen: g.Listen, Ports: d.node.HandOverPorts(), Domain: g.Domain,
		AccountEntry: g.AccountEntry, KeyHeader: d.cfg.AuthzKeyHeader, Secret: secret, Binder: d.node.Plane(),
		Ready: d.serves, MaxHandOver: g.MaxHandOver, MaxConns: g.MaxConns, MaxStreams: g.MaxStreams, Stats: &d.grpcStats,
		MaxHeaderBytes: d.cfg.Transport.MaxHeaderBytes})
	if err != nil {
		return fmt.Errorf("opening the gRPC listener: %w", err)
	}
	d.grpc = srv
	if !loopbackOnly(srv.Addr()) {
		d.log.Warn().Str("grpc", srv.Addr()).Msg("the gRPC listener listens beyond loopback: whoever reaches it can bill any account a rate-limit descriptor names; bind it to 127.0.0.1 or allow only the gateways")
	}
	go func() {
		if err := srv.Serve(); err != nil {
			d.log.Error().Err(err).Msg("gRPC listener failed")
		}
	}()
	d.serving.Store(true)
	return nil
}

// serves is readiness as /readyz answers it: the data plane is open and
// not draining, and the usage spool takes records.
func (d *Daemon) serves() bool {
	return d.serving.Load() && d.storage.Load() == shard.StorageOK
}

// stopGRPC stops the gRPC listener first in the shutdown order: health
// turns NOT_SERVING, no call is accepted, and calls in flight end (their
// decisions wait on the data plane, which still serves) until deadline.
func (d *Daemon) stopGRPC(deadline time.Time) {
	d.serving.Store(false)
	if d.grpc != nil {
		d.grpc.Stop(deadline)
		d.grpc = nil
		d.log.Info().Msg("gRPC listener stopped")
	}
}

// GRPCAddr is the address the gRPC listener listens on, "" when off.
func (d *Daemon) GRPCAddr() string {
	if d.grpc == nil {
		return ""
	}
	return d.grpc.Addr()
}
