package grpcapi

// The forward-auth call a decision is asked as: /v1/authz in the shape
// nginx uses, the original method and URI in X-Original-* headers (any
// method, CONNECT too), as the shard reads an HTTP forward-auth call. The
// names are in fasthttp's canonical form, so they are set as they are
// (RequestHeader.SetCanonical) instead of normalised on every call.
var (
	pathAuthz       = []byte("/v1/authz")
	hdrOriginalMeth = []byte("X-Original-Method")
	hdrOriginalURI  = []byte("X-Original-Uri")
	hdrHitsAddend   = []byte("Hits-Addend")
)

// isToken reports whether s is an HTTP token (RFC 9110), as header names
// and methods are.
func isToken[T ~string | ~[]byte](s T) bool {
	if len(s) == 0 {
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
func fitsHeader[T ~string | ~[]byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
