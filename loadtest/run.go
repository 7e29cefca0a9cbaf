package loadtest

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fastjson"
)

// Options configure a run. The zero value of a field means its default.
type Options struct {
	URL         string // target, e.g. http://127.0.0.1:8080
	AllowRemote bool   // permit a non-loopback target

	Connections int           // default 64, at most 4096
	Duration    time.Duration // measured time; default 10s
	Warmup      time.Duration // unmeasured time before it
	Pipeline    int           // requests in flight per connection; default 1
	Rate        float64       // requests/s over all connections; 0 = closed loop
	Timeout     time.Duration // response timeout and drain time; default 2s
	Engine      Engine        // how connections are driven; default EngineEpoll where it exists

	Scenario Scenario // default check
	Mix      Mix      // for ScenarioMix; default DefaultMix
	Accounts []Account
	Zipf     float64 // 0 = uniform
	Seed     uint64

	CheckBody     string // body of /v1/check and /v1/admit
	TTLms         int    // adds "ttl_ms" to /v1/admit when > 0
	PlatformToken string // bearer for /v1/admission (and /v1/usage when set)
	OrgID         string
	WorkspaceID   string
	UsageBatch    int   // events per /v1/usage request; default 10
	UsageUnits    int64 // units per usage event; default 1
	RunID         string

	MaxErrorRate float64 // fraction; 0 = default 0.01, negative = no limit
	Count4xx     bool    // count 4xx responses as errors

	// Progress, when set, gets one line per second.
	Progress io.Writer

	sample func(k kind, ns int64) // tests: every recorded latency
}

