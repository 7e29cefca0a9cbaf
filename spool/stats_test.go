package spool

import (
	"testing"
	"time"
)

func TestSyncBucket(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int
	}{
		{0, 0}, {999 * time.Nanosecond, 0}, {time.Microsecond, 1}, {3 * time.Microsecond, 2},
		{time.Millisecond, 10}, {time.Hour, SyncBuckets - 1}, {-time.Second, 0},
	} {
		if got := syncBucket(c.d); got != c.want {
			t.Errorf("syncBucket(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

func TestStatsCount(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	appendN(t, s, 100)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Appended != 100 || st.Durable != 100 || st.Released != 0 || st.PendingBytes != 0 || st.Segments != 1 {
		t.Fatalf("marks: %+v", st)
	}
	if st.Flushes == 0 || st.Syncs < st.Flushes || st.FlushedBytes == 0 || st.SyncTotal <= 0 || st.SyncMax <= 0 {
		t.Fatalf("flush counters: %+v", st)
	}
	var hist uint64
	for _, n := range st.SyncHist {
		hist += n
	}
	if hist != st.Syncs {
		t.Fatalf("histogram holds %d syncs, Syncs = %d", hist, st.Syncs)
	}
	if m := st.MeanSync(); m <= 0 || m > st.SyncMax {
		t.Fatalf("MeanSync %v, max %v", m, st.SyncMax)
	}
	if (Stats{}).MeanSync() != 0 {
		t.Fatal("MeanSync of nothing")
	}
}

// Stats may be taken from any goroutine while the spool works, and its
// marks never contradict each other.
func TestStatsWhileRunning(t *testing.T) {
	s := openT(t, t.TempDir(), Options{FlushInterval: 100 * time.Microsecond})
	done := make(chan struct{})
	go func() {
		defer close(done)
		appendN(t, s, 5000)
	}()
	for {
		st := s.Stats()
		if st.Released > st.Durable || st.Durable > st.Appended {
			t.Fatalf("inconsistent marks: %+v", st)
		}
		select {
		case <-done:
			return
		default:
		}
	}
}
