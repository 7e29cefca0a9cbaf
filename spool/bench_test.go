package spool

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"
)

// benchPayloadBytes is the size of a billed usage event.
const benchPayloadBytes = 128

// BenchmarkAppend measures the control plane's cost per event: a copy and
// a CRC under a mutex the flusher also takes. When the flusher falls behind
// (ErrFull) the timer stops while the spool drains, so the number is the
// append path only; the disk's pace is BenchmarkDurableThroughput's.
func BenchmarkAppend(b *testing.B) {
	s := openT(b, b.TempDir(), Options{})
	p := make([]byte, benchPayloadBytes)
	b.SetBytes(benchPayloadBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for {
			_, err := s.Append(p)
			if err == nil {
				break
			}
			if !errors.Is(err, ErrFull) {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := s.Sync(); err != nil {
				b.Fatal(err)
			}
			if err := s.Release(s.Durable()); err != nil { // keep the disk use bounded
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
}

// BenchmarkDurableThroughput appends 128-byte events as fast as one
// goroutine can while the flusher group-commits them, and reports events
// made durable per second, the mean fdatasync and events per fdatasync. At
// saturation the acknowledgement latency it also reports is queueing:
// MaxPendingBytes waiting for the disk.
func BenchmarkDurableThroughput(b *testing.B) {
	for _, c := range []struct {
		name     string
		interval time.Duration
	}{
		{"interval=2ms", 2 * time.Millisecond},
		{"interval=0", -1},
	} {
		b.Run(c.name, func(b *testing.B) { benchDurable(b, c.interval, 0) })
	}
}

// BenchmarkAckLatency offers 128-byte events at a steady rate, near what a
// node serves (50-500k requests/s), and reports the append-to-durable
// latency: how long a client waits for its usage to be acknowledged.
func BenchmarkAckLatency(b *testing.B) {
	for _, rate := range []int{50_000, 200_000} {
		b.Run("rate="+strconv.Itoa(rate/1000)+"k", func(b *testing.B) {
			benchDurable(b, DefaultFlushInterval, rate)
		})
	}
}

// sampleEvery is the stride of events whose acknowledgement latency is
// measured.
const sampleEvery = 16

// benchDurable appends b.N 128-byte events, at rate per second (0: as fast
// as possible), waits until all are durable, and reports the metrics.
func benchDurable(b *testing.B, interval time.Duration, rate int) {
	n := b.N
	// appendedAt[i] is when event i*sampleEvery+1 was appended. The
	// flusher reads it in OnDurable; Append's mutex orders the two.
	appendedAt := make([]time.Time, n/sampleEvery+1)
	lat := make([]time.Duration, 0, len(appendedAt))
	next := 0 // next sample OnDurable has not yet seen
	s := openT(b, b.TempDir(), Options{
		FlushInterval: interval,
		OnDurable: func(seq uint64) {
			now := time.Now()
			for ; next < len(appendedAt) && uint64(next*sampleEvery+1) <= seq; next++ {
				lat = append(lat, now.Sub(appendedAt[next]))
			}
		},
	})
	p := make([]byte, benchPayloadBytes)
	b.SetBytes(benchPayloadBytes)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < n; {
		if rate > 0 && i%64 == 0 {
			// Pace in bursts of 64: sleeping per event would measure the
			// timer, not the spool.
			due := start.Add(time.Duration(i) * time.Second / time.Duration(rate))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
		}
		if i%sampleEvery == 0 {
			appendedAt[i/sampleEvery] = time.Now()
		}
		if _, err := s.Append(p); err != nil {
			if !errors.Is(err, ErrFull) {
				b.Fatal(err)
			}
			time.Sleep(20 * time.Microsecond)
			continue
		}
		i++
	}
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	st := s.Stats()
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(st.MeanSync().Microseconds()), "fsync-µs")
	if st.Syncs > 0 {
		b.ReportMetric(float64(n)/float64(st.Syncs), "events/fsync")
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "ack-p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "ack-p99-µs")
	}
}

// BenchmarkRead measures the exporter reading durable 128-byte events back
// from disk (page cache), 1000 per call.
func BenchmarkRead(b *testing.B) {
	s := openT(b, b.TempDir(), Options{})
	p := make([]byte, benchPayloadBytes)
	const records = 200_000
	for range records {
		for {
			if _, err := s.Append(p); err == nil {
				break
			}
			s.Sync()
		}
	}
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(benchPayloadBytes)
	b.ReportAllocs()
	b.ResetTimer()
	var after uint64
	nop := func(uint64, []byte) error { return nil }
	for i := 0; i < b.N; {
		k := min(1000, b.N-i)
		last, err := s.Read(after, k, nop)
		if err != nil {
			b.Fatal(err)
		}
		i += int(last - after)
		after = last
		if after == records {
			after = 0
		}
	}
}
