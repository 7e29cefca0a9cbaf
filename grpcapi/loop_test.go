package grpcapi

import (
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollgated/tollgated/control/plane"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/httploop"
)

// The tests serve the services as a shard does: a real loop with a gRPC
// listener, on its own locked thread, the Service made with it, and real
// gRPC clients over loopback. The shard is stood in for by an http.Handler
// run over each forward-auth request on the loop's thread; a handler that
// sets the postpone header has its answer postponed, as a durable
// acknowledgement postpones one, and completed on a later loop iteration.

// hdrPostpone, set by a test's data plane, makes the decider postpone the
// answer by its value (a duration).
const hdrPostpone = "X-Test-Postpone"

// countingBinder binds keys for every account but "ghost", as a plane
// that never installed it; gate, when set, holds every binding until it
// is closed.
type countingBinder struct {
	binds atomic.Int32
	gate  chan struct{}
	gated core.AccountID // the one account gate holds back; empty: all
}

func (b *countingBinder) BindInstalledKey(_ credential.Digest, id core.AccountID) error {
	if b.gate != nil && (b.gated == "" || id == b.gated) {
		<-b.gate
	}
	if id == "ghost" {
		return plane.ErrUnknownAccount
	}
	b.binds.Add(1)
	return nil
}

// testMaxHeaderBytes is the head bound the tests' services get: the data
// plane's default.
const testMaxHeaderBytes = 8 << 10

// harness is a loop serving the services.
type harness struct {
	sh    *Shared
	svc   *Service
	loop  *httploop.Loop
	addr  string
	stats *Stats
	// decisions counts the forward-auth requests the data plane saw.
	decisions atomic.Int32
	// later are postponed answers, completed by the loop once due, or
	// all at once after release.
	later   []*postponed
	release atomic.Bool
	// quiet is what the loop last heard from Quiet.
	quiet atomic.Bool
	// dropped counts postponed decisions dropped, as a shard drops a
	// funding waiter, because Pending said their call was gone.
	dropped atomic.Int32
}

type postponed struct {
	ticket uint64
	due    int64
	resp   fasthttp.Response
}

// options change a harness's configuration before it starts.
type options struct {
	cfg    func(*Config)
	binder *countingBinder
	ready  func() bool
}

func always() bool { return true }

// serve starts a loop whose services decide with dataPlane, and returns a
// client connection to it.
func serve(t *testing.T, dataPlane http.Handler, o options) (*grpc.ClientConn, *harness) {
	t.Helper()
	h := &harness{stats: new(Stats)}
	if o.binder == nil {
		o.binder = new(countingBinder)
	}
	if o.ready == nil {
		o.ready = always
	}
	cfg := Config{Domain: "tollgated", AccountEntry: "account", KeyHeader: "Authorization", Secret: make([]byte, 32),
		Binder: o.binder, Ready: o.ready, MaxHeld: 64, MaxHeaderBytes: testMaxHeaderBytes,
		AnswerTimeout: int64(2 * time.Second), Stats: h.stats}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	sh, err := NewShared(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.sh = sh
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(efd) })
	wake := func() { unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0}) }
	handle := fasthttpadaptor.NewFastHTTPHandler(dataPlane)
	decide := func(req *fasthttp.Request, resp *fasthttp.Response, postpone func() uint64) {
		h.decisions.Add(1)
		var ctx fasthttp.RequestCtx
		ctx.Init(req, nil, nil)
		handle(&ctx)
		if d := ctx.Response.Header.Peek(hdrPostpone); len(d) > 0 {
			wait, _ := time.ParseDuration(string(d))
			p := &postponed{ticket: postpone(), due: time.Now().Add(wait).UnixNano()}
			ctx.Response.Header.Del(hdrPostpone)
			ctx.Response.CopyTo(&p.resp)
			h.later = append(h.later, p)
			return
		}
		ctx.Response.CopyTo(resp)
	}
	hln, err := httploop.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gln, err := httploop.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = gln.Addr().String()
	lc := httploop.Config{Tick: time.Millisecond, Wake: httploop.WakeFD(efd), OnWake: func() {},
		GRPC: &httploop.GRPC{Listener: gln, H2: H2(64, 16<<10), Handler: func(x *httploop.StreamCtx) { h.svc.Handle(x) }},
		OnTick: func(now int64) {
			h.completeDue(now)
			h.svc.Tick(now)
		},
		Quiet: func() bool {
			q := len(h.later) == 0 && h.svc.Quiet()
			h.quiet.Store(q)
			return q
		},
		Holding: func() bool { return h.svc.Holding() },
		OnDrain: func() { h.svc.Drain() },
	}
	loop, err := httploop.New(hln, func(x *httploop.Ctx) {}, lc)
	if err != nil {
		t.Fatal(err)
	}
	h.loop = loop
	h.svc = sh.NewService(loop, decide, wake)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		if err := loop.Run(); err != nil {
			t.Error(err)
		}
		h.svc.Stop()
	}()
	t.Cleanup(func() {
		loop.Drain(time.Now().Add(time.Second))
		wg.Wait()
	})
	c, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, h
}

// completeDue completes the postponed answers that are due, on the loop's
// thread, as a shard completes a durable acknowledgement.
func (h *harness) completeDue(now int64) {
	list := h.later
	h.later = nil // a completion's next decision may postpone again
	for _, p := range list {
		if !h.svc.Pending(p.ticket) {
			h.dropped.Add(1)
			continue
		}
		if now < p.due && !h.release.Load() {
			h.later = append(h.later, p)
			continue
		}
		h.svc.Complete(p.ticket, func(r *fasthttp.Response) { p.resp.CopyTo(r) })
	}
}
