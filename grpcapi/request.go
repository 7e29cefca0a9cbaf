package grpcapi

import (
	"strings"

	"github.com/valyala/fasthttp"
)

// forwardCall is a decision as the data plane is asked for it: the
// original request's method and URI, the key's header (for a rate-limit
// descriptor, the account's own key), and the headers a route may read.
// Both decoders produce one; only the shard interprets it.
type forwardCall struct {
	account string // the descriptor's account; "" for an ext_authz check
	method  string
	uri     string
	headers []header
	// hint names the shard the call goes to (shards.pick): the account,
	// or the key an ext_authz check carries.
	hint string
}

// headerValue is the value of the first header named name (any case).
func (c *forwardCall) headerValue(name string) string {
	for _, h := range c.headers {
		if strings.EqualFold(h.name, name) {
			return h.value
		}
	}
	return ""
}

type header struct{ name, value string }

var (
	pathAuthz        = []byte("/v1/authz")
	hdrOriginalMeth  = "X-Original-Method"
	hdrOriginalURI   = "X-Original-URI"
	hdrHitsAddend    = "Hits-Addend"
	hdrAuthorization = "Authorization"
)

// request writes c as a forward-auth call in the shape nginx uses: the
// method and URI in X-Original-* headers, any method (CONNECT too), as the
// shard reads an HTTP forward-auth call.
func (c *forwardCall) request(req *fasthttp.Request) {
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetRequestURIBytes(pathAuthz)
	for _, h := range c.headers {
		req.Header.Add(h.name, h.value)
	}
	req.Header.Set(hdrOriginalMeth, c.method)
	req.Header.Set(hdrOriginalURI, c.uri)
}

// isToken reports whether s is an HTTP token (RFC 9110), as header names
// and methods are.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c < 0x80 && isTokenPunct[c]:
		default:
			return false
		}
	}
	return true
}

var isTokenPunct = [128]bool{'!': true, '#': true, '$': true, '%': true, '&': true, '\'': true, '*': true,
	'+': true, '-': true, '.': true, '^': true, '_': true, '`': true, '|': true, '~': true}

// fitsHeader reports whether s can travel as a header value unchanged: no
// control byte but tab, no DEL. A CR or LF would end the header early and
// let a caller write headers of its own.
func fitsHeader(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
