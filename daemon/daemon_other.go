//go:build !linux

package daemon

import (
	"errors"
	"io"

	"github.com/rs/zerolog"
)

// Daemon is a running tollgated; there is none off Linux.
type Daemon struct{}

// Open refuses: the data plane is an epoll event loop per shard.
func Open(cfg Config, log zerolog.Logger, out io.Writer) (*Daemon, error) {
	return nil, errors.New("tollgated's data plane needs Linux (epoll, SO_REUSEPORT, CPU affinity)")
}

// Failed never delivers.
func (d *Daemon) Failed() <-chan error { return nil }

// Close does nothing.
func (d *Daemon) Close() {}
