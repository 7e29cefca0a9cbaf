// Command grpcfloor is what grpc-go itself costs a rate-limit service: it
// answers envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit with
// OK from a handler that does nothing else, over grpc-go with the server
// options tollgated's --grpc-listen uses. bench/peers.sh measures it beside
// tollgated's and envoyproxy/ratelimit's gRPC paths under the same load
// (bench/grpcload): the CPU a call costs here is the floor for any service
// built on grpc-go, so ratelimit's CPU per call over this one is the most
// such a service could cut.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

type emptyService struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

// ShouldRateLimit allows every descriptor, with nothing looked up.
func (emptyService) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	out := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))}
	for i := range out.Statuses {
		out.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return out, nil
}

func main() {
	addr := flag.String("listen", "127.0.0.1:18190", "loopback address to listen on")
	workers := flag.Uint("workers", 64, "stream workers, as the grpc-go service tollgated once ran kept")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpcfloor:", err)
		os.Exit(1)
	}
	s := grpc.NewServer(grpc.MaxRecvMsgSize(64<<10), grpc.MaxConcurrentStreams(256),
		grpc.MaxHeaderListSize(16<<10), grpc.NumStreamWorkers(uint32(*workers)))
	rlsv3.RegisterRateLimitServiceServer(s, emptyService{})
	if err := s.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "grpcfloor:", err)
		os.Exit(1)
	}
}
