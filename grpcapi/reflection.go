package grpcapi

import (
	"context"
	"errors"
	"io"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
)

// Server reflection (grpc.reflection.v1 and v1alpha, whose messages are
// the same on the wire) is how grpcurl and other tools learn the services'
// types. It is rare, not on any decision's path, and answered on the
// shard's thread with the reflection service grpc-go ships, run over one
// request at a time: each message of a reflection stream is answered with
// one message, and files a previous answer on the stream already carried
// are sent again (a client keeps the first copy).

// reflector answers reflection requests.
type reflector struct {
	srv reflectionpb.ServerReflectionServer
}

func newReflector() (*reflector, error) {
	return &reflector{srv: reflection.NewServerV1(reflection.ServerOptions{Services: servedServices{}})}, nil
}

// servedServices lists the services for reflection's list_services.
type servedServices struct{}

func (servedServices) GetServiceInfo() map[string]grpc.ServiceInfo {
	return map[string]grpc.ServiceInfo{
		rlsv3.RateLimitService_ServiceDesc.ServiceName: {},
		authv3.Authorization_ServiceDesc.ServiceName:   {},
		healthpb.Health_ServiceDesc.ServiceName:        {},
		"grpc.reflection.v1.ServerReflection":          {},
		"grpc.reflection.v1alpha.ServerReflection":     {},
	}
}

// maxReflectionAnswer bounds a reflection answer: the services' files and
// their dependencies are a few hundred kilobytes at most.
const maxReflectionAnswer = 4 << 20

// answer answers one reflection request message.
func (r *reflector) answer(msg []byte) ([]byte, error) {
	req := new(reflectionpb.ServerReflectionRequest)
	if err := proto.Unmarshal(msg, req); err != nil {
		return nil, errors.New("tollgated: the reflection request is not a ServerReflectionRequest")
	}
	st := &oneRequest{req: req}
	if err := r.srv.ServerReflectionInfo(st); err != nil {
		return nil, err
	}
	if st.resp == nil {
		return nil, errors.New("tollgated: the reflection request got no answer")
	}
	b, err := proto.Marshal(st.resp)
	if err == nil && len(b) > maxReflectionAnswer {
		err = errors.New("tollgated: the reflection answer is too large")
	}
	return b, err
}

// oneRequest is a reflection stream of one request: it gives the request,
// then the end of the stream, and keeps the one answer.
type oneRequest struct {
	grpc.ServerStream // never called: the reflection service only receives and sends
	req               *reflectionpb.ServerReflectionRequest
	resp              *reflectionpb.ServerReflectionResponse
}

func (s *oneRequest) Recv() (*reflectionpb.ServerReflectionRequest, error) {
	if s.req == nil {
		return nil, io.EOF
	}
	r := s.req
	s.req = nil
	return r, nil
}

func (s *oneRequest) Send(r *reflectionpb.ServerReflectionResponse) error {
	if s.resp != nil {
		return errors.New("tollgated: a second reflection answer to one request")
	}
	s.resp = r
	return nil
}

func (s *oneRequest) Context() context.Context { return context.Background() }
