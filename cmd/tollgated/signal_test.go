package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/pgtest"
	"github.com/tollgated/tollgated/ledger/pgstore"
)

// TestMain lets the test binary act as tollgated itself, so the signal
// test below exercises the real process: flags, start-up, SIGTERM. Tests
// that need PostgreSQL get a throwaway one (internal/pgtest).
func TestMain(m *testing.M) {
	if os.Getenv("TOLLGATED_TEST_AS_DAEMON") == "1" {
		os.Args = append([]string{"tollgated"}, strings.Fields(os.Getenv("TOLLGATED_TEST_ARGS"))...)
		// Not tollgated's own variables: it would report them as unknown.
		os.Unsetenv("TOLLGATED_TEST_AS_DAEMON")
		os.Unsetenv("TOLLGATED_TEST_ARGS")
		clockForTests = serveTestClock()
		main()
		return
	}
	os.Exit(pgtest.Main(m, pgtest.Options{Prepare: pgstore.Migrate}))
}

func TestSIGTERMStopsGracefully(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "TOLLGATED_TEST_AS_DAEMON=1",
		"TOLLGATED_TEST_ARGS=--listen 127.0.0.1:0 --admin 127.0.0.1:0 --data-dir "+t.TempDir()+" --shards 2 --demo-key k --shutdown-grace 2s")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitFor := func(what string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("process ended before %q", what)
				}
				if strings.Contains(l, what) {
					return
				}
			case <-deadline:
				t.Fatalf("no %q within 10s", what)
			}
		}
	}
	waitFor("tollgated ready")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(`"stopped"`)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("did not exit after SIGTERM")
	}
}
