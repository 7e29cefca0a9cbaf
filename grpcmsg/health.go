package grpcmsg

import "google.golang.org/protobuf/encoding/protowire"

// Values of grpc.health.v1.HealthCheckResponse.ServingStatus.
const (
	HealthUnknown        int32 = 0
	HealthServing        int32 = 1
	HealthNotServing     int32 = 2
	HealthServiceUnknown int32 = 3 // Watch only
)

// Field numbers of grpc.health.v1.HealthCheckRequest and HealthCheckResponse.
const (
	healthService = 1 // HealthCheckRequest.service: string
	healthStatus  = 1 // HealthCheckResponse.status: ServingStatus
)

// DecodeHealthCheck reads a grpc.health.v1.HealthCheckRequest: the service
// asked about, aliasing msg, empty for the server as a whole. The error is
// a *FieldError.
func DecodeHealthCheck(msg []byte) (service []byte, err error) {
	var f field
	for b := msg; len(b) > 0; {
		if b, err = next(b, &f); err != nil {
			return nil, named(err, "HealthCheckRequest")
		}
		if f.is(healthService, protowire.BytesType) {
			if service, err = f.str("service"); err != nil {
				return nil, named(err, "HealthCheckRequest")
			}
		}
	}
	return service, nil
}

// AppendHealthCheckResponse appends a grpc.health.v1.HealthCheckResponse
// of status, one of the Health* values, to dst.
func AppendHealthCheckResponse(dst []byte, status int32) []byte {
	return appendVarint(dst, healthStatus, enum(status))
}
