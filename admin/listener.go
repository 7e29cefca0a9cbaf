package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound the admin listener. A zero field takes its default (see
// DefaultLimits); a negative one is an error.
type Limits struct {
	// ReadHeaderTimeout is the time from a connection's first byte (or a
	// request's, on a kept-alive connection) to the end of the request's
	// headers. A client that sends nothing is closed after it.
	ReadHeaderTimeout time.Duration
	// ReadTimeout is the time to read a whole request, body included.
	ReadTimeout time.Duration
	// WriteTimeout is the time from the end of the request's headers to
	// the end of the answer. A timed profile gets its duration on top.
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection with no next request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and headers (431 beyond).
	// net/http reads up to 4 KiB past it before refusing (its bufio
	// slack): a head of up to MaxHeaderBytes+4096 bytes may be served.
	MaxHeaderBytes int
	// MaxConns bounds open connections, so the admin listener never holds
	// more than MaxConns file descriptors for clients (plus at most
	// maxRefusing being refused) however many sockets are opened. At the
	// bound a new connection takes the place of the held connection that
	// has waited longest with no request in progress — one that has not
	// sent a whole request head yet, or is idle between requests — which
	// is closed; only when every held connection is serving a request is
	// the new one answered 503 too-many-connections and closed. So sockets
	// that hold a place and send nothing cannot keep a request out.
	MaxConns int
}

// DefaultLimits suit an operators' API on loopback: requests are small and
// quick, and a handful of scripts, dashboards and scrapers use it at once.
func DefaultLimits() Limits {
	return Limits{
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
		MaxConns:          64,
	}
}

// withDefaults fills zero fields from DefaultLimits.
func (l Limits) withDefaults() (Limits, error) {
	d := DefaultLimits()
	for _, f := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&l.ReadHeaderTimeout, d.ReadHeaderTimeout}, {&l.ReadTimeout, d.ReadTimeout}, {&l.WriteTimeout, d.WriteTimeout}, {&l.IdleTimeout, d.IdleTimeout}} {
		if *f.v < 0 {
			return l, fmt.Errorf("admin: negative timeout %v", *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if l.MaxHeaderBytes < 0 || l.MaxConns < 0 {
		return l, fmt.Errorf("admin: negative limit (max header bytes %d, max conns %d)", l.MaxHeaderBytes, l.MaxConns)
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if l.MaxConns == 0 {
		l.MaxConns = d.MaxConns
	}
	return l, nil
}

// keyExpirySweep is how often Serve expires keys: a key stops at most this
// long after its expiry (plus one plane iteration to reach the shards).
const keyExpirySweep = time.Second

// Serve serves the admin API on ln under lim, in goroutines, and returns
// the http.Server to stop it with (Shutdown or Close). While it serves,
// keys that reach their expiry are revoked every keyExpirySweep.
//
// Every answer is a problem+json: besides the handler's own, the listener
// rewrites the plain-text refusals net/http writes for requests it cannot
// parse (malformed request line or headers, headers over
// MaxHeaderBytes, an unsupported transfer coding or Expect), and refuses
// connections beyond MaxConns with one.
func (s *Server) Serve(ln net.Listener, lim Limits) (*http.Server, error) {
	lim, err := lim.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		// OPTIONS * would otherwise be answered 200 by net/http itself,
		// unauthenticated; it reaches the handler and is unmatched.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     stdlog.New(logWriter{s}, "", 0),
		BaseContext:                  func(net.Listener) context.Context { return ctx },
	}
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }
	srv.RegisterOnShutdown(stop)
	limited := &limitListener{Listener: ln, s: s, slots: make(chan struct{}, lim.MaxConns), refusing: make(chan struct{}, maxRefusing),
		waiting: make(map[*problemConn]time.Time, lim.MaxConns)}
	srv.ConnState = limited.track
	go func() {
		defer stop()
		if err := srv.Serve(limited); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error().Err(err).Msg("admin API stopped")
		}
	}()
	go s.sweepKeys(ctx)
	s.served = ctx
	return srv, nil
}

