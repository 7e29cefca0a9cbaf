package admin

import (
	"net/http"
	"net/http/pprof"
	runtimepprof "runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"
)

// serveMetrics: GET /metrics — the Prometheus text exposition of the
// configured registry (the daemon's metrics and these admin ones).
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	s.scrape.ServeHTTP(w, r)
	return nil
}

// MaxProfileSeconds bounds a CPU profile, trace or delta profile: each
// holds its connection (and, for the CPU profile and the trace, the
// process's only profiler) for that long.
const MaxProfileSeconds = 300

// profiling is held while a CPU profile or a trace runs: the runtime
// allows one of each at a time, and pprof answers a second with a plain
// text 500; this answers it 409 busy instead.
var profiling sync.Mutex

// mountPprof mounts net/http/pprof's handlers on the admin mux, behind the
// admin token. Importing net/http/pprof also registers them on
// http.DefaultServeMux; tollgated never serves that mux, so those
// registrations are unreachable.
//
// The query is checked here, so that pprof's own plain-text refusals are
// never reached: every error is a problem. A timed profile extends its
// connection's read and write deadlines by its duration (pprof extends
// only the write deadline, and only past the server's WriteTimeout; the
// read deadline's expiry cancels the request, which would cut a profile
// short at the server's ReadTimeout).
func (s *Server) mountPprof(handle func(pattern string, m methods)) {
	get := func(h http.HandlerFunc, params ...string) methods {
		return methods{http.MethodGet: route{need: permDebug, run: func(w http.ResponseWriter, r *http.Request) error {
			q, err := readQuery(r, params...)
			if err != nil {
				return err
			}
			if v, ok := q.get("seconds"); ok {
				sec, err := strconv.Atoi(v)
				if err != nil || sec < 1 || sec > MaxProfileSeconds {
					return codeProblem(codeInvalidQuery, "seconds", "must be an integer from 1 to %d, not %q", MaxProfileSeconds, v)
				}
				if _, debug := q.get("debug"); debug {
					return codeProblem(codeInvalidQuery, "debug", "cannot be combined with seconds")
				}
				extendDeadlines(w, time.Duration(sec)*time.Second)
			}
			// pprof reads these with Atoi and takes anything it cannot
			// parse (or clamps out of range) as some level: refuse instead.
			if v, ok := q.get("debug"); ok && v != "0" && v != "1" && v != "2" {
				return codeProblem(codeInvalidQuery, "debug", "must be 0, 1 or 2, not %q", v)
			}
			if v, ok := q.get("gc"); ok && v != "0" && v != "1" {
				return codeProblem(codeInvalidQuery, "gc", "must be 0 or 1, not %q", v)
			}
			h(w, r)
			return nil
		}}}
	}
	exclusive := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if !profiling.TryLock() {
				s.fail(w, r, problemf(codeBusy, "a CPU profile or trace is already running; try again when it ends"))
				return
			}
			defer profiling.Unlock()
			h(w, r)
		}
	}
	// The index also serves each named profile (/debug/pprof/heap, …):
	// unknown names are answered here, and delta profiles ("seconds") only
	// for the profiles that support them.
	index := get(pprof.Index, "debug", "gc", "seconds")
	serveIndex := index[http.MethodGet].run
	index[http.MethodGet] = route{need: permDebug, run: func(w http.ResponseWriter, r *http.Request) error {
		name := strings.TrimPrefix(r.URL.Path, "/debug/pprof/")
		if name != "" && runtimepprof.Lookup(name) == nil {
			return problemf(codeNotFound, "no profile %q", name)
		}
		if r.URL.Query().Has("seconds") && !deltaProfiles[name] {
			return codeProblem(codeInvalidQuery, "seconds", "is only for the %s profiles", "allocs, block, goroutine, heap, mutex and threadcreate")
		}
		return serveIndex(w, r)
	}}
	handle("/debug/pprof/", index)
	handle("/debug/pprof/cmdline", get(pprof.Cmdline))
	handle("/debug/pprof/profile", get(exclusive(pprof.Profile), "seconds"))
	handle("/debug/pprof/trace", get(exclusive(pprof.Trace), "seconds"))
	// Symbol reads addresses from the query (GET) or the body (POST).
	symbol := func(w http.ResponseWriter, r *http.Request) error {
		pprof.Symbol(w, r)
		return nil
	}
	handle("/debug/pprof/symbol", methods{http.MethodGet: {symbol, permDebug}, http.MethodPost: {symbol, permDebug}})
}

// deltaProfiles are the named profiles pprof serves as a difference over
// "seconds".
var deltaProfiles = map[string]bool{
	"allocs": true, "block": true, "goroutine": true, "heap": true, "mutex": true, "threadcreate": true,
}

// extendDeadlines gives a timed profile its duration on top of the
// listener's timeouts. Without a connection (a test recorder) there is
// nothing to extend.
func extendDeadlines(w http.ResponseWriter, d time.Duration) {
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(d + profileSlack)
	_ = rc.SetReadDeadline(deadline)
	_ = rc.SetWriteDeadline(deadline)
}

// profileSlack is the time a profile's answer gets beyond its duration to
// be collected and written.
const profileSlack = 30 * time.Second
