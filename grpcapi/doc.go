// Package grpcapi serves Envoy's gRPC rate-limit service
// (envoy.service.ratelimit.v3.RateLimitService) and external authorizer
// (envoy.service.auth.v3.Authorization) over tollgated's data plane, with
// the gRPC health service and server reflection.
//
// Handlers run on ordinary goroutines and never touch a shard. Each
// decision is a forward-auth call (/v1/authz in the nginx shape) handed to
// a shard's thread through the shard's hand-over port (package handover),
// where the shard serves it as it serves that request from a socket. So a
// gRPC decision is the HTTP forward-auth decision — routes, rate and
// concurrency limits, funding waits, storage refusals and the durable
// acknowledgement (an admitted hit is answered only once its usage is on
// disk). When Config.MaxHandOver calls are already handed over a call is
// answered RESOURCE_EXHAUSTED at once; it never queues.
package grpcapi