func (o *Options) setDefaults() {
	if o.Connections == 0 {
		o.Connections = 64
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Pipeline == 0 {
		o.Pipeline = 1
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Engine == "" {
		o.Engine = defaultEngine
	}
	if o.Scenario == "" {
		o.Scenario = ScenarioCheck
	}
	if o.CheckBody == "" {
		o.CheckBody = DefaultCheckBody
	}
	if o.UsageBatch == 0 {
		o.UsageBatch = 10
	}
	if o.UsageUnits == 0 {
		o.UsageUnits = 1
	}
	if o.RunID == "" {
		o.RunID = strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	if o.MaxErrorRate == 0 {
		o.MaxErrorRate = 0.01
	}
	if len(o.Accounts) == 0 {
		o.Accounts = []Account{{ID: "acct-0", Key: "dummy"}}
	}
}

// maxRunTime bounds a run, so that a mistyped duration cannot leave a load
// generator running for days.
const maxRunTime = time.Hour

func (o *Options) check() error {
	switch {
	case o.Connections < 1 || o.Connections > 4096:
		return fmt.Errorf("connections must be in [1, 4096], got %d", o.Connections)
	case o.Duration <= 0 || o.Warmup < 0 || o.Duration+o.Warmup > maxRunTime:
		return fmt.Errorf("duration must be positive, warm-up non-negative, together at most %v", maxRunTime)
	case o.Pipeline < 1 || o.Pipeline > 1024:
		return fmt.Errorf("pipeline must be in [1, 1024], got %d", o.Pipeline)
	case o.Rate < 0 || o.Rate > 1e8:
		return fmt.Errorf("rate must be in [0, 1e8], got %v", o.Rate)
	case o.Timeout <= 0:
		return fmt.Errorf("timeout must be positive")
	case o.UsageBatch < 1 || o.UsageBatch > 10000:
		return fmt.Errorf("usage batch must be in [1, 10000], got %d", o.UsageBatch)
	case o.Engine != EngineGoroutines && (o.Engine != EngineEpoll || !haveEpoll):
		return fmt.Errorf("engine must be %q or, on Linux, %q; got %q", EngineGoroutines, EngineEpoll, o.Engine)
	}
	if err := CheckScenario(o.Scenario); err != nil {
		return err
	}
	if o.Scenario == ScenarioMix {
		for _, e := range o.Mix {
			if err := checkSingleScenario(e.Scenario); err != nil {
				return err
			}
		}
	}
	v, err := fastjson.Parse(o.CheckBody)
	if err != nil || v.Type() != fastjson.TypeObject {
		return fmt.Errorf("check body must be a JSON object: %v", err)
	}
	return nil
}

// run is the state shared by the connections of one run.
type run struct {
	opts     *Options
	target   *Target
	enc      *encoder
	picker   *Picker
	chooser  chooser
	accounts []wireAccount
	conns    []*conn
	hists    []*histSet

	start     time.Time
	warmupEnd int64        // ns since start
	end       atomic.Int64 // ns since start: no new operation from here
	interval  float64      // open loop: ns between global sends
	highest   int64        // largest latency a histogram tracks

	stop        chan struct{} // closed at end: start no new operations
	hard        chan struct{} // closed when sockets must close now
	hardCtx     context.Context
	hardCancel  context.CancelFunc
	interrupted atomic.Bool
}

func (r *run) now() int64 { return int64(time.Since(r.start)) }

func (r *run) stopping() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

func (r *run) isHard() bool {
	select {
	case <-r.hard:
		return true
	default:
		return false
	}
}

// measured reports whether an operation first due at t belongs to the
// result. Follow-up requests count with their operation, so every request
// the server sees after warm-up is in the report, even the last steps of an
// operation finished after the end.
func (r *run) measured(t int64) bool { return t >= r.warmupEnd && t < r.end.Load() }

// Run sends load as o describes until the duration has passed or ctx is
// cancelled, and returns what it measured. A cancelled run returns the
// partial result with Interrupted set; the error is only for options that
// make no run at all.
func Run(ctx context.Context, o Options) (*Result, error) {
	o.setDefaults()
	if err := o.check(); err != nil {
		return nil, err
	}
	target, err := CheckTarget(o.URL, o.AllowRemote)
	if err != nil {
		return nil, err
	}
	picker, err := NewPicker(len(o.Accounts), o.Zipf)
	if err != nil {
		return nil, err
	}

	r := &run{
		opts:     &o,
		target:   target,
		enc:      newEncoder(target, &o),
		picker:   picker,
		chooser:  newChooser(o.Scenario, o.Mix),
		accounts: newWireAccounts(o.Accounts),
		stop:     make(chan struct{}),
		hard:     make(chan struct{}),
	}
	total := o.Warmup + o.Duration
	r.warmupEnd = int64(o.Warmup)
	r.end.Store(int64(total))
	// A latency cannot exceed the run plus the drain; keep some room.
	r.highest = int64(total + 2*o.Timeout + time.Second)
	if o.Rate > 0 {
		r.interval = 1e9 / o.Rate
	}
	r.hardCtx, r.hardCancel = context.WithCancel(context.Background())
	defer r.hardCancel()
	for range min(o.Connections, 4*runtime.GOMAXPROCS(0)) {
		r.hists = append(r.hists, newHistSet(r.highest, o.sample))
	}
	for i := 0; i < o.Connections; i++ {
		r.conns = append(r.conns, newConn(r, i))
	}

	var wg sync.WaitGroup
	r.start = time.Now()
	switch {
	case o.Rate == 0 && o.Engine == EngineEpoll:
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.runClosedEpoll(runtime.GOMAXPROCS(0))
		}()
	default:
		for _, c := range r.conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if o.Rate > 0 {
					c.runOpen()
				} else {
					c.runClosed()
				}
			}()
		}
	}
	if o.Rate > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.pace()
		}()
	}
	allDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(allDone)
	}()
	progressDone := make(chan struct{})
	if o.Progress != nil {
		go r.progress(progressDone)
	}

	timer := time.NewTimer(total)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
		r.interrupted.Store(true)
		if now := r.now(); now < r.end.Load() {
			r.end.Store(now)
		}
	}
	close(r.stop)

	// Let in-flight operations finish, then cut what remains.
	drain := o.Timeout
	if r.interrupted.Load() {
		drain = min(drain, time.Second)
	}
	select {
	case <-allDone:
	case <-time.After(drain):
	}
	close(r.hard)
	r.hardCancel()
	for _, c := range r.conns {
		c.hardStop()
	}
	<-allDone
	close(progressDone)
	return r.result(), nil
}

// progress prints one line per second: responses and errors in the last
// second, counted from the connections' live counters.
func (r *run) progress(done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var lastResp, lastErr int64
	for sec := 1; ; sec++ {
		select {
		case <-done:
			return
		case <-t.C:
		}
		var resp, errs int64
		for _, c := range r.conns {
			resp += c.rec.liveResponses.Load()
			errs += c.rec.liveErrors.Load()
		}
		phase := ""
		if int64(sec)*int64(time.Second) <= r.warmupEnd {
			phase = "  (warm-up)"
		}
		fmt.Fprintf(r.opts.Progress, "loadtest: %4ds  %10.0f req/s  errors %d%s\n",
			sec, float64(resp-lastResp), errs-lastErr, phase)
		lastResp, lastErr = resp, errs
	}
}
