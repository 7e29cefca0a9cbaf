package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgated/tollgated/affinity"
)

// config is everything tollgated is started with. Every flag has an
// environment variable, TOLLGATED_ followed by the flag's name in capitals
// with '-' as '_'; a flag on the command line wins over the environment.
type config struct {
	listen        string
	admin         string
	shards        int
	cpus          []int
	dataDir       string
	logLevel      zerolog.Level
	shutdownGrace time.Duration
	maxInFlight   int // reservations in flight per shard
}

// errHelp and errVersion end start-up successfully before any set-up.
var (
	errHelp    = errors.New("help requested")
	errVersion = errors.New("version requested")
)

// parseConfig reads args and the environment. It touches nothing else, so
// --help and --version work on any machine.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("tollgated", flag.ContinueOnError)
	fs.SetOutput(out)
	var c config
	var cpus, level string
	var help, version bool
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "data-plane listen address (every shard binds it with SO_REUSEPORT)")
	fs.StringVar(&c.admin, "admin", "127.0.0.1:9091", "admin API listen address (loopback by default)")
	fs.IntVar(&c.shards, "shards", 0, "number of shards (default: one per allowed CPU)")
	fs.StringVar(&cpus, "cpus", "", "CPUs to pin shards to, Linux cpulist syntax such as 0-3,6 (default: the CPUs this process may use)")
	fs.StringVar(&c.dataDir, "data-dir", "./tollgated-data", "directory for the ledger and the usage spool")
	fs.StringVar(&level, "log-level", "info", "log level: debug, info, warn, error")
	fs.DurationVar(&c.shutdownGrace, "shutdown-grace", 10*time.Second, "how long SIGTERM waits for in-flight requests")
	fs.IntVar(&c.maxInFlight, "max-in-flight", 1<<16, "reservations in flight per shard")
	fs.BoolVar(&help, "help", false, "print this help and exit")
	fs.BoolVar(&version, "version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(out, "tollgated — admission and metering daemon\n\nUsage: tollgated [flags]\n\nFlags (each also read from TOLLGATED_<NAME>):\n")
		fs.PrintDefaults()
	}
	if err := applyEnv(fs, getenv); err != nil {
		return c, err
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, errHelp
		}
		return c, err
	}
	if help {
		fs.Usage()
		return c, errHelp
	}
	if version {
		return c, errVersion
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return c, c.finish(cpus, level)
}

// applyEnv sets each flag from its environment variable, if present.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "help" || f.Name == "version" || err != nil {
			return
		}
		name := "TOLLGATED_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %v", name, v, e)
			}
		}
	})
	return err
}

func (c *config) finish(cpus, level string) error {
	lv, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	c.logLevel = lv
	if cpus != "" {
		if c.cpus, err = affinity.ParseList(cpus); err != nil {
			return fmt.Errorf("--cpus: %v", err)
		}
	}
	if c.shards < 0 || c.shards > 1024 {
		return fmt.Errorf("--shards %d: want 0 (one per CPU) to 1024", c.shards)
	}
	if c.maxInFlight < 1 || c.maxInFlight > 1<<24 {
		return fmt.Errorf("--max-in-flight %d: want 1 to %d", c.maxInFlight, 1<<24)
	}
	if c.shutdownGrace <= 0 {
		return fmt.Errorf("--shutdown-grace must be positive")
	}
	return nil
}
