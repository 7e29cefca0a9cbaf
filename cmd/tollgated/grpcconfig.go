package main

import (
	"flag"

	"github.com/tollgated/tollgated/daemon"
)

// grpcConfig is the Envoy-facing gRPC listener: the rate-limit service and
// ext_authz over gRPC. Off unless --grpc-listen is given.
type grpcConfig struct {
	listen, domain, accountEntry string
	maxHeld, maxConns            int
	maxStreams                   uint
}

func (g *grpcConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&g.listen, "grpc-listen", "", "gRPC listen address for Envoy's rate-limit service and ext_authz (loopback when no host is given, such as :8081); empty: off. Whoever reaches it can bill any account a rate-limit descriptor names: keep it on loopback or a network only gateways reach")
	fs.StringVar(&g.domain, "grpc-domain", "tollgated", "the rate-limit domain the gRPC rate-limit service answers")
	fs.StringVar(&g.accountEntry, "grpc-account-entry", "account", "the rate-limit descriptor entry whose value is the account id")
	fs.IntVar(&g.maxHeld, "grpc-max-held", 1024, "gRPC calls each shard may hold at once, waiting for the disk, funding or an account's key (at most 65536); beyond them a call is answered RESOURCE_EXHAUSTED")
	fs.IntVar(&g.maxConns, "grpc-max-conns", 1024, "gRPC connections accepted at once")
	fs.UintVar(&g.maxStreams, "grpc-max-streams", 256, "concurrent gRPC calls per connection")
}

func (g grpcConfig) daemon() daemon.GRPC {
	return daemon.GRPC{Listen: g.listen, Domain: g.domain, AccountEntry: g.accountEntry,
		MaxHeld: g.maxHeld, MaxConns: g.maxConns, MaxStreams: uint32(min(g.maxStreams, 1<<31))}
}
