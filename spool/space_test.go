package spool

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

// fullDisk is a filesystem as the flusher sees it through SetDiskFault:
// the segment being written may not grow past limit bytes (ENOSPC), and a
// sync fails with syncErr when it is set.
type fullDisk struct {
	limit   atomic.Int64
	syncErr atomic.Pointer[error]
	refused atomic.Int64 // writes refused with ENOSPC
}

func newFullDisk(s *Spool) *fullDisk {
	d := &fullDisk{}
	d.limit.Store(1 << 62)
	s.SetDiskFault(func(op DiskOp, off, n int64) error {
		if op == OpSync {
			if e := d.syncErr.Load(); e != nil {
				return *e
			}
			return nil
		}
		if off+n > d.limit.Load() {
			d.refused.Add(1)
			return &os.PathError{Op: "write", Path: "segment", Err: syscall.ENOSPC}
		}
		return nil
	})
	return d
}

// healthLog records what OnHealth was told, in order.
type healthLog struct {
	mu   sync.Mutex
	seen []Health
}

func (h *healthLog) note(x Health) {
	h.mu.Lock()
	h.seen = append(h.seen, x)
	h.mu.Unlock()
}

func (h *healthLog) get() []Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seen)
}

// appendOne appends payloadFor(seq) and fails the test on any error.
func appendOne(t *testing.T, s *Spool, seq uint64) {
	t.Helper()
	got, err := s.Append(payloadFor(seq))
	if err != nil || got != seq {
		t.Fatalf("Append %d = %d, %v", seq, got, err)
	}
}

// waitDurable waits until every record up to seq is durable.
func waitDurable(t *testing.T, s *Spool, seq uint64) {
	t.Helper()
	if !await.Poll(await.Default, func() bool { return s.Durable() >= seq }) {
		t.Fatalf("durable %d, want %d (health %v)", s.Durable(), seq, s.Health())
	}
}

