package agentadmission

import (
	"net/http"
	"strconv"
)

// Middleware gates next for net/http. It is a func(http.Handler)
// http.Handler, so c.Middleware fits any chaining helper. When the Checker
// is not engaged it returns next itself.
func (c *Checker) Middleware(next http.Handler) http.Handler {
	if !c.Enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.isExempt(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		var s Subject
		if c.httpSubject != nil {
			s = c.httpSubject(r)
		}
		d := c.Check(r.Context(), s)
		if !d.Denied {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		if secs, ok := d.RetryAfter(c.now()); ok {
			h.Set("Retry-After", strconv.FormatInt(secs, 10))
		}
		w.WriteHeader(http.StatusPaymentRequired)
		w.Write(d.body())
	})
}
