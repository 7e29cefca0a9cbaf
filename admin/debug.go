package admin

import (
	"net/http"
	"net/http/pprof"
)

// serveMetrics: GET /metrics — the Prometheus text exposition of the
// configured registry (the daemon's metrics and these admin ones).
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	s.scrape.ServeHTTP(w, r)
	return nil
}

// mountPprof mounts net/http/pprof's handlers on the admin mux, behind the
// admin token. Importing net/http/pprof also registers them on
// http.DefaultServeMux; tollgated never serves that mux, so those
// registrations are unreachable.
func (s *Server) mountPprof(handle func(pattern string, m methods)) {
	get := func(h http.HandlerFunc) methods {
		return methods{http.MethodGet: func(w http.ResponseWriter, r *http.Request) error {
			h(w, r)
			return nil
		}}
	}
	// Index also serves each named profile (/debug/pprof/heap, …).
	handle("/debug/pprof/", get(pprof.Index))
	handle("/debug/pprof/cmdline", get(pprof.Cmdline))
	handle("/debug/pprof/profile", get(pprof.Profile))
	handle("/debug/pprof/trace", get(pprof.Trace))
	symbol := get(pprof.Symbol)
	symbol[http.MethodPost] = symbol[http.MethodGet] // pprof posts addresses to symbolize
	handle("/debug/pprof/symbol", symbol)
}
