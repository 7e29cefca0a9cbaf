package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/tollgated/tollgated/daemon"
	"github.com/tollgated/tollgated/spool"
)

// Exit statuses of the spool subcommands.
const (
	exitClean   = 0 // verify: nothing damaged; quarantine: done, or nothing to do
	exitDamaged = 1 // verify: damage found (the report says whether start-up refuses)
	exitUsage   = 2 // bad arguments, or the spool could not be read (in use, missing)
)

const spoolUsage = `Usage: tollgated spool verify|quarantine [--data-dir D]

verify      reads every unreleased record of D/spool, reports each damaged
            stretch with its file and offset, the records lost, and whether
            tollgated would start; exits 0 if clean, 1 if damaged, 2 if it
            could not check (tollgated running, no such directory).
quarantine  moves a damaged spool aside to D/spool-quarantine/<time>/ and
            puts in its place a spool of every record that still checks, so
            tollgated starts and bills them. The records reported lost are
            never billed; what remains of their bytes is in the quarantine
            directory, with a report. Stop tollgated first. See docs/RUNBOOK.md.

Flags:
`

// runSpool runs "tollgated spool <command>" and returns the exit status.
func runSpool(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tollgated spool", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "./tollgated-data", "tollgated's data directory (also TOLLGATED_DATA_DIR)")
	if v := getenv("TOLLGATED_DATA_DIR"); v != "" {
		*dataDir = v
	}
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), spoolUsage)
		fs.PrintDefaults()
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		fs.SetOutput(stdout)
		fs.Usage()
		if len(args) == 0 {
			return exitUsage
		}
		return exitClean
	}
	command := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitClean
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tollgated spool %s: unexpected argument %q\n", command, fs.Arg(0))
		return exitUsage
	}
	dir := filepath.Join(*dataDir, daemon.SpoolDir)
	switch command {
	case "verify":
		return spoolVerify(dir, stdout, stderr)
	case "quarantine":
		dest := filepath.Join(*dataDir, "spool-quarantine", time.Now().UTC().Format("20060102T150405Z"))
		return spoolQuarantine(dir, dest, stdout, stderr)
	}
	fmt.Fprintf(stderr, "tollgated spool: unknown command %q (verify or quarantine)\n", command)
	return exitUsage
}

func spoolVerify(dir string, stdout, stderr io.Writer) int {
	rep, err := spool.Verify(dir)
	if err != nil {
		fmt.Fprintf(stderr, "tollgated spool verify: %v%s\n", err, inUseHint(err))
		return exitUsage
	}
	rep.WriteText(stdout)
	if rep.Clean() {
		return exitClean
	}
	if rep.Start != nil {
		fmt.Fprintf(stdout, "tollgated will not start on this spool: `tollgated spool quarantine` moves it aside and keeps the %d good records (docs/RUNBOOK.md)\n", rep.Records)
	}
	return exitDamaged
}

func spoolQuarantine(dir, dest string, stdout, stderr io.Writer) int {
	q, err := spool.Quarantine(dir, dest)
	if err != nil {
		fmt.Fprintf(stderr, "tollgated spool quarantine: %v%s\n", err, inUseHint(err))
		return exitUsage
	}
	q.Report.WriteText(stdout)
	if q.Moved == "" {
		fmt.Fprintln(stdout, "nothing to quarantine: the spool is clean")
		return exitClean
	}
	fmt.Fprintf(stdout, "quarantined: the original spool is now %s (every byte of it, with QUARANTINED.txt)\n", q.Moved)
	fmt.Fprintf(stdout, "kept: %d records in a new %s; tollgated bills them when it starts\n", q.Kept, dir)
	if n := q.Report.LostRecords(); n > 0 {
		fmt.Fprintf(stdout, "lost: %d records (sequence numbers above): any not billed before the damage never will be; reconcile them by hand (docs/RUNBOOK.md)\n", n)
	}
	return exitClean
}

func inUseHint(err error) string {
	if errors.Is(err, spool.ErrLocked) {
		return " (tollgated is running on this data directory: stop it first)"
	}
	return ""
}
