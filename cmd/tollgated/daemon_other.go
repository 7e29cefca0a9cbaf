//go:build !linux

package main

import (
	"errors"
	"io"

	"github.com/rs/zerolog"
)

type daemon struct{ failed chan error }

// startDaemon refuses: the data plane is an epoll event loop per shard.
func startDaemon(cfg config, log zerolog.Logger, out io.Writer) (*daemon, error) {
	return nil, errors.New("tollgated's data plane needs Linux (epoll, SO_REUSEPORT, CPU affinity)")
}

func (d *daemon) shutdown() {}
