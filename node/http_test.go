//go:build linux

package node

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
)

// These run the whole node (loop, shard, engine, plane) with raw clients:
// the transport's own edge cases are tested in httploop; here they are
// checked through tollgated's API.

func checkRequest(key string, extra string) string {
	body := oneRequest
	return fmt.Sprintf("POST /v1/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n%sContent-Length: %d\r\n\r\n%s", key, extra, len(body), body)
}

func TestPipelinedChecksAnswerInOrder(t *testing.T) {
	tn := startNode(t, 2)
	tn.provision(t, "acme", "key-acme", core.Limits{MaxItems: 100, HoldTimeout: 10e9}, 1<<30)
	c := dial(t, tn.Addr())
	var b strings.Builder
	const n = 50
	for i := range n {
		if i%10 == 9 {
			b.WriteString(checkRequest("bad-key", "")) // interleave refusals
		} else {
			b.WriteString(checkRequest("key-acme", ""))
		}
	}
	if _, err := io.WriteString(c.c, b.String()); err != nil {
		t.Fatal(err)
	}
	c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := range n {
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		want := 200
		if i%10 == 9 {
			want = 401
		}
		if resp.StatusCode != want {
			t.Fatalf("response %d: status %d, want %d", i, resp.StatusCode, want)
		}
	}
}

func TestConnectionCloseAndHTTP10(t *testing.T) {
	tn := startNode(t, 1)
	tn.provision(t, "acme", "key-acme", core.Limits{MaxItems: 100, HoldTimeout: 10e9}, 1<<30)
	for _, req := range []string{
		checkRequest("key-acme", "Connection: close\r\n"),
		strings.Replace(checkRequest("key-acme", ""), "HTTP/1.1", "HTTP/1.0", 1),
	} {
		c := dial(t, tn.Addr())
		io.WriteString(c.c, req)
		c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%q: %v %v", req[:40], resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		if _, err := c.br.ReadByte(); err != io.EOF {
			t.Fatalf("connection not closed after %q: %v", req[:40], err)
		}
	}
}

func TestBrokenRequestsGetProblemsAndTheNodeKeepsServing(t *testing.T) {
	tn := startNode(t, 1)
	tn.provision(t, "acme", "key-acme", core.Limits{MaxItems: 100, HoldTimeout: 10e9}, 1<<30)
	cases := []struct {
		raw    string
		status int
	}{
		{"\x16\x03\x01\x02\x00garbage\r\n\r\n", 400},
		{"POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 411},
		{"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n", 413},
		{"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 20<<10) + "\r\n\r\n", 431},
	}
	for _, tc := range cases {
		c := dial(t, tn.Addr())
		io.WriteString(c.c, tc.raw)
		c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			t.Fatalf("%q: %v", tc.raw[:10], err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), `"code"`) {
			t.Fatalf("%q: %d %q %s", tc.raw[:10], resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	c := &http.Client{Timeout: 5 * time.Second}
	if st, _ := post(t, c, tn.url+"/v1/check", "key-acme", oneRequest); st != 200 {
		t.Fatalf("node stopped serving after broken requests: %d", st)
	}
}

func TestSlowClientDoesNotBlockTheShard(t *testing.T) {
	tn := startNode(t, 1) // one shard: the slow client and the fast one share it
	tn.provision(t, "acme", "key-acme", core.Limits{MaxItems: 100, HoldTimeout: 10e9}, 1<<30)
	slow := dial(t, tn.Addr())
	io.WriteString(slow.c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bear")
	fast := dial(t, tn.Addr())
	for range 20 {
		start := time.Now()
		if st, _ := fast.post(t, "/v1/check", "key-acme", oneRequest); st != 200 {
			t.Fatalf("fast client refused: %d", st)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("fast client waited %v behind a stalled one", d)
		}
	}
}

// BenchmarkCheckOverSockets drives a one-shard node through real loopback
// sockets (64 keep-alive connections, raw clients that reuse their buffers)
// and reports the node's heap allocations per request in steady state.
func BenchmarkCheckOverSockets(b *testing.B) {
	tn := startNode(b, 1)
	tn.provision(b, "acme", "key-acme", core.Limits{MaxItems: 100, HoldTimeout: 10e9}, 1<<50)
	const conns = 64
	req := []byte(checkRequest("key-acme", ""))
	clients := make([]net.Conn, conns)
	for i := range clients {
		c, err := net.Dial("tcp", tn.Addr())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	run := func(total int) {
		done := make(chan struct{}, conns)
		for i, c := range clients {
			go func() {
				br := bufio.NewReaderSize(c, 4096)
				n := total / conns
				if i < total%conns {
					n++
				}
				for range n {
					c.Write(req)
					if err := skipResponse(br); err != nil {
						panic(err)
					}
				}
				done <- struct{}{}
			}()
		}
		for range conns {
			<-done
		}
	}
	run(20_000) // warm up: buffers, caches, funding slices
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
	runtime.ReadMemStats(&after)
	// Mallocs counts the whole process, the clients included; they allocate
	// nothing per request (a reused reader, a fixed request).
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "allocs/req")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// skipResponse reads one HTTP response with a Content-Length body.
func skipResponse(br *bufio.Reader) error {
	length := -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if len(line) > 16 && (line[0] == 'C' || line[0] == 'c') && strings.EqualFold(string(line[:15]), "Content-Length:") {
			n := 0
			for _, ch := range line[15:] {
				if ch >= '0' && ch <= '9' {
					n = n*10 + int(ch-'0')
				}
			}
			length = n
		}
	}
	if length < 0 {
		return fmt.Errorf("no Content-Length")
	}
	_, err := br.Discard(length)
	return err
}
