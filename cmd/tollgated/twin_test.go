//go:build linux

package main

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

// twin is a tollgated process started without waiting for it.
type twin struct {
	cmd    *exec.Cmd
	stderr syncBuffer
	exited chan struct{}
}

func startTwin(t *testing.T, args ...string) *twin {
	t.Helper()
	w := &twin{exited: make(chan struct{})}
	w.cmd = exec.Command(os.Args[0])
	w.cmd.Env = append(os.Environ(), "TOLLGATED_TEST_AS_DAEMON=1", "TOLLGATED_TEST_ARGS="+strings.Join(args, " "),
		"TOLLGATED_ADMIN_TOKEN="+testAdminToken)
	if bin := os.Getenv("TOLLGATED_TEST_BINARY"); bin != "" {
		w.cmd = exec.Command(bin, args...)
		w.cmd.Env = append(os.Environ(), "TOLLGATED_ADMIN_TOKEN="+testAdminToken)
	}
	w.cmd.Stderr = &w.stderr
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.cmd.Wait(); close(w.exited) }()
	t.Cleanup(func() { w.cmd.Process.Kill(); <-w.exited })
	return w
}

// outcome waits until the twin is ready ("ready") or has exited
// ("exited <status>"), for at most within.
func (w *twin) outcome(within time.Duration) string {
	got := "neither ready nor exited"
	await.Poll(within, func() bool {
		select {
		case <-w.exited:
			got = "exited " + strconv.Itoa(w.cmd.ProcessState.ExitCode())
			return true
		default:
		}
		if strings.Contains(w.stderr.String(), "tollgated ready") {
			got = "ready"
			return true
		}
		return false
	})
	return got
}

// TestTwinStartsOnOneAddressLeaveOneDaemon: two daemons started at the
// same instant on one address, with their own data directories, eight
// times: each time exactly one serves, and the other exits non-zero naming
// the address. The data-plane address is spelled differently by the two
// (a wildcard and loopback overlap on the port) every other time; every
// fourth time they share the admin address instead (so each way of
// sharing comes at least twice). SO_REUSEPORT, which every shard's
// listener needs, would let both bind the port; the claim on the port is
// what stops the second.
func TestTwinStartsOnOneAddressLeaveOneDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	for i := range 8 {
		_, port, _ := net.SplitHostPort(freePort(t))
		spellings := [2]string{"127.0.0.1:" + port, "127.0.0.1:" + port}
		if i%2 == 1 {
			spellings[1] = ":" + port
		}
		listen, admin := func(j int) string { return spellings[j] }, func(int) string { return "127.0.0.1:0" }
		if i%4 == 3 {
			listen, admin = admin, listen
		}
		var twins [2]*twin
		var wg sync.WaitGroup
		start := make(chan struct{})
		for j := range twins {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				twins[j] = startTwin(t, "--listen", listen(j), "--admin", admin(j), "--data-dir", t.TempDir(),
					"--shards", "2", "--shutdown-grace", "1s")
			}()
		}
		close(start)
		wg.Wait()
		var outcomes [2]string
		for j, w := range twins {
			outcomes[j] = w.outcome(20 * time.Second)
		}
		ready := 0
		for j, o := range outcomes {
			switch {
			case o == "ready":
				ready++
			case o == "exited 1":
				if s := twins[j].stderr.String(); !strings.Contains(s, "already served by another process") || !strings.Contains(s, spellings[j]) {
					t.Fatalf("try %d: the refused twin did not say why:\n%s", i, s)
				}
				if i < 4 {
					t.Logf("try %d: %s", i, lastLine(twins[j].stderr.String()))
				}
			default:
				t.Fatalf("try %d: twin %d %s:\n%s", i, j, o, twins[j].stderr.String())
			}
		}
		if ready != 1 {
			t.Fatalf("try %d on port %s: %d twins serve (%v), want exactly one", i, port, ready, outcomes)
		}
		for _, w := range twins {
			w.cmd.Process.Signal(syscall.SIGTERM)
			<-w.exited
		}
	}
}

// TestListenAndAdminOnOnePortAreRefused: the two listeners of one daemon
// cannot share a port; the refusal says so rather than blame another
// process.
func TestListenAndAdminOnOnePortAreRefused(t *testing.T) {
	addr := freePort(t)
	code, stderr := runFailingProc(t, "--listen", addr, "--admin", addr, "--data-dir", t.TempDir(), "--shards", "1")
	if code != 1 || !strings.Contains(stderr, "use the same port") {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
}
