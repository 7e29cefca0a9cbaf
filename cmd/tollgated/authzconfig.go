package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/tollgated/tollgated/route"
)

// authzConfig is how the forward-auth route (/v1/authz) reads what only the
// gateway may decide. The key's header is the daemon's, not a request's
// nor an account's: the key is what finds the account.
type authzConfig struct {
	keyHeader string
}

func (a *authzConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&a.keyHeader, "authz-key-header", "Authorization", "the original request's header /v1/authz reads the customer's key from: Authorization (a Bearer credential) or another header holding the whole key, such as X-Api-Key; every gateway in front must set it or pass the client's on, and clear it nowhere else")
}

// authzReservedHeaders are headers the forward-auth exchange uses for
// something else: the key cannot be read from them.
var authzReservedHeaders = []string{"X-Original-Method", "X-Original-URI", "X-Forwarded-Method", "X-Forwarded-Uri",
	"Host", "Content-Length", "Transfer-Encoding", "Connection", "Cookie"}

func (a authzConfig) check() error {
	if !route.ValidHeaderName(a.keyHeader) {
		return fmt.Errorf("--authz-key-header %q: want a header name (an HTTP token of at most %d bytes)", a.keyHeader, route.MaxHeaderNameLen)
	}
	for _, h := range authzReservedHeaders {
		if strings.EqualFold(a.keyHeader, h) {
			return fmt.Errorf("--authz-key-header %s: the forward-auth exchange uses that header for something else", a.keyHeader)
		}
	}
	if len(a.keyHeader) >= len("X-Tollgate-") && strings.EqualFold(a.keyHeader[:len("X-Tollgate-")], "X-Tollgate-") {
		return fmt.Errorf("--authz-key-header %s: X-Tollgate-* headers are tollgated's answers", a.keyHeader)
	}
	return nil
}
