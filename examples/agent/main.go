// Command agent is a minimal agent HTTP service gated by tollgated's
// admission middleware.
//
// It reads FORGE_ADMISSION_URL (default http://127.0.0.1:8080, a local
// tollgated), FORGE_PLATFORM_TOKEN, FORGE_ORG_ID and FORGE_WORKSPACE_ID,
// and serves:
//
//	GET  /healthz  always 200, never gated, so probes pass while denied
//	POST /invoke   the "expensive" work, behind admission
//
// See README.md for how to run it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tollgated/tollgated/agentadmission"
)

// defaultPlatform is where tollgated's data plane listens by default.
const defaultPlatform = "http://127.0.0.1:8080"

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "address to listen on")
	agent := flag.String("agent", "my-agent", "agent id to ask admission for")
	flag.Parse()

	cfg := agentadmission.ConfigFromEnv()
	if cfg.URL == "" {
		cfg.URL = defaultPlatform
	}
	cfg.AgentID = *agent
	checker := agentadmission.New(cfg, agentadmission.WithExemptPaths("/healthz"))
	if checker.Enabled() {
		log.Printf("agent %q: admission via %s", *agent, cfg.URL)
	} else {
		log.Printf("agent %q: admission off (set %s)", *agent, agentadmission.EnvToken)
	}

	srv := &http.Server{
		Addr:              *addr,
		Handler:           newHandler(checker, os.Getenv("AGENT_TOKEN")),
		ReadHeaderTimeout: 5 * time.Second,
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	log.Printf("listening on %s", *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// newHandler puts the pieces in the order the contract asks for:
// authentication, then admission, then the dispatcher.
func newHandler(checker *agentadmission.Checker, token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("POST /invoke", invoke)
	return authenticate(token, checker.Middleware(mux))
}

// invoke stands in for the work admission protects: model calls, tools.
func invoke(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "did the work for %d bytes of input\n", len(body))
}

// authenticate stands in for the service's real authentication. It runs
// before admission so unauthenticated traffic never costs a platform call.
// With no token configured it lets everything through.
func authenticate(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
