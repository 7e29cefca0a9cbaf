//go:build linux

package httploop

import (
	"bufio"
	"fmt"
	"net"
	"testing"

	"github.com/tollgated/tollgated/internal/await"
)

// askBeforeRun opens n connections to a loop that is not yet running and
// sends a request on each, so that the loop's first iterations find every
// request ready at once; it returns the connections with their readers.
func askBeforeRun(t *testing.T, s *server, n int) ([]net.Conn, []*bufio.Reader) {
	t.Helper()
	conns := make([]net.Conn, n)
	readers := make([]*bufio.Reader, n)
	for i := range conns {
		conns[i] = dial(t, s.addr) // the kernel completes it in the backlog
		write(t, conns[i], get(fmt.Sprintf("/b/%d", i)))
		readers[i] = bufio.NewReader(conns[i])
	}
	return conns, readers
}

func readAnswers(t *testing.T, conns []net.Conn, readers []*bufio.Reader) {
	t.Helper()
	for i, c := range conns {
		resp, body := readResponse(t, c, readers[i], "GET")
		if want := fmt.Sprintf("/b/%d", i); resp.StatusCode != 200 || body != want {
			t.Fatalf("connection %d: %d %q, want %q", i, resp.StatusCode, body, want)
		}
	}
}

// The answers one iteration makes leave in one io_uring submission: the
// requests of 32 connections, all waiting when the loop starts, are served
// in the iteration that first sees them, and sent together.
func TestAnswersOfAnIterationLeaveInOneSubmission(t *testing.T) {
	s := prepare(t, testHandler, Config{BatchSends: true})
	if s.ring == nil {
		t.Skip("io_uring is not available here: the loop writes each answer itself")
	}
	conns, readers := askBeforeRun(t, s, 32)
	s.run()
	readAnswers(t, conns, readers)
	// Counters are published when the iteration ends, after its sends.
	await.True(t, "32 batched sends counted", func() bool { return s.Stats().BatchedSends >= 32 })
	st := s.Stats()
	if st.BatchedSends != 32 || st.SendBatches != 1 {
		t.Fatalf("32 answers went out in %d submissions of %d sends, want 1 of 32", st.SendBatches, st.BatchedSends)
	}
}

// By default every answer is written with its own write(2): the same load
// is served, and nothing goes through a ring.
func TestWithoutBatchSendsNoRingIsUsed(t *testing.T) {
	s := prepare(t, testHandler, Config{})
	if s.ring != nil {
		t.Fatal("a ring was set up without BatchSends")
	}
	conns, readers := askBeforeRun(t, s, 32)
	s.run()
	readAnswers(t, conns, readers)
	// Pipelined answers, and one too large for a socket's buffer at once.
	c := dial(t, s.addr)
	write(t, c, get("/p/1")+get("/big")+get("/p/2"))
	br := bufio.NewReader(c)
	for _, want := range []string{"/p/1", string(bigBody), "/p/2"} {
		if resp, body := readResponse(t, c, br, "GET"); resp.StatusCode != 200 || body != want {
			t.Fatalf("pipelined answer: %d, %d bytes, want %d", resp.StatusCode, len(body), len(want))
		}
	}
	await.True(t, "the answers counted", func() bool { return s.Stats().Requests == 35 })
	if st := s.Stats(); st.SendBatches != 0 || st.BatchedSends != 0 {
		t.Fatalf("%d submissions of %d sends without BatchSends", st.SendBatches, st.BatchedSends)
	}
}
