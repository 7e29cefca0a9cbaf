//go:build linux

package spool

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tollgated/tollgated/affinity"
)

// syncBatchBytes is one group-commit batch under load: 64 connections each
// waiting on a 180-byte record. It is not a multiple of the page size, so
// every sync rewrites a partial page, as the flusher's do.
const syncBatchBytes = 64 * 180

// syncRegionBytes is how much each variant writes before it starts over in
// a fresh file (with the timer stopped).
const syncRegionBytes = 4 << 20

// BenchmarkSync measures what the durable path pays per batch: one write of
// syncBatchBytes and one fdatasync, into a file that is
//
//   - append: grown by every write (O_APPEND), as segments were before
//     preallocation; each fdatasync also writes the inode for the new size;
//   - zeroed: written with zeros and fdatasync'd beforehand, then
//     overwritten in place with pwrite: the size never changes;
//   - fallocate: reserved with fallocate(2) mode 0 (unwritten extents, size
//     set), then written in place: each sync converts extents;
//   - fallocate-keep: reserved with FALLOC_FL_KEEP_SIZE, then written at the
//     end of the file: the size still changes on every write.
//
// It reports the CPU the calling thread spent per write+fdatasync
// (cpu-µs/sync, from its schedstat) and the wall latency of the fdatasync
// alone (p50, p99). One run measures the variants one after the other; on a
// noisy machine repeat the run (not -count, which repeats each variant in a
// row) and take medians across rounds.
func BenchmarkSync(b *testing.B) {
	for _, v := range []struct {
		name    string
		prepare func(f *os.File) error
		inPlace bool
	}{
		{"append", nil, false},
		{"zeroed", prepareZeroed, true},
		{"fallocate", func(f *os.File) error { return unix.Fallocate(int(f.Fd()), 0, 0, syncRegionBytes) }, true},
		{"fallocate-keep", func(f *os.File) error {
			return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, syncRegionBytes)
		}, false},
	} {
		b.Run(v.name, func(b *testing.B) { benchSync(b, v.prepare, v.inPlace) })
	}
}

// prepareZeroed writes zeros over the whole region and makes them durable.
func prepareZeroed(f *os.File) error {
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < syncRegionBytes; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros, off); err != nil {
			return err
		}
	}
	return nil
}

