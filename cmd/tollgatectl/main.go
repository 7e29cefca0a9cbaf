// Command tollgatectl operates a tollgated node through its admin API:
// accounts and their tree, budgets, deposits and policies, API keys,
// platform and admin tokens, usage, leases, the audit log, and a live view
// of the node's traffic (top). It prints tables for people, or with --json
// the API's own JSON for scripts. An error answer (problem+json) is shown
// with its status, stable code and detail, and the exit status is 1 (2 for
// a command used wrongly).
//
//	export TOLLGATE_ADMIN_URL=http://127.0.0.1:9091 TOLLGATE_ADMIN_TOKEN=tga_…
//	tollgatectl accounts tree
//	tollgatectl keys create acme --name "ci runner"
//	tollgatectl top
//	tollgatectl --version
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// app is what every command shares: the global flags, the client they
// make, and where output goes.
type app struct {
	url, token, tokenFile string
	json                  bool
	timeout               time.Duration
	out, errOut           io.Writer
	getenv                func(string) string
	c                     *client
}

// defaultURL is the admin API's address when neither --url nor
// TOLLGATE_ADMIN_URL names one: tollgated's default --admin.
const defaultURL = "http://127.0.0.1:9091"

// group is a command that only holds others. Given a word that names none
// of them it fails (exit 2) instead of printing its help.
func group(use, short string, aliases ...string) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Aliases: aliases, Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())}
			}
			return cmd.Help()
		},
	}
}

// usageError marks an error in how the command was used (exit 2).
type usageError struct{ error }

// run is main without the process: it returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	a := &app{out: stdout, errOut: stderr}
	root := a.rootCommand(getenv)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var p *problem
	var u usageError
	switch {
	case errors.As(err, &p):
		fmt.Fprintf(stderr, "tollgatectl: %v\n", p)
		return 1
	case errors.As(err, &u), isCobraUsage(err):
		fmt.Fprintf(stderr, "tollgatectl: %v\n(see %s --help)\n", err, strings.Join(append([]string{"tollgatectl"}, commandPath(root, args)...), " "))
		return 2
	default:
		fmt.Fprintf(stderr, "tollgatectl: %v\n", err)
		return 1
	}
}

// isCobraUsage recognises cobra's own complaints about arguments and
// flags, which it returns as plain errors.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, s := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires at least",
		"flag needs an argument", "invalid argument", "required flag"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// commandPath is the words of args that name a command (for the hint).
func commandPath(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd == root {
		return nil
	}
	return strings.Fields(strings.TrimPrefix(cmd.CommandPath(), root.Name()+" "))
}

func (a *app) rootCommand(getenv func(string) string) *cobra.Command {
	root := &cobra.Command{
		Use:   "tollgatectl",
		Short: "Operate a tollgated node through its admin API",
		Long: `tollgatectl operates a tollgated node through its admin API.

It reads the API's address from --url or TOLLGATE_ADMIN_URL (default
http://127.0.0.1:9091) and the admin token from --token, --token-file or
TOLLGATE_ADMIN_TOKEN. Output is a table (times in RFC 3339, UTC); --json
prints the API's JSON. Errors from the API are shown with their status and
stable code, exit 1; a command used wrongly exits 2. What a token may do is
its role's (tollgatectl whoami).`,
		Example: `  export TOLLGATE_ADMIN_URL=http://127.0.0.1:9091 TOLLGATE_ADMIN_TOKEN=tga_…
  tollgatectl accounts create acme
  tollgatectl budgets set acme --allowance 100000 --period day
  tollgatectl keys create acme --name "ci runner"
  tollgatectl accounts tree
  tollgatectl top
  source <(tollgatectl completion bash)   # completes commands, account and key ids`,
		Version:       versionString(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.connect(cmd)
		},
	}
	a.getenv = getenv
	f := root.PersistentFlags()
	f.StringVar(&a.url, "url", "", "admin API URL (default TOLLGATE_ADMIN_URL, else "+defaultURL+")")
	f.StringVar(&a.token, "token", "", "admin token (default TOLLGATE_ADMIN_TOKEN; a flag's value shows in ps: prefer the variable or --token-file)")
	f.StringVar(&a.tokenFile, "token-file", "", "read the admin token from this file")
	f.BoolVar(&a.json, "json", false, "print the API's JSON instead of a table")
	f.DurationVar(&a.timeout, "timeout", 30*time.Second, "time allowed for each API call")
	root.AddCommand(a.accountsCommand(), a.budgetsCommand(), a.depositsCommand(), a.keysCommand(),
		a.platformTokensCommand(), a.adminTokensCommand(), a.whoamiCommand(), a.usageCommand(), a.leasesCommand(),
		a.auditCommand(), a.eventsCommand(), a.topCommand(), a.importCommand(), a.healthCommand(), a.versionCommand())
	root.SetVersionTemplate("tollgatectl {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	return root
}

// connect makes the client from the global flags.
func (a *app) connect(cmd *cobra.Command) error {
	if cmd.Name() == "completion" || cmd.HasParent() && cmd.Parent().Name() == "completion" || cmd.Name() == "version" {
		return nil
	}
	if a.url == "" {
		a.url = a.getenv("TOLLGATE_ADMIN_URL")
	}
	if a.url == "" {
		a.url = defaultURL
	}
	if a.tokenFile != "" {
		if a.token != "" {
			return usageError{errors.New("give --token or --token-file, not both")}
		}
		b, err := os.ReadFile(a.tokenFile)
		if err != nil {
			return err
		}
		a.token = strings.TrimSpace(string(b))
	}
	if a.token == "" && a.tokenFile == "" {
		a.token = a.getenv("TOLLGATE_ADMIN_TOKEN")
	}
	c, err := newClient(a.url, a.token, a.timeout)
	if err != nil {
		return usageError{err}
	}
	a.c = c
	return nil
}

// healthCommand asks the node's /healthz, which needs no token: exit 0
// when it answers 200, else 1. The container image's HEALTHCHECK runs it.
func (a *app) healthCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "health",
		Short: "Check the node's health (GET /healthz, no token needed): exit 0 when healthy",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := a.c.health(cmd.Context())
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(raw)
			}
			fmt.Fprintln(a.out, "healthy")
			return nil
		},
	}
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print tollgatectl's version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintln(a.out, "tollgatectl", versionString())
			return nil
		},
	}
}
