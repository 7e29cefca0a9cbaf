package credential

// BearerToken extracts the credential of an Authorization header value in
// the Bearer scheme (RFC 6750), the one rule both listeners follow:
//
//   - the scheme name is matched case-insensitively (RFC 7235 §2.1), so
//     "Bearer", "bearer" and "BEARER" are the same scheme;
//   - one or more spaces separate it from the token, and spaces or tabs
//     after the token are ignored;
//   - the token is one or more visible ASCII characters (0x21–0x7e) with
//     nothing else in between: a header with a second word, a control
//     byte or a non-ASCII byte carries no bearer token.
//
// It returns a subslice of h and allocates nothing (the data plane calls it
// on every request).
func BearerToken(h []byte) ([]byte, bool) {
	const scheme = "bearer"
	if len(h) <= len(scheme) || h[len(scheme)] != ' ' {
		return nil, false
	}
	for i := range len(scheme) {
		if h[i]|0x20 != scheme[i] {
			return nil, false
		}
	}
	t := h[len(scheme):]
	for len(t) > 0 && t[0] == ' ' {
		t = t[1:]
	}
	for len(t) > 0 && (t[len(t)-1] == ' ' || t[len(t)-1] == '\t') {
		t = t[:len(t)-1]
	}
	if len(t) == 0 {
		return nil, false
	}
	for _, c := range t {
		if c < 0x21 || c > 0x7e {
			return nil, false
		}
	}
	return t, true
}