// sweepKeys expires keys until ctx ends.
func (s *Server) sweepKeys(ctx context.Context) {
	t := time.NewTicker(keyExpirySweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.ExpireKeys(ctx); err != nil && ctx.Err() == nil {
				s.log.Error().Err(err).Msg("admin: expiring keys failed; retrying")
			}
		}
	}
}

// connKey is the request context's key for its connection (ConnContext).
type connKey struct{}

// dropBody makes the connection close after the answer, without reading
// what is left of the request's body: net/http would read up to 256 KiB
// of it after the handler — until the read timeout, from a client that
// trickles it — holding a place of the listener. For a request refused
// before its body was wanted (no valid admin token).
func dropBody(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Connection", "close")
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
		_ = c.SetReadDeadline(time.Now())
	}
}

// logWriter carries net/http's own log lines (accept errors, TLS, panics)
// into the Server's log.
type logWriter struct{ s *Server }

func (l logWriter) Write(p []byte) (int, error) {
	l.s.log.Warn().Str("component", "admin-http").Msg(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// maxRefusing bounds the connections being answered 503 at once; beyond
// it an excess connection is closed without an answer.
const maxRefusing = 8

// limitListener hands out at most cap(slots) connections at a time. It
// knows which of them wait with no request in progress (waiting, since
// when: from their accept until net/http has read a whole request head,
// and while idle between requests), and gives the place of the one that
// has waited longest to a new connection at the bound.
type limitListener struct {
	net.Listener
	s        *Server
	slots    chan struct{}
	refusing chan struct{}

	mu      sync.Mutex
	waiting map[*problemConn]time.Time
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.take() && !(l.evictOldest() && l.take()) {
			l.refuse(c)
			continue
		}
		l.s.metrics.conns.Inc()
		pc := &problemConn{Conn: c, s: l.s}
		pc.release = func() {
			l.closing(pc)
			l.s.metrics.conns.Dec()
			<-l.slots
		}
		l.mu.Lock()
		l.waiting[pc] = time.Now()
		l.mu.Unlock()
		return pc, nil
	}
}

// take claims a place, if one is free.
func (l *limitListener) take() bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// evictOldest closes the held connection that has waited longest with no
// request in progress, which frees its place at once (problemConn.Close);
// it reports whether there was one.
func (l *limitListener) evictOldest() bool {
	l.mu.Lock()
	var oldest *problemConn
	var since time.Time
	for c, t := range l.waiting {
		if oldest == nil || t.Before(since) {
			oldest, since = c, t
		}
	}
	delete(l.waiting, oldest)
	l.mu.Unlock()
	if oldest == nil {
		return false
	}
	l.s.metrics.evicted.Inc()
	oldest.Close()
	return true
}

// track follows net/http's view of each connection (http.Server.ConnState):
// reading a request (active) takes it off the waiting list, and going idle
// after one puts it back, as the youngest.
func (l *limitListener) track(c net.Conn, state http.ConnState) {
	pc, ok := c.(*problemConn)
	if !ok {
		return
	}
	switch state {
	case http.StateActive:
		l.forget(pc)
	case http.StateIdle:
		l.mu.Lock()
		if !pc.closed.Load() {
			l.waiting[pc] = time.Now()
		}
		l.mu.Unlock()
	}
}

// forget takes c off the waiting list.
func (l *limitListener) forget(c *problemConn) {
	l.mu.Lock()
	delete(l.waiting, c)
	l.mu.Unlock()
}

// closing takes c off the waiting list for good: a late idle report does
// not put a closed connection back.
func (l *limitListener) closing(c *problemConn) {
	l.mu.Lock()
	c.closed.Store(true)
	delete(l.waiting, c)
	l.mu.Unlock()
}

// refuse answers c 503 too-many-connections and closes it, off the accept
// loop. It first reads what the client already sent (briefly): closing a
// socket with unread input resets it, and the client would see the reset
// instead of the answer.
func (l *limitListener) refuse(c net.Conn) {
	e := problemf(codeTooManyConnections, "the admin listener has too many open connections; retry shortly")
	l.s.metrics.errors.WithLabelValues(e.code).Inc()
	select {
	case l.refusing <- struct{}{}:
	default:
		c.Close()
		return
	}
	go func() {
		defer func() { <-l.refusing }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(refuseTimeout))
		_, _ = c.Write(problemResponse(e))
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}()
}

