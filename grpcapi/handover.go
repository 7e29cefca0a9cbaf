package grpcapi

import (
	"errors"
	"net"
	"time"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// answerWait bounds how long a hand-over waits for the shard's answer: the
// shard itself answers a parked request 504 after five seconds, so this
// only ends a call whose shard stopped answering at all.
const answerWait = 6 * time.Second

// maxAnswerBytes bounds a shard's answer as read here: forward-auth
// answers are a problem document at most.
const maxAnswerBytes = 16 << 10

// handover carries forward-auth calls to the data plane over at most
// maxConns loopback connections; a call that finds them all busy is
// refused, not queued.
type handover struct {
	client *fasthttp.HostClient
	host   string
}

func newHandover(dataPlane string, maxConns int) (*handover, error) {
	addr, err := loopbackOf(dataPlane)
	if err != nil {
		return nil, err
	}
	return &handover{host: addr, client: &fasthttp.HostClient{
		Addr:                addr,
		MaxConns:            maxConns,
		MaxConnWaitTimeout:  0, // a full pool answers ErrNoFreeConns at once
		ReadTimeout:         answerWait,
		WriteTimeout:        time.Second,
		MaxResponseBodySize: maxAnswerBytes,
		MaxIdleConnDuration: 30 * time.Second,
		// The answer decides whether work runs and what it costs: a
		// retried forward-auth call could bill twice.
		RetryIfErr: func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
	}}, nil
}

// loopbackOf is the address a process on this host reaches a listener on:
// a wildcard host (all interfaces) is reached on loopback.
func loopbackOf(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	ip := net.ParseIP(host)
	switch {
	case host == "" || (ip != nil && ip.IsUnspecified() && ip.To4() != nil):
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return net.JoinHostPort(host, port), nil
}

// exchange sends req and fills resp, or says why the shard gave no answer
// as a gRPC status.
func (h *handover) exchange(req *fasthttp.Request, resp *fasthttp.Response) error {
	req.SetHost(h.host)
	err := h.client.DoTimeout(req, resp, answerWait)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return status.Error(codes.ResourceExhausted, "tollgated: every hand-over connection to the data plane is busy; retry")
	case errors.Is(err, fasthttp.ErrTimeout):
		return status.Error(codes.Unavailable, "tollgated: the data plane did not answer in time; the call's outcome is unknown (it may have been billed)")
	default:
		return status.Errorf(codes.Unavailable, "tollgated: the data plane cannot be reached: %v", err)
	}
}

func (h *handover) close() { h.client.CloseIdleConnections() }
