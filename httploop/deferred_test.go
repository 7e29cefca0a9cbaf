//go:build linux

package httploop

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tollgated/tollgated/internal/await"
	"github.com/tollgated/tollgated/ring"
)

// job is a deferred request on its way to another thread and back.
type job struct {
	d    Deferred
	path string
}

// deferrer is a server whose handler defers every /d/... request to the
// test (the "other thread"), which answers through a ring and its eventfd
// doorbell, as a shard's control plane would. OnWake completes the answers.
type deferrer struct {
	*server
	jobs    chan job // handler → test
	bell    *ring.Doorbell[job]
	filled  atomic.Int64
	results chan bool // what each Complete returned
}

func startDeferrer(t *testing.T, cfg Config) *deferrer {
	r, err := ring.New[job](1024)
	if err != nil {
		t.Fatal(err)
	}
	bell, err := ring.NewDoorbell(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bell.Close() }) // runs after the loop's cleanup has stopped it
	d := &deferrer{jobs: make(chan job, 1024), bell: bell, results: make(chan bool, 1024)}
	cfg.Wake = bell
	cfg.OnWake = func() {
		for {
			j, ok := bell.Ring().Pop()
			if !ok {
				return
			}
			d.results <- d.Complete(j.d, func(resp *fasthttp.Response) {
				d.filled.Add(1)
				resp.SetBodyString("done " + j.path)
			})
		}
	}
	h := func(x *Ctx) {
		if path := string(x.Request.URI().Path()); strings.HasPrefix(path, "/d/") {
			d.jobs <- job{x.Defer(), path}
			return
		}
		testHandler(x)
	}
	d.server = prepare(t, h, cfg).run()
	return d
}

// answer sends j back to the loop; the test goroutine is the ring's only producer.
func (d *deferrer) answer(j job) {
	for !d.bell.Push(j) {
		runtime.Gosched()
	}
}

func (d *deferrer) nextJob(t *testing.T) job {
	t.Helper()
	select {
	case j := <-d.jobs:
		return j
	case <-time.After(10 * time.Second):
		t.Fatal("no deferred request arrived")
		return job{}
	}
}

