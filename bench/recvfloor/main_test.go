//go:build linux

package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestBothModesAnswerEveryRequest: each mode answers every request on
// every connection, requests pipelined, split across writes anywhere
// (inside the "\r\n\r\n" too), and with bodies.
func TestBothModesAnswerEveryRequest(t *testing.T) {
	for _, mode := range []string{"epoll", "uring"} {
		t.Run(mode, func(t *testing.T) {
			ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			failed := make(chan error, 1)
			go func() { failed <- serve(ln, mode, 166) }() // runs until the test binary ends
			req := "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
			post := "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\n{\"a\":1}"
			stream := strings.Repeat(req, 3) + post + req
			conns := make([]net.Conn, 3)
			for i := range conns {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				conns[i] = c
			}
			for _, cut := range []int{1, 17, len(req) - 2, len(req) + 1} {
				for _, c := range conns {
					write(t, c, stream[:cut])
				}
				time.Sleep(5 * time.Millisecond) // the first part arrives alone
				for _, c := range conns {
					write(t, c, stream[cut:])
				}
				for _, c := range conns {
					br := bufio.NewReader(c)
					for i := range 5 {
						select {
						case err := <-failed:
							t.Fatalf("the server ended: %v", err)
						default:
						}
						resp, err := http.ReadResponse(br, nil)
						if err != nil {
							t.Fatalf("cut at %d, answer %d: %v", cut, i, err)
						}
						body, _ := io.ReadAll(resp.Body)
						if resp.StatusCode != 200 || len(body) != 166 {
							t.Fatalf("cut at %d, answer %d: %d with %d bytes", cut, i, resp.StatusCode, len(body))
						}
					}
					if br.Buffered() != 0 {
						t.Fatalf("cut at %d: %d bytes beyond the five answers", cut, br.Buffered())
					}
				}
			}
		})
	}
}

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}
