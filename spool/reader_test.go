package spool

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func TestReadLimitsAndResume(t *testing.T) {
	s := openT(t, t.TempDir(), Options{SegmentBytes: 2048})
	appendN(t, s, 300)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	var after uint64
	for after < 300 {
		first := uint64(0)
		last, err := s.Read(after, 7, func(seq uint64, p []byte) error {
			if first == 0 {
				first = seq
			}
			return checkPayload(seq, p)
		})
		if err != nil || first != after+1 || last != min(after+7, 300) {
			t.Fatalf("Read(%d, 7) = %d, %v (first %d)", after, last, err, first)
		}
		after = last
	}
	if last, err := s.Read(300, 10, func(uint64, []byte) error { t.Fatal("record past durable"); return nil }); err != nil || last != 300 {
		t.Fatalf("Read past the end = %d, %v", last, err)
	}
	// Random access, backwards, across segments.
	for _, after := range []uint64{250, 3, 120, 0, 299} {
		var got uint64
		if _, err := s.Read(after, 1, func(seq uint64, p []byte) error { got = seq; return checkPayload(seq, p) }); err != nil || got != after+1 {
			t.Fatalf("Read(%d, 1) gave %d, %v", after, got, err)
		}
	}
}

func TestReadArguments(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	nop := func(uint64, []byte) error { return nil }
	for _, limit := range []int{0, -1, MaxReadRecords + 1} {
		if _, err := s.Read(0, limit, nop); !errors.Is(err, ErrArgument) {
			t.Fatalf("Read limit %d = %v", limit, err)
		}
	}
	if _, err := s.Read(0, 1, nil); !errors.Is(err, ErrArgument) {
		t.Fatalf("Read nil fn = %v", err)
	}
	if err := s.Replay(nil); !errors.Is(err, ErrArgument) {
		t.Fatalf("Replay nil fn = %v", err)
	}
}

func TestReadCallbackError(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	appendN(t, s, 10)
	s.Sync()
	stop := errors.New("stop")
	last, err := s.Read(0, 10, func(seq uint64, _ []byte) error {
		if seq == 4 {
			return stop
		}
		return nil
	})
	if err != stop || last != 3 {
		t.Fatalf("Read = %d, %v; want 3, stop", last, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestReplayCallbackError(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	appendN(t, s, 10)
	s.Close()
	s = openT(t, dir, Options{})
	stop := errors.New("stop")
	n := 0
	if err := s.Replay(func(uint64, []byte) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("Replay = %v after %d", err, n)
	}
}

// The realistic case: one goroutine appends as fast as the spool lets it
// while the flusher runs, and an exporter reads durable records and
// releases them, with segments rolling and being deleted underneath.
func TestConcurrentAppendReadRelease(t *testing.T) {
	const n = 30000
	if testing.Short() {
		t.Skip("short")
	}
	dir := t.TempDir()
	// OnDurable runs before the spool publishes the mark it reports, so the
	// exporter reads the noted mark too: a notice it took while Durable
	// still said the old mark would otherwise be its last.
	moved := make(chan struct{}, 1) // Durable moved since the exporter last looked
	var noted atomic.Uint64
	s := openT(t, dir, Options{
		SegmentBytes:    64 << 10,
		FlushInterval:   500 * time.Microsecond,
		MaxPendingBytes: 1 << 20,
		MaxBatchBytes:   256 << 10,
		OnDurable: func(seq uint64) {
			for m := noted.Load(); seq > m && !noted.CompareAndSwap(m, seq); m = noted.Load() {
			}
			select {
			case moved <- struct{}{}:
			default:
			}
		},
	})
	deadline := time.Now().Add(30 * time.Second)
	appendErr := make(chan error, 1)
	go func() {
		for seq := uint64(1); seq <= n; {
			got, err := s.Append(payloadFor(seq))
			switch {
			case errors.Is(err, ErrFull) && time.Now().Before(deadline):
				waitForRoom(s)
				continue
			case err != nil:
				appendErr <- err
				return
			case got != seq:
				appendErr <- fmt.Errorf("Append seq %d, want %d", got, seq)
				return
			}
			seq++
		}
		appendErr <- s.Sync()
	}()

	var after uint64
	releases := 0
	for after < n {
		if time.Now().After(deadline) {
			t.Fatalf("exporter stuck at %d, durable %d", after, s.Durable())
		}
		last, err := s.Read(after, 512, func(seq uint64, p []byte) error {
			if seq != after+1 {
				return fmt.Errorf("Read seq %d after %d", seq, after)
			}
			if seq > s.Durable() {
				return fmt.Errorf("Read seq %d beyond durable %d", seq, s.Durable())
			}
			after = seq
			return checkPayload(seq, p)
		})
		if err != nil {
			t.Fatal(err)
		}
		if last != after {
			t.Fatalf("Read returned %d, delivered up to %d", last, after)
		}
		if last > 0 && last%4 == 0 {
			if err := s.Release(last); err != nil {
				t.Fatal(err)
			}
			releases++
		}
		if last == 0 || last < max(s.Durable(), noted.Load()) {
			runtime.Gosched() // the mark noted may be a moment from published
			continue
		}
		// Caught up: wait for the next flush (a notice sent since the
		// Durable above was read is still in the channel).
		select {
		case <-moved:
		case <-time.After(time.Until(deadline)):
		}
	}
	if err := <-appendErr; err != nil {
		t.Fatal(err)
	}
	if err := s.Release(n); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Segments != 1 || st.Released != n || st.Deleted == 0 || len(segFiles(t, dir)) != 1 {
		t.Fatalf("after releasing everything: %+v, files %v", st, segFiles(t, dir))
	}
	t.Logf("%d records, %d releases, %d flushes, %d ErrFull, %d segments deleted",
		n, releases, st.Flushes, st.Full, st.Deleted)
}
