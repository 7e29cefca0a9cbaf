package spool

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	if s.Durable() != 0 || s.Stats().Appended != 0 {
		t.Fatalf("fresh spool: %+v", s.Stats())
	}
	last := appendN(t, s, 1000)
	if last != 1000 {
		t.Fatalf("last seq %d", last)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if s.Durable() != 1000 {
		t.Fatalf("Durable after Sync = %d", s.Durable())
	}
	var n uint64
	got, err := s.Read(0, MaxReadRecords, func(seq uint64, p []byte) error {
		n++
		if seq != n {
			t.Fatalf("Read seq %d, want %d", seq, n)
		}
		return checkPayload(seq, p)
	})
	if err != nil || got != 1000 || n != 1000 {
		t.Fatalf("Read = %d, %v after %d records", got, err, n)
	}
}

func TestReplayAfterClose(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	appendN(t, s, 500)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v", err)
	}

	s = openT(t, dir, Options{})
	if st := s.Stats(); st.Durable != 500 || st.Appended != 500 {
		t.Fatalf("reopened: %+v", st)
	}
	if seqs := replayAll(t, s); len(seqs) != 500 || seqs[0] != 1 {
		t.Fatalf("replayed %d records", len(seqs))
	}
	// Replay may run again as long as nothing was appended.
	if seqs := replayAll(t, s); len(seqs) != 500 {
		t.Fatalf("second replay: %d records", len(seqs))
	}
	if seq, err := s.Append(payloadFor(501)); err != nil || seq != 501 {
		t.Fatalf("Append after replay = %d, %v", seq, err)
	}
	if err := s.Replay(func(uint64, []byte) error { return nil }); !errors.Is(err, ErrReplay) {
		t.Fatalf("Replay after Append = %v", err)
	}
}

