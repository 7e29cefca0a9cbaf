//go:build linux

package httploop

import (
	"cmp"
	"errors"
	"fmt"
	"time"
)

// Config bounds a Loop. The zero value of every field means its default.
type Config struct {
	// MaxHeaderBytes bounds a request head (request line, fields and the
	// blank line). A longer head is answered 431. Default 8 KiB.
	MaxHeaderBytes int

	// MaxBodyBytes bounds a request body. A larger Content-Length is
	// answered 413 as soon as the head arrives, before the body is read.
	// Default 1 MiB.
	MaxBodyBytes int

	// MaxConns bounds the connections this loop holds open. Connections
	// accepted beyond it are closed at once and counted as Rejected.
	// Default 10,000.
	MaxConns int

	// MaxOutput is how much response output may wait for the socket before
	// the loop stops reading and dispatching that connection's requests. A
	// client that pipelines without reading thus holds at most MaxOutput
	// plus one response in memory. Default 64 KiB.
	MaxOutput int

	// ReadBufferSize is the size of the pooled input buffers; requests whose
	// head and body do not fit get a buffer of their own for as long as they
	// are being read. It is raised to MaxHeaderBytes if smaller. Default 16 KiB.
	ReadBufferSize int

	// IdleTimeout closes a connection that has no request in progress and
	// nothing to write for this long. Default 60 s.
	IdleTimeout time.Duration

	// HeaderTimeout is how long a request may take from its first byte to
	// the end of its head, and BodyTimeout to the end of its body. A request
	// that misses either is answered 408 and its connection closed; this is
	// what defeats slowloris. Defaults 10 s and 30 s.
	HeaderTimeout time.Duration
	BodyTimeout   time.Duration

	// WriteTimeout closes a connection whose pending output has made no
	// progress for this long: a client that stopped reading. Default 30 s.
	WriteTimeout time.Duration

	// DeferTimeout is how long a deferred request may wait for Complete
	// before the loop answers 504 itself. Default 5 s.
	DeferTimeout time.Duration

	// Tick is the longest the loop sleeps in epoll_wait, so OnTick runs at
	// least this often, and the granularity of every timeout above: each
	// connection's deadlines are looked at about once per Tick. Default 100 ms.
	Tick time.Duration

	// IdleTick is how long the loop sleeps instead of Tick when the last
	// wait brought nothing and Quiet says the handler has nothing due
	// sooner: every timeout above counts in seconds, so an idle loop need
	// not wake ten times a second (each wake-up also keeps the Go
	// scheduler's monitor awake). Default 1 s; it never shortens Tick.
	IdleTick time.Duration
	// Quiet, when set, reports whether the handler has nothing that needs
	// the loop sooner than IdleTick (no deadline of its own coming).
	Quiet func() bool

	// Holding, when set, reports whether the handler holds answers of its
	// own, beside the loop's connections (the gRPC service's held calls):
	// a drain then keeps the loop running, until its deadline, while it
	// does.
	Holding func() bool

	// OnDrain, when set, runs on the loop thread once, when the loop
	// starts draining: the handler ends what would otherwise hold the
	// drain to its deadline (long-lived gRPC streams).
	OnDrain func()

	// Wake, when set, is polled with the connections; OnWake runs on the loop
	// thread whenever it rang or holds messages. *ring.Doorbell satisfies
	// Waker; WakeFD adapts a bare eventfd.
	Wake   Waker
	OnWake func()

	// OnTick, when set, runs once per loop iteration with that iteration's
	// clock reading (Unix nanoseconds), the same one handlers see as Ctx.Now.
	OnTick func(now int64)

	// BeforeBlock, when set, runs on the loop thread when the loop finds
	// nothing ready and is about to block in epoll_wait: the moment to hand
	// another thread work it should not wait for a timer to find (a shard
	// rings its control plane there, so that the usage of a burst of
	// requests reaches the spool when the burst ends). It costs the loop a
	// second, non-blocking epoll_wait per sleep.
	BeforeBlock func()

	// BatchSends makes the loop gather the answers of an iteration and
	// send them with one io_uring_enter(2) at its end, instead of writing
	// each connection's output with its own write(2) as soon as it is
	// answered. Off by default: it cuts the system calls per answer, but
	// side by side on this project's benchmark machine it has not yet
	// shown less CPU per request (BENCHMARKS.md). Where io_uring cannot be
	// set up (an old kernel, a seccomp filter) the loop writes as without it.
	BatchSends bool

	// GRPC, when set, is a second listener whose connections speak
	// HTTP/2 and carry gRPC calls (grpc.go). Its connections count
	// against MaxConns and share every bound above but the HTTP/1.1
	// framing ones.
	GRPC *GRPC
}

// DefaultDeferTimeout is Config.DeferTimeout's default.
const DefaultDeferTimeout = 5 * time.Second

// lingerTimeout bounds how long a connection being closed after an answer
// waits for the client to close its side. Closing with unread input makes
// the kernel send a reset, which can destroy the answer before the client
// reads it; waiting for the client's FIN avoids that.
const lingerTimeout = 2 * time.Second

// lingerBytes bounds how much input is discarded while lingering.
const lingerBytes = 256 << 10

// withDefaults returns c with zero fields set to their defaults, or an error
// for values that make no sense.
func (c Config) withDefaults() (Config, error) {
	c.MaxHeaderBytes = cmp.Or(c.MaxHeaderBytes, 8<<10)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, 1<<20)
	c.MaxConns = cmp.Or(c.MaxConns, 10_000)
	c.MaxOutput = cmp.Or(c.MaxOutput, 64<<10)
	c.ReadBufferSize = cmp.Or(c.ReadBufferSize, 16<<10)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, 60*time.Second)
	c.HeaderTimeout = cmp.Or(c.HeaderTimeout, 10*time.Second)
	c.BodyTimeout = cmp.Or(c.BodyTimeout, 30*time.Second)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, 30*time.Second)
	c.DeferTimeout = cmp.Or(c.DeferTimeout, DefaultDeferTimeout)
	c.Tick = cmp.Or(c.Tick, 100*time.Millisecond)
	c.IdleTick = max(cmp.Or(c.IdleTick, time.Second), c.Tick)

	for _, v := range []int{c.MaxHeaderBytes, c.MaxBodyBytes, c.MaxConns, c.MaxOutput, c.ReadBufferSize} {
		if v < 0 {
			return c, errors.New("httploop: negative size or count in Config")
		}
	}
	for _, d := range []time.Duration{c.IdleTimeout, c.HeaderTimeout, c.BodyTimeout, c.WriteTimeout, c.DeferTimeout, c.Tick} {
		if d < 0 {
			return c, errors.New("httploop: negative duration in Config")
		}
	}
	if c.Tick < time.Millisecond {
		// epoll_wait counts in milliseconds.
		return c, fmt.Errorf("httploop: Tick %v is below 1ms", c.Tick)
	}
	if c.MaxConns > maxSlots {
		return c, fmt.Errorf("httploop: MaxConns %d is above %d", c.MaxConns, maxSlots)
	}
	// The head must fit a pooled buffer: it is found and parsed in place.
	c.ReadBufferSize = max(c.ReadBufferSize, c.MaxHeaderBytes)
	if c.GRPC != nil {
		if err := c.GRPC.validate(); err != nil {
			return c, err
		}
		c.ReadBufferSize = max(c.ReadBufferSize, minGRPCReadBuffer)
	}
	if c.OnWake != nil && c.Wake == nil {
		return c, errors.New("httploop: OnWake without Wake")
	}
	return c, nil
}
