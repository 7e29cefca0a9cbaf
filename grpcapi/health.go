package grpcapi

import (
	"context"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// healthService is grpc.health.v1 read from the node, as /readyz is:
// SERVING while the data plane serves and its usage spool takes records,
// NOT_SERVING while it starts, drains, or cannot make usage durable. It is
// read when asked, so nothing runs while nobody asks; a Watch looks again
// every watchEvery and sends each change. A Watch ends when the server
// stops, after sending NOT_SERVING: a long-lived stream must not hold a
// graceful stop until its deadline.
type healthService struct {
	healthpb.UnimplementedHealthServer
	ready    func() bool
	draining <-chan struct{} // closed when the server stops: Watch streams end
}

const watchEvery = 250 * time.Millisecond

var healthServices = map[string]bool{"": true, rlsv3.RateLimitService_ServiceDesc.ServiceName: true,
	authv3.Authorization_ServiceDesc.ServiceName: true}

func (h healthService) status() healthpb.HealthCheckResponse_ServingStatus {
	if h.ready() {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}

func (h healthService) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if !healthServices[req.GetService()] {
		return nil, status.Errorf(codes.NotFound, "tollgated: no service %q", req.GetService())
	}
	return &healthpb.HealthCheckResponse{Status: h.status()}, nil
}

func (h healthService) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	if !healthServices[req.GetService()] {
		return stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVICE_UNKNOWN})
	}
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	last := healthpb.HealthCheckResponse_UNKNOWN
	for {
		if st := h.status(); st != last {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		select {
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		case <-h.draining:
			if last != healthpb.HealthCheckResponse_NOT_SERVING {
				return stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING})
			}
			return nil
		case <-t.C:
		}
	}
}