func TestReplayAfterCrash(t *testing.T) {
	for round := range 5 {
		dir := t.TempDir()
		var onDurable atomic.Uint64
		s, err := Open(dir, Options{
			FlushInterval: 200 * time.Microsecond,
			SegmentBytes:  32 << 10,
			OnDurable: func(seq uint64) {
				if prev := onDurable.Swap(seq); seq <= prev {
					t.Errorf("OnDurable(%d) after %d", seq, prev)
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(uint64(round), 1))
		n := 2000 + r.IntN(3000)
		for i := range n {
			appendN(t, s, 1)
			if i%256 == 0 {
				pause(time.Duration(r.IntN(500)) * time.Microsecond)
			}
		}
		s.crash()
		durable := onDurable.Load()
		if s.Durable() > durable {
			t.Fatalf("Durable %d ahead of OnDurable %d", s.Durable(), durable)
		}

		s2 := openT(t, dir, Options{})
		seqs := replayAll(t, s2) // contiguous from 1, payloads checked
		if uint64(len(seqs)) < durable {
			t.Fatalf("round %d: replayed %d records, %d were durable", round, len(seqs), durable)
		}
		if len(seqs) > 0 && seqs[0] != 1 {
			t.Fatalf("replay starts at %d", seqs[0])
		}
		if uint64(len(seqs)) > uint64(n) {
			t.Fatalf("replayed %d records, only %d appended", len(seqs), n)
		}
		if seq, err := s2.Append(payloadFor(uint64(len(seqs) + 1))); err != nil || seq != uint64(len(seqs)+1) {
			t.Fatalf("Append after recovery = %d, %v", seq, err)
		}
		t.Logf("round %d: appended %d, durable %d at crash, replayed %d", round, n, durable, len(seqs))
	}
}

func TestAppendErrors(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	if _, err := s.Append(make([]byte, MaxPayload+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized Append = %v", err)
	}
	if seq, err := s.Append(make([]byte, MaxPayload)); err != nil || seq != 1 {
		t.Fatalf("MaxPayload Append = %d, %v", seq, err)
	}
	if seq, err := s.Append(nil); err != nil || seq != 2 {
		t.Fatalf("empty Append = %d, %v", seq, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close = %v", err)
	}
	if err := s.Sync(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync after Close = %v", err)
	}
	if _, err := s.Read(0, 1, func(uint64, []byte) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close = %v", err)
	}
	if err := s.Release(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Release after Close = %v", err)
	}
	if err := s.Replay(func(uint64, []byte) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Replay after Close = %v", err)
	}
}

func TestErrFullBackpressure(t *testing.T) {
	s := openT(t, t.TempDir(), Options{
		FlushInterval:   time.Second, // nothing flushes on its own during the test
		MaxPendingBytes: minMaxPendingBytes,
		MaxBatchBytes:   minMaxPendingBytes,
	})
	// The first record of an idle spool is flushed at once; after that the
	// flusher waits out the interval.
	appendN(t, s, 1)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 1000)
	var ok int
	for {
		_, err := s.Append(p)
		if errors.Is(err, ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ok++; ok > minMaxPendingBytes/len(p) {
			t.Fatalf("%d Appends of %d bytes never hit ErrFull", ok, len(p))
		}
	}
	st := s.Stats()
	if st.Full != 1 || st.PendingBytes > minMaxPendingBytes || st.PendingBytes+HeaderSize+len(p) <= minMaxPendingBytes {
		t.Fatalf("at ErrFull: %+v", st)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(p); err != nil {
		t.Fatalf("Append after Sync = %v", err)
	}
	if got := s.Stats().PendingBytes; got != HeaderSize+len(p) {
		t.Fatalf("pending after Sync and one Append = %d", got)
	}
}

// Appending must not allocate once the spool is warm: it is on the path of
// every billed request.
func TestAppendDoesNotAllocate(t *testing.T) {
	const runs = 5000
	s := openT(t, t.TempDir(), Options{})
	p := make([]byte, 128)
	appendRuns := func() {
		for range runs {
			if _, err := s.Append(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Warm up with the load that is measured: the chunks it needs are
	// then on the free list, which is what steady state means.
	for range 2 {
		appendRuns()
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if a := testing.AllocsPerRun(runs, func() {
		if _, err := s.Append(p); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("Append: %v allocs/op", a)
	}
}

// AllocsPerRun rounds down (a chunk allocated every 1800 appends would
// pass as 0), so count every allocation in the process across many appends
// and their flush. The interval and batch size keep the flusher from
// running during the appends, so they need the chunks the warm-up did.
func TestAppendAllocsCounted(t *testing.T) {
	const runs = 20000 // 2.9 MB: 12 chunks
	s := openT(t, t.TempDir(), Options{FlushInterval: time.Second, MaxBatchBytes: 8 << 20})
	p := make([]byte, 128)
	appendRuns := func() {
		for range runs {
			if _, err := s.Append(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Mallocs counts the runtime's own allocations too: a GC cycle's
	// workers allocate, and a GC empties the caches of the records the
	// runtime parks goroutines with (a contended mutex, a channel receive),
	// which refill by allocating. So keep the collector out and warm up
	// after the last collection; a few parking records may still be made
	// on a processor whose cache is empty, hence the small allowance, far
	// below one per chunk (12) or per append (20000).
	const runtimeAllowance = 3
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for range 3 {
		appendRuns()
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	appendRuns()
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if n := after.Mallocs - before.Mallocs; n > runtimeAllowance {
		t.Fatalf("%d Appends and their flush made %d allocations", runs, n)
	}
	if a := testing.AllocsPerRun(1000, func() { _ = s.Durable() }); a != 0 {
		t.Fatalf("Durable: %v allocs/op", a)
	}
	// Rejections are on the hot path too.
	big := make([]byte, MaxPayload+1)
	if a := testing.AllocsPerRun(1000, func() {
		if _, err := s.Append(big); !errors.Is(err, ErrTooLarge) {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("rejected Append: %v allocs/op", a)
	}
}

func TestSyncWithNothingPending(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	done := make(chan error)
	go func() { done <- s.Sync() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Sync on an empty spool did not return")
	}
}

func TestCloseFlushes(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{FlushInterval: time.Second})
	appendN(t, s, 1)
	s.Sync()
	appendN(t, s, 99) // waiting out the 1 s interval
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 800*time.Millisecond {
		t.Fatalf("Close waited %v for the interval", d)
	}
	s = openT(t, dir, Options{})
	if n := len(replayAll(t, s)); n != 100 {
		t.Fatalf("replayed %d, want 100", n)
	}
}

func TestOpenCreatesPrivateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "spool")
	openT(t, dir, Options{})
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Fatalf("dir mode %v, want 0700", perm)
	}
	if _, err := Open("", Options{}); !errors.Is(err, ErrArgument) {
		t.Fatalf("Open(\"\") = %v", err)
	}
}
