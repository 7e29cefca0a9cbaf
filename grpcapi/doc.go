// Package grpcapi serves Envoy's gRPC rate-limit service
// (envoy.service.ratelimit.v3.RateLimitService) and external authorizer
// (envoy.service.auth.v3.Authorization) over tollgated's data plane, with
// the gRPC health service and server reflection.
//
// Handlers run on ordinary goroutines and never touch a shard. Each
// decision is handed to a shard through the shard's own transport: a
// forward-auth call (/v1/authz) over a bounded pool of loopback
// connections to the data-plane listener. So a gRPC decision is the HTTP
// forward-auth decision by construction — routes, rate and concurrency
// limits, funding waits, storage refusals and the durable acknowledgement
// (an admitted hit is answered only once its usage is on disk) — and the
// shards' request path has nothing added to it. When every connection of
// the pool is busy a call is answered RESOURCE_EXHAUSTED at once; it never
// queues.
package grpcapi
