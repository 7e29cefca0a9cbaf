// Command tollgated is the admission daemon: one pinned shard per CPU, each
// owning its accounts' admission state, and a control plane behind them.
//
// It keeps its ledger and usage spool in --data-dir, serves the data plane
// on --listen and the admin API on --admin, and shuts down in the safe
// order on SIGTERM (see docs/DESIGN.md). "tollgated spool verify" and
// "tollgated spool quarantine" examine and repair a damaged usage spool
// (docs/RUNBOOK.md). The node itself is assembled by package daemon.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/tollgated/tollgated/clock"
	"github.com/tollgated/tollgated/daemon"
	"github.com/tollgated/tollgated/invariant"
)

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
	log := newLogger(cfg, stderr)
	if stop == nil {
		var stopSignals func()
		stop, stopSignals = signalled()
		defer stopSignals()
	}
	stopTracing, err := startTracing(os.Environ(), log)
	if err != nil {
		fmt.Fprintf(stderr, "tollgated: %v\n", err)
		return 2
	}
	defer stopTracing()
	if cfg.cpuProfile != "" {
		stopProfile, err := startProfile(cfg.cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "tollgated: %v\n", err)
			return 1
		}
		defer stopProfile()
	}
	dcfg, err := cfg.daemonConfig()
	if err != nil {
		log.Error().Err(err).Msg("start failed")
		return 1
	}
	dcfg.Clock = clockForTests
	useProcs(len(dcfg.CPUs))
	d, err := daemon.Open(dcfg, log, stdout)
	if err != nil {
		log.Error().Err(err).Msg("start failed")
		return 1
	}
	select {
	case <-stop:
	case err := <-d.Failed():
		// Fail-stop: what was acknowledged is on disk, and the safe
		// shutdown order would write to the ledger under a name another
		// process now holds.
		log.Error().Err(err).Msg("stopped without the safe shutdown")
		return 1
	}
	log.Info().Msg("shutting down")
	d.Close()
	log.Info().Msg("stopped")
	return 0
}

// clockForTests is nil (the wall clock) except where this package's tests
// run their own binary as the daemon (TestMain): they advance it to say
// "an hour later" without waiting an hour.
var clockForTests *clock.Clock

// newLogger is the process's logger at the configured level. It also
// logs every broken invariant, and warns of TOLLGATED_ variables no flag
// reads: the names come from the process environment (getenv answers
// values only), and a typo is a name no flag asks for.
func newLogger(cfg config, stderr io.Writer) zerolog.Logger {
	log := zerolog.New(stderr).Level(cfg.logLevel).With().Timestamp().Logger()
	invariant.OnViolation(func(k invariant.Kind, detail string) {
		log.Error().Str("invariant", k.String()).Str("detail", detail).Msg("BUG: a broken invariant (tollgated_invariant_violations_total)")
	})
	for _, name := range unknownEnv(os.Environ(), cfg.knownEnv) {
		log.Warn().Str("variable", name).Msg("unknown TOLLGATED_ environment variable: no flag reads it, so it does nothing (see --help)")
	}
	return log
}

// signalled is closed on SIGTERM or SIGINT; release stops listening.
func signalled() (stop <-chan struct{}, release func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	ch := make(chan struct{})
	go func() { <-sig; close(ch) }()
	return ch, func() { signal.Stop(sig) }
}

// startProfile writes a CPU profile of the run to path until stop.
func startProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
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
