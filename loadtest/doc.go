// Package loadtest generates HTTP load against tollgated's data plane (or
// against the bare fasthttp baseline in bench/baseline) and measures it.
//
// The generator speaks HTTP/1.1 over raw keep-alive TCP connections: it
// writes requests itself, parses responses (with fasthttp, or in the epoll
// engine with a minimal parser of its own), and can pipeline
// several requests per connection. It runs in one of two modes:
//
//   - closed loop: every connection keeps its pipeline full and sends the next
//     request as soon as a response frees a slot, so throughput is whatever
//     the server sustains;
//   - open loop: requests are due at a fixed aggregate rate, and each
//     latency is measured from the request's intended send time rather than
//     from when it was actually written. A server that stalls therefore
//     shows the stall in the latency of every request that should have been
//     sent during it, which is the correction for coordinated omission.
//
// Closed-loop runs on Linux are driven by the epoll engine (EngineEpoll):
// one locked thread per CPU runs every connection with epoll and raw
// system calls, so a single CPU of load generation can keep a bare server
// on another CPU busy. EngineGoroutines (a goroutine per connection over
// net.Conn) remains, and open-loop runs use it.
//
// Latencies go into HdrHistograms with nanosecond resolution and three
// significant digits. Results count responses by HTTP status and by the
// problem+json "code" of error bodies, and transport errors by class.
//
// Targets are restricted to loopback addresses unless the caller explicitly
// allows remote ones; see CheckTarget.
package loadtest
