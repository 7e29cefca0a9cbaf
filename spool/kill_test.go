//go:build unix

package spool

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

// killChildEnv names the spool directory for TestKill9Child.
const killChildEnv = "SPOOL_KILL9_CHILD_DIR"

// killPayloadBytes is the payload size the child appends.
const killPayloadBytes = 128

// TestKill9 runs a child process that appends as fast as it can and prints
// every durable seq it is told about, kills it with SIGKILL mid-stream, and
// checks that the spool holds every printed seq exactly once with its
// payload. Three rounds on one directory, so recovery also runs on a spool
// a previous kill left behind.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dir := t.TempDir()
	var maxPrinted uint64
	for round := range 3 {
		printed := runAndKill(t, dir, 100+100*round)
		if len(printed) == 0 {
			t.Fatalf("round %d: child printed no durable seq", round)
		}
		for _, seq := range printed {
			if seq <= maxPrinted {
				t.Fatalf("round %d: printed seq %d after %d", round, seq, maxPrinted)
			}
			maxPrinted = seq
		}

		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatalf("round %d: Open after kill -9: %v", round, err)
		}
		seen := make(map[uint64]int)
		var last uint64
		err = s.Replay(func(seq uint64, p []byte) error {
			seen[seq]++
			if seq != last+1 {
				return fmt.Errorf("replay seq %d after %d", seq, last)
			}
			last = seq
			if len(p) != killPayloadBytes {
				return fmt.Errorf("seq %d: %d-byte payload", seq, len(p))
			}
			return checkPayload(seq, p)
		})
		st := s.Stats()
		if cerr := s.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, seq := range printed {
			if seen[seq] != 1 {
				t.Fatalf("round %d: durable seq %d replayed %d times", round, seq, seen[seq])
			}
		}
		if last < maxPrinted {
			t.Fatalf("round %d: replay ends at %d, child saw %d durable", round, last, maxPrinted)
		}
		t.Logf("round %d: %d durable notices up to %d; %d records on disk, %d torn bytes cut",
			round, len(printed), maxPrinted, last, st.Truncated)
	}
}

// runAndKill starts the child on dir, lets it run until it has printed
// notices durable notices, kills it with SIGKILL and returns the seqs it
// printed on complete lines. The kill lands at whatever point of a flush
// the child has reached by then: counting notices rather than time keeps
// each round's work the same on a busy machine.
func runAndKill(t *testing.T, dir string, notices int) []uint64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9Child$", "-test.count=1")
	cmd.Env = append(os.Environ(), killChildEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		printed []uint64
		first   = make(chan struct{})
		once    sync.Once
		readErr = make(chan error, 1)
	)
	go func() {
		// ReadString returns a final unterminated line with an error: a
		// line cut by the kill is not counted.
		r := bufio.NewReader(out)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				readErr <- nil
				return
			}
			v, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "durable ")
			if !ok {
				continue
			}
			seq, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				readErr <- fmt.Errorf("child printed %q", line)
				return
			}
			mu.Lock()
			printed = append(printed, seq)
			mu.Unlock()
			once.Do(func() { close(first) })
		}
	}()
	select {
	case <-first:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("child printed nothing in 20 s")
	}
	if !await.Poll(await.Default, func() bool { mu.Lock(); defer mu.Unlock(); return len(printed) >= notices }) {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child printed fewer than %d durable notices", notices)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	if err := <-readErr; err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != -1 {
		t.Fatalf("child did not die by the signal: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return printed
}

// TestKill9Child is the child of TestKill9: it replays, then appends
// 128-byte payloads until killed (or 60 s pass), printing "durable N" for
// every OnDurable.
func TestKill9Child(t *testing.T) {
	dir := os.Getenv(killChildEnv)
	if dir == "" {
		t.Skip("run by TestKill9")
	}
	w := bufio.NewWriterSize(os.Stdout, 64)
	s, err := Open(dir, Options{
		SegmentBytes:  4 << 20, // a few rolls per round
		FlushInterval: 500 * time.Microsecond,
		OnDurable: func(seq uint64) {
			// One write per notice: what the parent reads was printed
			// after the seq was durable.
			fmt.Fprintf(w, "durable %d\n", seq)
			w.Flush()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Replay(func(uint64, []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	next := s.Stats().Appended + 1
	p := make([]byte, killPayloadBytes)
	stop := time.Now().Add(60 * time.Second)
	for time.Now().Before(stop) {
		fillPayload(p, next)
		seq, err := s.Append(p)
		if errors.Is(err, ErrFull) {
			waitForRoom(s)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if seq != next {
			t.Fatalf("Append seq %d, want %d", seq, next)
		}
		next++
		if next%64 == 0 {
			// A brief pause now and then, as between a node's request
			// bursts: many flushes of modest size rather than a few huge
			// ones, so the kill lands in all phases of a flush.
			pause(20 * time.Microsecond)
		}
	}
	s.Close()
}