func TestDeferredInOrder(t *testing.T) {
	d := startDeferrer(t, Config{})
	const conns = 8
	// Each connection pipelines deferred and immediate requests; the
	// answers come back from the other thread in shuffled order across
	// connections and after random delays.
	go func() {
		var pending []job
		var left [conns]int // deferred answers each connection is still owed
		for i := range left {
			left[i] = 3
		}
		for answered := 0; answered < conns*3; {
			// A connection waits for its deferred answer before it
			// dispatches more: once every connection still owed one has
			// its next job pending, the shuffle reorders across all of
			// them.
			owed := 0
			for _, n := range left {
				if n > 0 {
					owed++
				}
			}
			for len(pending) < owed {
				pending = append(pending, <-d.jobs)
			}
			rand.Shuffle(len(pending), func(i, k int) { pending[i], pending[k] = pending[k], pending[i] })
			var i int
			fmt.Sscanf(pending[0].path, "/d/%d/", &i)
			left[i]--
			d.answer(pending[0])
			pending = pending[1:]
			answered++
		}
	}()
	done := make(chan error, conns)
	for i := range conns {
		c := dial(t, d.addr)
		go func() {
			var want []string
			var all strings.Builder
			for k := range 5 {
				path := fmt.Sprintf("/p/%d/%d", i, k)
				answer := path
				if k%2 == 0 {
					path = fmt.Sprintf("/d/%d/%d", i, k)
					answer = "done " + path
				}
				all.WriteString(get(path))
				want = append(want, answer)
			}
			c.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := c.Write([]byte(all.String())); err != nil {
				done <- err
				return
			}
			br := bufio.NewReader(c)
			for _, w := range want {
				resp, err := readResponseErr(br, "GET")
				if err == nil && resp != w {
					err = fmt.Errorf("conn %d: got %q, want %q", i, resp, w)
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range conns {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	await.True(t, "stats", func() bool { return d.Stats().Deferred == conns*3 })
	if n := d.filled.Load(); n != conns*3 {
		t.Fatalf("filled %d answers", n)
	}
}

// readResponseErr reads one response body, for use off the test goroutine.
func readResponseErr(br *bufio.Reader, method string) (string, error) {
	var resp fasthttp.Response
	if method == "HEAD" {
		resp.SkipBody = true
	}
	if err := resp.Read(br); err != nil {
		return "", err
	}
	return string(resp.Body()), nil
}

func TestDeferredConnectionReset(t *testing.T) {
	d := startDeferrer(t, Config{})
	c := dial(t, d.addr).(*net.TCPConn)
	write(t, c, get("/d/gone"))
	j := d.nextJob(t)
	c.SetLinger(0)
	c.Close() // reset: the loop closes the connection at once
	await.True(t, "connection closed", func() bool { return d.Stats().Conns == 0 })

	d.answer(j)
	if ok := <-d.results; ok {
		t.Fatal("Complete delivered to a closed connection")
	}
	if n := d.filled.Load(); n != 0 {
		t.Fatalf("fill called %d times for a closed connection", n)
	}
	// And the loop carries on.
	other := dial(t, d.addr)
	write(t, other, get("/ok"))
	if _, body := readResponse(t, other, bufio.NewReader(other), "GET"); body != "/ok" {
		t.Fatalf("%q", body)
	}
}

func TestDeferredAfterHalfClose(t *testing.T) {
	// A client that sends its request and shuts its side still gets the
	// deferred answer.
	var idle atomic.Int64
	d := startDeferrer(t, Config{BeforeBlock: func() { idle.Add(1) }})
	c := dial(t, d.addr).(*net.TCPConn)
	write(t, c, get("/d/half"))
	c.CloseWrite()
	j := d.nextJob(t)
	// Let the loop see the FIN first: it was sent before the job was
	// taken, and the loop goes idle only once no event is left.
	was := idle.Load()
	await.True(t, "the loop idle after taking the job", func() bool { return idle.Load() > was })
	d.answer(j)
	br := bufio.NewReader(c)
	if _, body := readResponse(t, c, br, "GET"); body != "done /d/half" {
		t.Fatalf("%q", body)
	}
	expectEOF(t, c, br)
}

func TestDeferTimeout(t *testing.T) {
	const limit = 200 * time.Millisecond
	d := startDeferrer(t, Config{DeferTimeout: limit, Tick: 10 * time.Millisecond})
	c := dial(t, d.addr)
	began := time.Now()
	write(t, c, get("/d/slow")+get("/after"))
	j := d.nextJob(t)
	br := bufio.NewReader(c)
	resp, body := readResponse(t, c, br, "GET")
	if resp.StatusCode != 504 || problemOf(t, resp, body) != "answer-timeout" || resp.Close {
		t.Fatalf("%d %s close=%v", resp.StatusCode, body, resp.Close)
	}
	if waited := time.Since(began); waited < limit {
		t.Fatalf("504 after %v", waited)
	}
	if _, body := readResponse(t, c, br, "GET"); body != "/after" {
		t.Fatalf("after 504: %q", body)
	}
	d.answer(j) // too late
	if ok := <-d.results; ok {
		t.Fatal("late Complete delivered")
	}
	if d.filled.Load() != 0 {
		t.Fatal("late fill called")
	}
	await.True(t, "stats", func() bool { return d.Stats().DeferTimeouts == 1 })
}

// TestCompleteInHandler defers and completes within the same handler call,
// and completes another connection's deferral from a handler: both are on
// the loop thread and allowed.
func TestCompleteInHandler(t *testing.T) {
	var parked Deferred
	var l *Loop
	h := func(x *Ctx) {
		switch string(x.Request.URI().Path()) {
		case "/now":
			d := x.Defer()
			if !l.Complete(d, func(r *fasthttp.Response) { r.SetBodyString("at once") }) {
				panic("Complete failed")
			}
		case "/park":
			parked = x.Defer()
		case "/release":
			if !l.Complete(parked, func(r *fasthttp.Response) { r.SetBodyString("released") }) {
				panic("release failed")
			}
			x.Response.SetBodyString("did release")
		}
	}
	l = memLoop(t, h, Config{})
	c := l.memSlot()
	c.in = []byte(get("/now") + get("/park") + get("/never-before-release"))
	l.serve(c)
	if !c.waiting {
		t.Fatal("not waiting on /park")
	}
	other := l.memSlot()
	other.in = []byte(get("/release"))
	l.serve(other)
	if got := bodies(t, other.out); got != "did release" {
		t.Fatalf("releaser got %q", got)
	}
	if c.waiting {
		t.Fatal("still waiting after release")
	}
	l.serve(c) // what the ready list would do
	if got := bodies(t, c.out); got != "at once|released|" {
		t.Fatalf("bodies %q", got)
	}
	if l.Complete(parked, nil) || l.Complete(0, nil) || l.Complete(Deferred(1<<63), nil) {
		t.Fatal("stale or bogus handle accepted")
	}
}

// memSlot adds an in-memory connection to the loop's table, as accept would.
func (l *Loop) memSlot() *conn {
	c := &conn{fd: -1, open: true, slot: uint32(len(l.conns)), id: uint64(len(l.conns) + 1)}
	l.conns = append(l.conns, c)
	return c
}

// bodies parses the responses in out and joins their bodies with "|".
func bodies(t *testing.T, out []byte) string {
	t.Helper()
	br := bufio.NewReader(strings.NewReader(string(out)))
	var all []string
	for br.Buffered() > 0 || len(all) == 0 {
		b, err := readResponseErr(br, "GET")
		if err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		all = append(all, b)
		if _, err := br.Peek(1); err != nil {
			break
		}
	}
	return strings.Join(all, "|")
}