// TestAFullDiskIsWaitedOut: when the segment cannot grow, the spool says
// so (NoSpace) while the records on their way still go into the zeros
// it had reserved; a record that fits nowhere waits in memory, and Sync
// says ErrNoSpace at once instead of waiting; once there is room the
// spool writes it and is Healthy again by itself. Every record is there,
// once, after a reopen.
func TestAFullDiskIsWaitedOut(t *testing.T) {
	dir := t.TempDir()
	var log healthLog
	opts := growOpts
	opts.OnHealth = log.note
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	disk := newFullDisk(s)
	seq := uint64(0)
	for range 5 {
		seq++
		appendOne(t, s, seq)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	disk.limit.Store(growOpts.GrowBytes) // the filesystem is full: no further step

	// Records keep going into the reserve after the spool said NoSpace.
	intoReserve := 0
	for {
		seq++
		appendOne(t, s, seq)
		start := time.Now()
		err := s.Sync()
		if took := time.Since(start); took > time.Second {
			t.Fatalf("Sync took %v", took)
		}
		if errors.Is(err, ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatalf("Sync of record %d: %v", seq, err)
		}
		if s.Health() == NoSpace {
			intoReserve++
		}
		if seq > 1000 {
			t.Fatal("the segment never ran out of zeros")
		}
	}
	if intoReserve == 0 {
		t.Fatal("no record went into the reserve after the spool said NoSpace: the full disk was found too late")
	}
	if s.Health() != NoSpace || s.Durable() != seq-1 {
		t.Fatalf("health %v, durable %d; want no-space with %d durable", s.Health(), s.Durable(), seq-1)
	}
	if st := s.Stats(); st.NoSpace != 1 || st.Health != NoSpace {
		t.Fatalf("stats: %d no-space episodes, health %v", st.NoSpace, st.Health)
	}
	// More records wait behind the one that found no room.
	refused := disk.refused.Load()
	for range 3 {
		seq++
		appendOne(t, s, seq)
	}
	// The spool tries again on its schedule: two more refused writes
	// later, nothing more is durable.
	await.True(t, "two more writes refused", func() bool { return disk.refused.Load() >= refused+2 })
	if s.Durable() != seq-4 {
		t.Fatalf("durable %d while the disk is full, want %d", s.Durable(), seq-4)
	}

	disk.limit.Store(1 << 62) // room again
	waitDurable(t, s, seq)
	if err := s.Sync(); err != nil {
		t.Fatalf("Sync after room came back: %v", err)
	}
	// OnHealth runs after the flusher has moved on: wait for it to be told.
	await.Poll(await.Default, func() bool { return len(log.get()) >= 2 })
	if got := log.get(); !slices.Equal(got, []Health{NoSpace, Healthy}) {
		t.Fatalf("OnHealth was told %v, want [no-space healthy]", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, growOpts)
	if got := replayAll(t, s); len(got) != int(seq) || got[0] != 1 || got[len(got)-1] != seq {
		t.Fatalf("replayed %d records (%v…), want 1..%d", len(got), got[:min(len(got), 3)], seq)
	}
}

// TestCloseShortOfSpaceReturnsAtOnce: a spool closed while a batch waits
// for room does not wait for the disk: Close says ErrNoSpace, keeps what
// was durable, and the next Open finds exactly that.
func TestCloseShortOfSpaceReturnsAtOnce(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{GrowBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	disk := newFullDisk(s)
	appendOne(t, s, 1)
	appendOne(t, s, 2)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	disk.limit.Store(fileSize(t, segFiles(t, dir)[0]))
	appendOne(t, s, 3)
	if err := s.Sync(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Sync = %v, want ErrNoSpace", err)
	}
	start := time.Now()
	if err := s.Close(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Close = %v, want ErrNoSpace", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Close took %v", took)
	}
	s = openT(t, dir, Options{})
	if got := replayAll(t, s); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("replayed %v, want [1 2]", got)
	}
}

// TestAFailedSyncIsForGood: a failed fdatasync — even one that says
// ENOSPC — breaks the spool for good (the kernel may have dropped the
// pages it could not write), unlike a refused write.
func TestAFailedSyncIsForGood(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EIO, syscall.ENOSPC} {
		t.Run(errno.Error(), func(t *testing.T) {
			var log healthLog
			s, err := Open(t.TempDir(), Options{OnHealth: log.note})
			if err != nil {
				t.Fatal(err)
			}
			disk := newFullDisk(s)
			appendOne(t, s, 1)
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			var e error = errno
			disk.syncErr.Store(&e)
			appendOne(t, s, 2)
			if err := s.Sync(); !errors.Is(err, ErrBroken) {
				t.Fatalf("Sync = %v, want ErrBroken", err)
			}
			disk.syncErr.Store(nil)
			if _, err := s.Append(payloadFor(3)); !errors.Is(err, ErrBroken) {
				t.Fatalf("Append after the disk healed = %v, want ErrBroken", err)
			}
			// OnHealth runs after Sync is told.
			await.Poll(await.Default, func() bool { return len(log.get()) != 0 })
			if s.Health() != Broken || s.Durable() != 1 || !slices.Equal(log.get(), []Health{Broken}) {
				t.Fatalf("health %v, durable %d, told %v", s.Health(), s.Durable(), log.get())
			}
			if err := s.Close(); !errors.Is(err, ErrBroken) {
				t.Fatalf("Close = %v", err)
			}
		})
	}
}

// TestARealFullFilesystem: the same over a real filesystem that fills up
// (a small tmpfs, where this process may mount one): the errors come from
// the kernel, partial writes included.
func TestARealFullFilesystem(t *testing.T) {
	mnt := mountTmpfs(t, "1m")
	dir := filepath.Join(mnt, "spool")
	var log healthLog
	opts := Options{GrowBytes: 64 << 10, SegmentBytes: 16 << 20, OnHealth: log.note}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	seq := uint64(0)
	for range 10 {
		seq++
		appendOne(t, s, seq)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(mnt, "filler")
	fill(t, filler)
	for s.Health() == Healthy {
		seq++
		appendOne(t, s, seq)
		if err := s.Sync(); err != nil && !errors.Is(err, ErrNoSpace) {
			t.Fatal(err)
		}
		if seq > 10000 {
			t.Fatal("never short of space")
		}
	}
	for range 2000 { // past the reserve
		seq++
		appendOne(t, s, seq)
	}
	if err := s.Sync(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Sync with the filesystem full = %v", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitDurable(t, s, seq)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := log.get(); len(got) < 2 || got[0] != NoSpace || got[len(got)-1] != Healthy {
		t.Fatalf("OnHealth was told %v", got)
	}
	s = openT(t, dir, Options{})
	if got := replayAll(t, s); len(got) != int(seq) {
		t.Fatalf("replayed %d records, want %d", len(got), seq)
	}
}

// mountTmpfs mounts a tmpfs of size under a temporary directory and
// unmounts it when the test ends; it skips the test where mounting is not
// permitted (not root).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s): the fault-injected tests cover this without one", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fill writes path until the filesystem has no room left.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
}