// refuseTimeout bounds how long a refused connection is kept to answer it.
const refuseTimeout = 200 * time.Millisecond

// problemConn is an accepted connection: it gives its slot back once
// closed, and turns net/http's plain-text refusals into problems.
type problemConn struct {
	net.Conn
	s       *Server
	release func()
	once    sync.Once
	closed  atomic.Bool // set under the listener's mu, by release
}

func (c *problemConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// CloseWrite lets net/http half-close the connection after a 431 (it
// looks for this method on the connection).
func (c *problemConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Write passes answers through, except net/http's own refusals of
// requests it could not parse, which it writes to the connection in one
// Write each, before any handler ran, as plain text.
func (c *problemConn) Write(p []byte) (int, error) {
	e, ok := refusalProblem(p)
	if !ok {
		return c.Conn.Write(p)
	}
	c.s.metrics.errors.WithLabelValues(e.code).Inc()
	c.s.metrics.requests.WithLabelValues("unparsed", "other", strconv.Itoa(e.status)).Inc()
	if _, err := c.Conn.Write(problemResponse(e)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// netHTTPErrorHeaders follow the status line of every refusal net/http
// writes for a request it could not read (net/http's server.go, conn.serve);
// a handler's answer always has a Date header there.
const netHTTPErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// refusalProblem recognises a refusal net/http wrote itself and returns the
// problem to answer instead: its own 400, 431, 501 and 505 (status line,
// then netHTTPErrorHeaders), and its 417 to an Expect it does not support
// (answered through a response, but before the handler, so no handler
// ever answers 417).
func refusalProblem(p []byte) (*apiError, bool) {
	const prefix = "HTTP/1.1 "
	if len(p) < len(prefix)+3 || !bytes.HasPrefix(p, []byte(prefix)) {
		return nil, false
	}
	status, err := strconv.Atoi(string(p[len(prefix) : len(prefix)+3]))
	if err != nil {
		return nil, false
	}
	if status == http.StatusExpectationFailed {
		e := problemf(codeUnsupportedFraming, "only Expect: 100-continue is supported")
		e.status, e.title = status, http.StatusText(status)
		return e, true
	}
	end := bytes.Index(p, []byte("\r\n"))
	if end < 0 || !bytes.HasPrefix(p[end:], []byte(netHTTPErrorHeaders)) {
		return nil, false
	}
	// "400 Bad Request: missing required Host header": the part after the
	// status text, if any, is net/http's reason.
	line := string(p[len(prefix)+3 : end])
	detail := "the request could not be read: its request line or a header is malformed"
	if _, reason, ok := strings.Cut(line, ": "); ok {
		detail = reason
	}
	var e *apiError
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		e = problemf(codeHeadersTooLarge, "the request line and headers are larger than this listener accepts")
	case http.StatusNotImplemented:
		e = problemf(codeUnsupportedFraming, "the request's transfer encoding is not supported")
	default:
		e = problemf(codeMalformedRequest, "%s", detail)
		e.status, e.title = status, http.StatusText(status)
	}
	return e, true
}

// problemResponse is a whole HTTP/1.1 answer carrying e, closing the
// connection (nothing more can be read from it).
func problemResponse(e *apiError) []byte {
	body := e.body()
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/problem+json\r\nCache-Control: no-store\r\n"+
		"X-Content-Type-Options: nosniff\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		e.status, http.StatusText(e.status), len(body), body)
}
