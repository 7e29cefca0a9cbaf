//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

// The README's shell commands, run as a newcomer would. Every ```sh block
// of README.md belongs to a section this file knows, and is run (or, for
// the few too long to run here, checked and named where CI runs them); a
// new block fails TestREADMECommandsAreAllRun until it is.
//
// Substitutions, so the commands can run beside anything on the machine:
// the quickstart's `export TOLLGATED_DATA_DIR=./quickstart-data …` line
// gets a temporary directory, and its `export TOLLGATED_LISTEN=…
// TOLLGATED_ADMIN=…` line free loopback ports; the script runs with job
// control on (`set -m`), as in an interactive shell, so `kill %1` stops the
// daemon's whole process group. Nothing else is changed.

// readmeBlock is one fenced block and the section (## heading) it is in.
// lang is the fence's language: sh for commands, go for code.
type readmeBlock struct {
	section string
	lang    string
	lines   []string
}

// readmeBlocks are the README's ```sh blocks.
func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	var sh []readmeBlock
	for _, b := range readmeFences(t) {
		if b.lang == "sh" {
			sh = append(sh, b)
		}
	}
	return sh
}

// readmeFences are all the README's fenced blocks.
func readmeFences(t *testing.T) []readmeBlock {
	t.Helper()
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []readmeBlock
	var section string
	var cur *readmeBlock
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, line)
		case strings.HasPrefix(line, "## "):
			section = strings.TrimPrefix(line, "## ")
		case strings.HasPrefix(line, "```"):
			cur = &readmeBlock{section: section, lang: strings.TrimPrefix(line, "```")}
		}
	}
	return blocks
}

// readmeSession are the sections whose blocks run in one shell, in order.
var readmeSession = []string{"Quickstart", "`tollgatectl`", "The dashboard"}

// TestREADMECommandsAreAllRun: every shell block is in a section this
// file runs.
func TestREADMECommandsAreAllRun(t *testing.T) {
	known := map[string]bool{"Two commands": true, "Measuring": true}
	for _, s := range readmeSession {
		known[s] = true
	}
	blocks := readmeBlocks(t)
	if len(blocks) < 5 {
		t.Fatalf("%d shell blocks in the README", len(blocks))
	}
	for _, b := range blocks {
		if !known[b.section] {
			t.Errorf("README section %q has a shell block no test runs: add it to readme_test.go", b.section)
		}
	}
	// Commands in a block of another language (```bash, ```console, or
	// none) would escape the tests above: commands are ```sh, code ```go.
	for _, b := range readmeFences(t) {
		if b.lang != "sh" && b.lang != "go" {
			t.Errorf("README section %q has a ```%s block: write commands as ```sh (run by this file), code as ```go", b.section, b.lang)
		}
	}
}

// freePort is a loopback address nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// cleanEnv is the test's environment without tollgated's own variables,
// which the README's commands set themselves.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOLLGATED_") && !strings.HasPrefix(kv, "TOLLGATE_") && !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// shell runs script with bash in the repository's root and returns its
// output. Every process it starts carries a mark in its environment, by
// which whatever is left when it ends (a daemon in a job's process group
// of its own, after a failure) is found and killed.
func shell(t *testing.T, script string, within time.Duration, env []string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	mark := fmt.Sprintf("TOLLGATED_README_TEST_MARK_%d=%d", os.Getpid(), time.Now().UnixNano())
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = "../.."
	cmd.Env = append(env, strings.TrimPrefix(mark, "TOLLGATED_"))
	cmd.WaitDelay = 5 * time.Second // a leftover holding the output open
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	killMarked([]byte(strings.TrimPrefix(mark, "TOLLGATED_")))
	return out.String(), err
}

// killMarked kills every process whose environment holds mark.
func killMarked(mark []byte) {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + p.Name() + "/environ")
		if err == nil && bytes.Contains(env, mark) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestREADMETwoCommands runs the first command as written: go run starts
// the daemon with its defaults (the test moves its ports and data
// directory with the TOLLGATED_* variables, since the command takes no
// flag), which prints the admin token it made once and gets ready. The
// second, make test, is what CI runs (.ci/run).
func TestREADMETwoCommands(t *testing.T) {
	var block readmeBlock
	for _, b := range readmeBlocks(t) {
		if b.section == "Two commands" {
			block = b
		}
	}
	var cmds []string
	for _, l := range block.lines {
		c, _, _ := strings.Cut(l, "#")
		if c = strings.TrimSpace(c); c != "" {
			cmds = append(cmds, c)
		}
	}
	if len(cmds) != 2 || cmds[0] != "go run ./cmd/tollgated" || cmds[1] != "make test" {
		t.Fatalf("the two commands are now %q: update this test", cmds)
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil || !regexp.MustCompile(`(?m)^make test$`).Match(ci) {
		t.Fatal(".ci/run does not run make test")
	}
	admin := freePort(t)
	script := cmds[0] + " & until curl -sf " + admin + "/healthz; do sleep 0.5; done; kill %1; wait"
	out, _ := shell(t, "set -m; "+script, 3*time.Minute, cleanEnv("TOLLGATED_LISTEN="+freePort(t), "TOLLGATED_ADMIN="+admin,
		"TOLLGATED_DATA_DIR="+t.TempDir()))
	for _, want := range []string{"admin token (shown once", `"tollgated ready"`, `{"status":"ok"}`} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in what the first command printed:\n%s", want, out)
		}
	}
}

// expectedOutput turns a README comment showing an answer ("# {…}", "…"
// standing for anything within a string) into a pattern.
func expectedOutput(comment string) *regexp.Regexp {
	text := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(comment), "#"))
	parts := strings.Split(text, "…")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	return regexp.MustCompile(strings.Join(parts, `[^"]*`))
}

