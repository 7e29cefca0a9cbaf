//go:build linux

package httploop

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// benchRequest is a one-shot check as a gateway would send it.
var benchRequest = []byte("POST /v1/check HTTP/1.1\r\nHost: tollgated\r\nAuthorization: Bearer k\r\n" +
	"Content-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"units\": 42}")

// BenchmarkLoopKeepAlive drives a running loop through loopback sockets:
// keep-alive connections with one request in flight each, answered with a
// small fixed JSON body. One op is one request.
//
// allocs/req counts every allocation in the process (runtime.MemStats)
// across the measured requests, clients included; the clients are raw
// sockets reading fixed-size answers into fixed buffers, which allocate
// nothing, so the figure is the loop's.
func BenchmarkLoopKeepAlive(b *testing.B) { benchClients(b, startBench(b, 1), 64, 1) }

// BenchmarkLoopPipelined is the same with 16 requests per write.
func BenchmarkLoopPipelined(b *testing.B) { benchClients(b, startBench(b, 1), 16, 16) }

// BenchmarkLoops2KeepAlive and BenchmarkLoops2Pipelined run two loops on one
// port, the daemon's layout on a two-core machine (where the clients then
// compete with both).
func BenchmarkLoops2KeepAlive(b *testing.B) { benchClients(b, startBench(b, 2), 64, 1) }
func BenchmarkLoops2Pipelined(b *testing.B) { benchClients(b, startBench(b, 2), 16, 16) }

// BenchmarkFasthttpKeepAlive and BenchmarkFasthttpPipelined run the same
// clients against a plain fasthttp.Server with the same handler, as the
// baseline the loop is measured against on the same machine.
func BenchmarkFasthttpKeepAlive(b *testing.B) { benchClients(b, startFasthttp(b), 64, 1) }
func BenchmarkFasthttpPipelined(b *testing.B) { benchClients(b, startFasthttp(b), 16, 16) }

// startBench starts n loops on one port and returns its address.
func startBench(b *testing.B, n int) string {
	raiseFileLimit(b, 1000)
	addr := "127.0.0.1:0"
	for range n {
		ln, err := Listen(addr)
		if err != nil {
			b.Fatal(err)
		}
		addr = prepareOn(b, ln, jsonHandler, Config{}).run().addr
	}
	return addr
}

func startFasthttp(b *testing.B) string {
	raiseFileLimit(b, 1000)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{
		NoDefaultServerHeader: true,
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.Response.Header.SetContentType("application/json")
			ctx.Response.SetBodyRaw(jsonBody)
		},
	}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Shutdown() })
	return ln.Addr().String()
}

func benchClients(b *testing.B, addr string, conns, depth int) {
	size := responseSize(b, addr)
	batch := bytes.Repeat(benchRequest, depth)

	clients := make([]net.Conn, conns)
	for i := range clients {
		clients[i] = dial(b, addr)
	}
	// exchange sends one batch on c and reads its answers into buf.
	exchange := func(c net.Conn, buf []byte) error {
		if _, err := c.Write(batch); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if !bytes.HasPrefix(buf, []byte("HTTP/1.1 200 ")) {
			return io.ErrUnexpectedEOF
		}
		return nil
	}
	bufs := make([][]byte, conns)
	for i, c := range clients {
		bufs[i] = make([]byte, size*depth)
		for range 50 { // warm the loop's pools and every connection
			if err := exchange(c, bufs[i]); err != nil {
				b.Fatal(err)
			}
		}
	}

	var (
		remaining atomic.Int64
		done      atomic.Int64
		wg        sync.WaitGroup
		m0, m1    runtime.MemStats
	)
	failed := make(chan error, conns)
	remaining.Store(int64(b.N))
	runtime.GC()
	runtime.ReadMemStats(&m0)
	b.ResetTimer()
	began := time.Now()
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for remaining.Add(-int64(depth)) > -int64(depth) {
				if err := exchange(c, bufs[i]); err != nil {
					failed <- err
					return
				}
				done.Add(int64(depth))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	select {
	case err := <-failed:
		b.Fatal(err)
	default:
	}
	n := float64(done.Load())
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/n, "allocs/req")
	b.ReportMetric(n/elapsed.Seconds(), "req/s")
}

// responseSize learns the byte length of the benchmark's answer; it is fixed
// (the Date header has a fixed width).
func responseSize(b *testing.B, addr string) int {
	c := dial(b, addr)
	if _, err := c.Write(benchRequest); err != nil {
		b.Fatal(err)
	}
	var raw bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &raw))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			b.Fatal(err)
		}
		if line == "\r\n" {
			break
		}
	}
	head := raw.Len() - br.Buffered()
	c.Close()
	return head + len(jsonBody)
}

// BenchmarkServe measures the loop's own work per request without sockets:
// frame, parse, handle, serialise.
func BenchmarkServe(b *testing.B) {
	l := memLoop(b, jsonHandler, Config{})
	c := memConn(l)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchRequest)))
	for b.Loop() {
		c.in = append(c.in[:0], benchRequest...)
		c.r = 0
		l.serve(c)
		c.out, c.w = c.out[:0], 0
	}
}