func benchSync(b *testing.B, prepare func(*os.File) error, inPlace bool) {
	lat, cpu := runSyncs(b, prepare, inPlace)
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e3, "cpu-µs/sync")
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// runSyncs does b.N writes of syncBatchBytes, each followed by an
// fdatasync, and returns the fdatasyncs' latencies, sorted, and the CPU the
// thread spent.
func runSyncs(b *testing.B, prepare func(*os.File) error, inPlace bool) ([]time.Duration, time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dir := b.TempDir()
	batch := make([]byte, syncBatchBytes)
	for i := range batch {
		batch[i] = byte(i) | 1
	}
	lat := make([]time.Duration, 0, b.N)
	var f *os.File
	var off int64
	fresh := func() {
		b.StopTimer()
		if f != nil {
			f.Close()
		}
		var err error
		flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		if !inPlace {
			flags |= os.O_APPEND
		}
		f, err = os.OpenFile(filepath.Join(dir, "seg"), flags, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		if prepare != nil {
			if err := prepare(f); err != nil {
				b.Fatal(err)
			}
		}
		if err := unix.Fsync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
		off = 0
		b.StartTimer()
	}
	fresh()
	var cpu time.Duration
	cpu0 := threadCPU(b)
	for i := 0; i < b.N; i++ {
		if off+syncBatchBytes > syncRegionBytes {
			cpu += threadCPU(b) - cpu0
			fresh()
			cpu0 = threadCPU(b)
		}
		var err error
		if inPlace {
			_, err = unix.Pwrite(int(f.Fd()), batch, off)
		} else {
			_, err = unix.Write(int(f.Fd()), batch)
		}
		if err != nil {
			b.Fatal(err)
		}
		off += syncBatchBytes
		start := time.Now()
		if err := datasync(f); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	cpu += threadCPU(b) - cpu0
	b.StopTimer()
	f.Close()
	slices.Sort(lat)
	return lat, cpu
}

// BenchmarkSyncBesideABusyCPU runs BenchmarkSync's zeroed variant from a
// thread pinned to the last CPU, first with CPU 0 idle, then with a thread
// spinning there: where bench/http.sh runs the server and the load
// generator. On the 2-CPU VM this project is measured on, the busy
// neighbour makes fdatasync stall for up to 15 ms about every 100 ms,
// with no other I/O in flight — a tail that every durable answer inherits
// and a bare server, which never syncs, does not (BENCHMARKS.md). It
// reports p50, p99, the longest sync, the syncs over 2 ms per second spent
// syncing, and the share of that time spent in syncs over 1 ms: a request
// arriving at a random moment waits behind such a sync with about that
// chance, so above 1% it puts a durable answer's p99 over 1 ms.
func BenchmarkSyncBesideABusyCPU(b *testing.B) {
	cpus, err := affinity.Allowed()
	if err != nil || len(cpus) < 2 {
		b.Skip("needs two CPUs to pin to")
	}
	for _, busy := range []bool{false, true} {
		name := "neighbour=idle"
		if busy {
			name = "neighbour=spinning"
		}
		b.Run(name, func(b *testing.B) {
			stop, done := make(chan struct{}), make(chan struct{})
			if busy {
				go spinOn(cpus[0], stop, done)
			} else {
				close(done)
			}
			defer func() { close(stop); <-done }()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if err := affinity.Pin(cpus[len(cpus)-1]); err != nil {
				b.Skip(err)
			}
			defer affinity.Unpin()
			lat, _ := runSyncs(b, prepareZeroed, true)
			var total, slow time.Duration
			stalls := 0
			for _, d := range lat {
				total += d
				if d > time.Millisecond {
					slow += d
				}
				if d > 2*time.Millisecond {
					stalls++
				}
			}
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
			b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds())/1e3, "max-µs")
			b.ReportMetric(float64(stalls)/total.Seconds(), "stalls>2ms/s")
			b.ReportMetric(100*slow.Seconds()/total.Seconds(), "%time-in-syncs>1ms")
		})
	}
}

// spinOn keeps cpu busy in user space until stop is closed.
func spinOn(cpu int, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if affinity.Pin(cpu) != nil {
		return
	}
	defer affinity.Unpin()
	for x := uint64(1); ; x = x*6364136223846793005 + 1 {
		if x&0xfffff == 0 {
			select {
			case <-stop:
				return
			default:
			}
		}
	}
}

// threadCPU is the CPU time the calling OS thread has run, from the first
// field of its schedstat (nanoseconds on the CPU).
func threadCPU(b *testing.B) time.Duration {
	raw, err := os.ReadFile("/proc/thread-self/schedstat")
	if err != nil {
		b.Fatal(err)
	}
	ns, err := strconv.ParseInt(strings.Fields(string(raw))[0], 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return time.Duration(ns)
}

// BenchmarkSyncGrow measures what growing a file by one step of zeros costs
// (write and fdatasync at the end of a file that already holds data), the
// stall a segment's growth puts on the flusher once per step.
func BenchmarkSyncGrow(b *testing.B) {
	for _, step := range []int64{256 << 10, 1 << 20, 4 << 20} {
		b.Run("step="+strconv.FormatInt(step>>10, 10)+"KiB", func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			f, err := os.OpenFile(filepath.Join(b.TempDir(), "seg"), os.O_WRONLY|os.O_CREATE, 0o600)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			zeros := make([]byte, step)
			lat := make([]time.Duration, 0, b.N)
			cpu0 := threadCPU(b)
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if _, err := f.WriteAt(zeros, int64(i%16)*step); err != nil {
					b.Fatal(err)
				}
				if i%16 == 15 { // start over in a fresh file
					b.StopTimer()
					f.Truncate(0)
					b.StartTimer()
				}
				if err := datasync(f); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			cpu := threadCPU(b) - cpu0
			slices.Sort(lat)
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e3, "cpu-µs/step")
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
		})
	}
}