// TestREADMEQuickstartInOneShell runs the quickstart, tollgatectl and
// dashboard blocks, in order, in one shell, as a newcomer pastes them,
// and checks every answer the README shows.
func TestREADMEQuickstartInOneShell(t *testing.T) {
	data, listen, admin := t.TempDir(), freePort(t), freePort(t)
	var script []string
	var expect []*regexp.Regexp
	substituted := 0
	for _, section := range readmeSession {
		for _, b := range readmeBlocks(t) {
			if b.section != section {
				continue
			}
			for _, l := range b.lines {
				switch {
				case strings.HasPrefix(l, "export TOLLGATED_DATA_DIR=./quickstart-data "):
					l = strings.Replace(l, "./quickstart-data", data, 1)
					substituted++
				case l == "export TOLLGATED_LISTEN=127.0.0.1:8180 TOLLGATED_ADMIN=127.0.0.1:9191":
					l = "export TOLLGATED_LISTEN=" + listen + " TOLLGATED_ADMIN=" + admin
					substituted++
				case strings.HasPrefix(l, "# {"):
					expect = append(expect, expectedOutput(l))
				}
				script = append(script, l)
			}
		}
	}
	if substituted != 2 {
		t.Fatalf("the quickstart's data directory and port lines changed (%d of 2 found): update this test", substituted)
	}
	if len(expect) < 3 {
		t.Fatalf("only %d answers shown in the README", len(expect))
	}
	// Each command's failure stops the script; job control as in a terminal.
	out, err := shell(t, "set -m -e -o pipefail\n"+strings.Join(script, "\n")+"\nwait\n", 6*time.Minute, cleanEnv())
	if err != nil {
		t.Fatalf("the README's commands failed: %v\n%s", err, out)
	}
	for _, re := range expect {
		if !re.MatchString(out) {
			t.Errorf("the README shows an answer %q that never came", re)
		}
	}
	// curl -s exits 0 on a refusal: none of the README's calls may get one.
	if p := regexp.MustCompile(`\{"type":"[^"]*","title":"[^"]*","status":\d+,"code":"[^"]*"[^}]*\}`).FindString(out); p != "" {
		t.Errorf("a README command was refused: %s", p)
	}
	for _, want := range []string{
		`"id":"acme"`, `"funds":{"can_spend":`, `"items":[{"id":`, // account, usage and list answers
		"acme (org)", "└─ ws-1 (workspace)", "key (shown once):", "token (shown once):", "OCCURRED", "account.create",
		"requests/s", "P99",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the session's output", want)
		}
	}
	if t.Failed() {
		t.Logf("the session's output:\n%s", out)
	}
	// kill %1 stopped the daemon: its admin port closes.
	if !await.Poll(await.Default, func() bool {
		resp, err := http.Get("http://" + admin + "/healthz")
		if err != nil {
			return true
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return false
	}) {
		t.Fatal("the quickstart's daemon still answers after kill %1")
	}
}

// TestREADMEMeasuring runs what of "Measuring" is quick (the load
// generator's help), checks that the rest parses, and that CI runs every
// command: make fuzz in .ci/run, the others through bench/smoke.sh with
// short settings (the README's own settings take minutes each).
func TestREADMEMeasuring(t *testing.T) {
	var cmds []string
	for _, b := range readmeBlocks(t) {
		if b.section != "Measuring" {
			continue
		}
		for _, l := range b.lines {
			if c, _, _ := strings.Cut(l, "#"); strings.TrimSpace(c) != "" {
				cmds = append(cmds, strings.TrimSpace(c))
			}
		}
	}
	// CI runs them: make fuzz as it is, the others through bench/smoke.sh
	// with short settings. Here each must be in one of the two, and parse.
	ciFile, _ := os.ReadFile("../../.ci/run")
	smoke, _ := os.ReadFile("../../bench/smoke.sh")
	var ciLines []string // what .ci/run runs, comments left out
	for _, l := range strings.Split(string(ciFile), "\n") {
		if c, _, _ := strings.Cut(l, "#"); strings.TrimSpace(c) != "" {
			ciLines = append(ciLines, strings.TrimSpace(c))
		}
	}
	ci := strings.Join(ciLines, "\n")
	if !strings.Contains(ci, "bash bench/smoke.sh") {
		t.Error(".ci/run does not run bench/smoke.sh")
	}
	for _, c := range cmds {
		var check string
		switch {
		case c == "go run ./cmd/loadtest --help":
			check = c
		case strings.HasPrefix(c, "make "):
			check = "make -n " + strings.Fields(c)[1] + " >/dev/null"
		case strings.HasPrefix(c, "bash "):
			script := strings.Fields(c)[1]
			check = "bash -n " + script
			c = "bash " + script // smoke.sh may pass other arguments
		default:
			t.Errorf("README command %q under Measuring: not known to this test", c)
			continue
		}
		if !strings.Contains(ci, c) && !smokes(string(smoke), c) {
			t.Errorf("README command %q under Measuring: neither .ci/run nor bench/smoke.sh runs it", c)
		}
		if out, err := shell(t, check, 3*time.Minute, cleanEnv()); err != nil {
			t.Errorf("%s: %v\n%s", check, err, out)
		}
	}
}

// smokes reports whether a step of bench/smoke.sh runs command c: its
// words, after any environment settings, start with c's.
func smokes(script, c string) bool {
	want := strings.Fields(c)
	for _, l := range strings.Split(script, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "step" {
			continue
		}
		f = f[1:]
		if len(f) > 0 && f[0] == "env" {
			f = f[1:]
			for len(f) > 0 && strings.Contains(f[0], "=") {
				f = f[1:]
			}
		}
		if len(f) >= len(want) && slices.Equal(f[:len(want)], want) {
			return true
		}
	}
	return false
}
