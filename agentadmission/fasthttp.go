package agentadmission

import (
	"context"
	"strconv"

	"github.com/valyala/fasthttp"
)

// FastMiddleware gates next for fasthttp. When the Checker is not engaged it
// returns next itself.
//
// fasthttp has no request context that carries a trace, and its RequestCtx
// is recycled once the handler returns, so checks start from
// context.Background(): admission.check is a root span here.
func (c *Checker) FastMiddleware(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	if !c.Enabled() {
		return next
	}
	return func(ctx *fasthttp.RequestCtx) {
		if _, skip := c.exempt[string(ctx.Path())]; skip {
			next(ctx)
			return
		}
		var s Subject
		if c.fastSubject != nil {
			s = c.fastSubject(ctx)
		}
		d := c.Check(context.Background(), s)
		if !d.Denied {
			next(ctx)
			return
		}
		ctx.SetStatusCode(fasthttp.StatusPaymentRequired)
		ctx.SetContentType("application/json")
		if secs, ok := d.RetryAfter(c.now()); ok {
			ctx.Response.Header.Set("Retry-After", strconv.FormatInt(secs, 10))
		}
		ctx.SetBody(d.body())
	}
}
