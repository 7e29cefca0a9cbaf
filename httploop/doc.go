// Package httploop is the data plane's HTTP/1.1 transport: a single-threaded
// server loop, one per pinned OS thread, each with its own SO_REUSEPORT
// listener and epoll instance (ARCHITECTURE.md §2).
//
// The caller locks a goroutine to its thread, pins it, and calls Run there.
// Everything then happens on that thread: accepting, reading, framing,
// parsing with fasthttp, running the Handler, writing. There is no goroutine
// per connection, no lock on the request path, and in steady state no
// allocation per request: buffers come from a per-loop free list and go back
// when they empty, and one fasthttp Request/Response pair serves every
// request in turn.
//
// # Readiness
//
// Connections are registered once, edge-triggered, for input and output
// together. The loop keeps its own "may have more input" flag per
// connection, set by an input edge and cleared by a read that finds the
// socket empty. Pausing a connection — its output above Config.MaxOutput,
// or a deferred answer outstanding — is then just not reading it, and
// resuming is reading it again; neither costs an epoll_ctl, as it would
// with level-triggered registration, where a paused readable socket would
// otherwise be reported on every wait.
//
// # Requests
//
// A request is handed to fasthttp only once it is complete: a small framer
// finds the end of the head (CRLF line endings only), checks the request
// line, and reads Content-Length, Transfer-Encoding and Expect. Bodies must
// have a Content-Length; chunked bodies are refused with 411
// (length-required), because de-chunking in place would add a second
// framing path for a case the daemon's callers do not need. Broken framing
// is answered 400, oversized heads 431, oversized bodies 413 (at once, from
// the head), slow requests 408; each with an application/problem+json body,
// after which the connection is closed, lingering briefly for the client's
// FIN so the answer is not destroyed by a reset.
//
// Responses are written in request order. A handler may defer its answer
// (Ctx.Defer); the connection then dispatches nothing more until
// Loop.Complete supplies the answer, typically from Config.OnWake when
// another thread's reply arrives through a ring, or until
// Config.DeferTimeout passes and the loop answers 504 itself.
//
// Timeouts are enforced by a sweep that visits every connection about once
// per Config.Tick, spread over the iterations in proportion to the time
// elapsed; nothing is armed per connection or per request.
//
// Another thread talks to the loop through a Waker (a ring.Doorbell, or a
// bare eventfd via WakeFD): the loop polls its descriptor with the sockets
// and runs Config.OnWake on its own thread, where Loop.Complete may be
// called. Drain and Stats are the only methods safe from other goroutines.
//
// The package is Linux-only.
package httploop
