// Command tollgated is the admission daemon: one pinned shard per CPU, each
// owning its accounts' admission state, and a control plane behind them.
//
// It keeps its ledger and usage spool in --data-dir, serves the data plane
// on --listen and the admin API on --admin, and shuts down in the safe
// order on SIGTERM (see docs/DESIGN.md). "tollgated spool verify" and
// "tollgated spool quarantine" examine and repair a damaged usage spool
// (docs/RUNBOOK.md).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/tollgated/tollgated/invariant"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3"); without
// it the module version from the build info is reported.
var version = ""

// buildInfo is what the binary knows of its build: its version (set at
// link time, else the module's: "devel" when built from a checkout), the
// VCS revision it was built from ("+dirty" when the tree had changes;
// "unknown" outside a checkout) and the Go version. --version prints it;
// the tollgated_build_info metric carries it.
func buildInfo() (ver, revision, goVersion string) {
	ver, revision, goVersion = version, "unknown", runtime.Version()
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if ver == "" {
			ver = strings.Trim(bi.Main.Version, "()") // "(devel)" from a checkout
		}
		goVersion = bi.GoVersion
		dirty := false
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision":
				revision = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = true
			}
		}
		if dirty && revision != "unknown" {
			revision += "+dirty"
		}
	}
	if ver == "" {
		ver = "unknown"
	}
	return ver, revision, goVersion
}

func versionString() string {
	ver, revision, goVersion := buildInfo()
	return fmt.Sprintf("%s (revision %s, %s)", ver, revision, goVersion)
}

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr, nil))
}

// run is main without the process: it returns the exit status. stop, when
// non-nil, replaces the OS signals (tests close it to shut down).
func run(args []string, getenv func(string) string, stdout, stderr io.Writer, stop <-chan struct{}) int {
	if len(args) > 0 && args[0] == "spool" {
		return runSpool(args[1:], getenv, stdout, stderr)
	}
	cfg, err := parseConfig(args, getenv, stdout)
	switch {
	case errors.Is(err, errHelp):
		return 0
	case errors.Is(err, errVersion):
		fmt.Fprintf(stdout, "tollgated %s\n", versionString())
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "tollgated: %v\n", err)
		return 2
	}
	log := zerolog.New(stderr).Level(cfg.logLevel).With().Timestamp().Logger()
	invariant.OnViolation(func(k invariant.Kind, detail string) {
		log.Error().Str("invariant", k.String()).Str("detail", detail).Msg("BUG: a broken invariant (tollgated_invariant_violations_total)")
	})
	// The names come from the process environment: getenv answers values
	// only, and a typo is a name no flag asks for.
	for _, name := range unknownEnv(os.Environ(), cfg.knownEnv) {
		log.Warn().Str("variable", name).Msg("unknown TOLLGATED_ environment variable: no flag reads it, so it does nothing (see --help)")
	}
	if stop == nil {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		defer signal.Stop(sig)
		ch := make(chan struct{})
		go func() { <-sig; close(ch) }()
		stop = ch
	}
	stopTracing, err := startTracing(os.Environ(), log)
	if err != nil {
		fmt.Fprintf(stderr, "tollgated: %v\n", err)
		return 2
	}
	defer stopTracing()
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "tollgated: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "tollgated: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	d, err := startDaemon(cfg, log, stdout)
	if err != nil {
		log.Error().Err(err).Msg("start failed")
		return 1
	}
	select {
	case <-stop:
	case err := <-d.failed:
		// Fail-stop: what was acknowledged is on disk, and the safe
		// shutdown order would write to the ledger under a name another
		// process now holds.
		log.Error().Err(err).Msg("stopped without the safe shutdown")
		return 1
	}
	log.Info().Msg("shutting down")
	d.shutdown()
	log.Info().Msg("stopped")
	return 0
}

// useProcs gives the Go scheduler two slots (Ps) beyond one per shard.
// Each shard's locked thread holds a P whenever it is not blocked in a
// syscall: with only one P per CPU, the control plane, the garbage
// collector and the timers would run only in the gaps of the shards'
// syscalls, and a shard returning from one would wait for its P — tail
// latency. It never lowers GOMAXPROCS.
func useProcs(shards int) {
	if want := shards + 2; runtime.GOMAXPROCS(0) < want {
		runtime.GOMAXPROCS(want)
	}
}
