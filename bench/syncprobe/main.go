// Command syncprobe measures the latency of fdatasync on one directory's
// disk the way the usage spool uses it: a small record written in place
// into a file of durable zeros, then fdatasync, in a loop. bench/http.sh
// runs it in the same run as tollgated's open-loop check load, so a durable
// answer's p99 can be read against the disk's own.
//
// Usage:
//
//	syncprobe --dir DIR [--duration 8s] [--record 128] [--gap 0]
//
// It prints one line: "SYNC n=N p50_us=A p99_us=B max_us=C".
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// fileBytes is the probe file's length: records wrap around inside it, so a
// sync never extends the file (and never journals its size).
const fileBytes = 4 << 20

func main() {
	dir := flag.String("dir", "", "directory on the disk to probe (required)")
	dur := flag.Duration("duration", 8*time.Second, "how long to probe")
	record := flag.Int("record", 128, "bytes written before each fdatasync")
	gap := flag.Duration("gap", 0, "pause between syncs")
	flag.Parse()
	if *dir == "" || *record <= 0 || *record > fileBytes {
		fmt.Fprintln(os.Stderr, "syncprobe: --dir is required and --record must be in (0, 4 MiB]")
		os.Exit(2)
	}
	lat, err := probe(*dir, *dur, *record, *gap)
	if err != nil {
		fmt.Fprintf(os.Stderr, "syncprobe: %v\n", err)
		os.Exit(1)
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))]) / 1e3
	}
	fmt.Printf("SYNC n=%d p50_us=%.1f p99_us=%.1f max_us=%.1f\n", len(lat), q(0.50), q(0.99), q(1))
}

// probe writes and syncs until dur has passed and returns each sync's
// latency in nanoseconds.
func probe(dir string, dur time.Duration, record int, gap time.Duration) ([]int64, error) {
	f, err := os.CreateTemp(dir, "syncprobe-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(make([]byte, fileBytes)); err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	if d, err := os.Open(filepath.Dir(f.Name())); err == nil {
		_ = d.Sync()
		d.Close()
	}
	fd := int(f.Fd())
	buf := make([]byte, record)
	lat := make([]int64, 0, 1<<16)
	var off int64
	end := time.Now().Add(dur)
	for time.Now().Before(end) {
		buf[0]++
		if _, err := unix.Pwrite(fd, buf, off); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := unix.Fdatasync(fd); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0).Nanoseconds())
		if off += int64(record); off+int64(record) > fileBytes {
			off = 0
		}
		if gap > 0 {
			time.Sleep(gap)
		}
	}
	if len(lat) == 0 {
		return nil, fmt.Errorf("no sync in %v", dur)
	}
	return lat, nil
}
