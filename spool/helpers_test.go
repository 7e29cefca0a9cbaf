package spool

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// waitForRoom is what an appender refused with ErrFull does: it waits
// until what is pending is durable, which frees the room, instead of
// sleeping and trying again. A spool short of space answers at once (and
// the caller retries until its own bound).
func waitForRoom(s *Spool) {
	if s.Sync() != nil {
		runtime.Gosched()
	}
}

// pause busy-waits for d. Stress tests pause at points their seed picks,
// so that the flusher runs at different moments between the appends; a
// spin lasts about what was asked on a loaded machine, where a sleep lasts
// at least a timer tick (a millisecond or more).
func pause(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
		runtime.Gosched()
	}
}

// payloadFor is the payload the tests append as record seq: its length and
// bytes depend on seq only, so any reader can check what it got.
func payloadFor(seq uint64) []byte {
	return fillPayload(make([]byte, 100+seq%50), seq)
}

// fillPayload fills p with seq's pattern and returns it.
func fillPayload(p []byte, seq uint64) []byte {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seq)
	for i := range p {
		p[i] = b[i%8] ^ byte(i*7)
	}
	return p
}

// checkPayload fails unless p is what payloadFor(seq) or a fixed-size
// fillPayload(seq) produced.
func checkPayload(seq uint64, p []byte) error {
	want := fillPayload(make([]byte, len(p)), seq)
	if !bytes.Equal(p, want) {
		return errors.New("payload does not match its seq")
	}
	return nil
}

// openT opens a spool in dir and closes it when the test ends (unless the
// test closed it already).
func openT(t testing.TB, dir string, opts Options) *Spool {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// appendN appends payloadFor(seq) for the next n sequence numbers, retrying
// on ErrFull, and returns the last seq.
func appendN(t testing.TB, s *Spool, n int) uint64 {
	t.Helper()
	var last uint64
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < n; {
		want := s.Stats().Appended + 1
		seq, err := s.Append(payloadFor(want))
		if errors.Is(err, ErrFull) && time.Now().Before(deadline) {
			waitForRoom(s)
			continue
		}
		if err != nil {
			t.Fatalf("Append: %v", err)
		}
		if seq != want {
			t.Fatalf("Append seq %d, want %d", seq, want)
		}
		last = seq
		i++
	}
	return last
}

// replayAll replays s and returns the sequence numbers seen, checking that
// they are contiguous and that every payload matches its seq.
func replayAll(t testing.TB, s *Spool) []uint64 {
	t.Helper()
	var seqs []uint64
	err := s.Replay(func(seq uint64, p []byte) error {
		if n := len(seqs); n > 0 && seq != seqs[n-1]+1 {
			t.Fatalf("replay: seq %d after %d", seq, seqs[n-1])
		}
		if err := checkPayload(seq, p); err != nil {
			t.Fatalf("replay seq %d: %v", seq, err)
		}
		seqs = append(seqs, seq)
		return nil
	})
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	return seqs
}

// crash stops the spool the way kill -9 would as far as the spool's files
// are concerned: the flusher stops after the flush in progress (if any),
// records still in memory are lost, and nothing is synced or closed
// cleanly. The descriptors are closed only so the test can reopen.
func (s *Spool) crash() {
	s.abandon.Store(true)
	s.mu.Lock()
	s.closed = true
	poke(s.urge)
	s.mu.Unlock()
	<-s.done
	if s.seg != nil {
		s.seg.Close()
	}
	s.readMu.Lock()
	s.rd.close()
	s.readMu.Unlock()
	s.dirFile.Close()
	unlockDir(s.lock)
}

// segFiles lists the segment files in dir, in order.
func segFiles(t testing.TB, dir string) []string {
	t.Helper()
	firsts, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	paths := make([]string, len(firsts))
	for i, f := range firsts {
		paths[i] = filepath.Join(dir, segName(f))
	}
	return paths
}

// fileSize returns the size of path.
func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
