package ring

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// msg is a test message whose check word is derived from seq, so that a slot
// read before it was fully written, or read twice, is caught and not just a
// reordering.
type msg struct {
	seq   uint64
	check uint64
}

func newMsg(seq uint64) msg {
	return msg{seq: seq, check: seq*0x9e3779b97f4a7c15 ^ 0xdeadbeefcafef00d}
}

func (m msg) valid() bool {
	return m == newMsg(m.seq)
}

func mustNew[T any](tb testing.TB, capacity int) *Ring[T] {
	tb.Helper()
	r, err := New[T](capacity)
	if err != nil {
		tb.Fatalf("New(%d): %v", capacity, err)
	}
	return r
}

func TestNewCapacity(t *testing.T) {
	for _, c := range []int{1, 2, 4, 64, 1024, 1 << 16} {
		r, err := New[msg](c)
		if err != nil {
			t.Errorf("New(%d): %v", c, err)
			continue
		}
		if r.Cap() != c || r.Len() != 0 {
			t.Errorf("New(%d): Cap %d Len %d", c, r.Cap(), r.Len())
		}
	}
	// A zero-size element lets the largest capacity be checked without
	// allocating gigabytes.
	if r, err := New[struct{}](MaxCapacity); err != nil || r.Cap() != MaxCapacity {
		t.Errorf("New(MaxCapacity) = %v, %v", r, err)
	}
	// The next power of two above MaxCapacity, computed at run time because
	// as a constant it overflows a 32-bit int (where it wraps negative,
	// which must be rejected too).
	shift := 1
	over := MaxCapacity << shift
	for _, c := range []int{0, -1, -8, 3, 6, 100, 1<<20 + 1, over, MaxCapacity + 1} {
		r, err := New[msg](c)
		if !errors.Is(err, ErrCapacity) || r != nil {
			t.Errorf("New(%d) = %v, %v; want nil, ErrCapacity", c, r, err)
		}
	}
}

func TestLayout(t *testing.T) {
	var r Ring[msg]
	if s := unsafe.Sizeof(r.c); s != falseSharingRange {
		t.Errorf("consumer side is %d bytes, want %d", s, falseSharingRange)
	}
	if s := unsafe.Sizeof(r.p); s != falseSharingRange {
		t.Errorf("producer side is %d bytes, want %d", s, falseSharingRange)
	}
	head := unsafe.Offsetof(r.c) + unsafe.Offsetof(r.c.head)
	tail := unsafe.Offsetof(r.p) + unsafe.Offsetof(r.p.tail)
	if tail-head < falseSharingRange {
		t.Errorf("head at %d and tail at %d share a %d-byte range", head, tail, falseSharingRange)
	}
	if head < falseSharingRange {
		t.Errorf("head at %d is within %d bytes of the previous object", head, falseSharingRange)
	}
	if end := unsafe.Sizeof(r) - tail; end < falseSharingRange {
		t.Errorf("tail is %d bytes from the next object, want >= %d", end, falseSharingRange)
	}
	// Each side's private fields must sit in the first line of its range.
	if o := unsafe.Offsetof(r.c.buf) + unsafe.Sizeof(r.c.buf); o > 64 {
		t.Errorf("consumer fields span %d bytes", o)
	}
}

func TestPushPopSequential(t *testing.T) {
	r := mustNew[msg](t, 8)
	if _, ok := r.Pop(); ok {
		t.Fatal("Pop on an empty ring succeeded")
	}
	var next, want uint64
	// Fill and empty it many times so the indices wrap the buffer often.
	for round := range 50 {
		for i := range r.Cap() {
			if !r.Push(newMsg(next)) {
				t.Fatalf("round %d: Push %d of %d reported full", round, i, r.Cap())
			}
			next++
		}
		if r.Push(newMsg(next)) {
			t.Fatalf("round %d: Push into a full ring succeeded", round)
		}
		if r.Len() != r.Cap() {
			t.Fatalf("round %d: Len %d, want %d", round, r.Len(), r.Cap())
		}
		// Drain a varying number so the next round starts at a new offset.
		for range r.Cap() - round%3 {
			m, ok := r.Pop()
			if !ok || m.seq != want || !m.valid() {
				t.Fatalf("round %d: Pop = %+v, %v; want seq %d", round, m, ok, want)
			}
			want++
		}
		for r.Len() > 0 {
			m, _ := r.Pop()
			if m.seq != want {
				t.Fatalf("round %d: Pop seq %d, want %d", round, m.seq, want)
			}
			want++
		}
	}
}

func TestBatchFull(t *testing.T) {
	r := mustNew[msg](t, 8)
	in := make([]msg, 12)
	for i := range in {
		in[i] = newMsg(uint64(i))
	}
	if n := r.PushBatch(in[:5]); n != 5 {
		t.Fatalf("PushBatch(5) into empty = %d", n)
	}
	if n := r.PushBatch(in[5:]); n != 3 {
		t.Fatalf("PushBatch(7) with 3 free = %d, want 3", n)
	}
	if n := r.PushBatch(in[8:]); n != 0 {
		t.Fatalf("PushBatch into full ring = %d, want 0", n)
	}
	if n := r.PushBatch(nil); n != 0 {
		t.Fatalf("PushBatch(nil) = %d", n)
	}
	out := make([]msg, 3)
	if n := r.PopBatch(out); n != 3 || out[0].seq != 0 || out[2].seq != 2 {
		t.Fatalf("PopBatch(3) = %d %+v", n, out)
	}
	// The next batch wraps past the end of the buffer.
	if n := r.PushBatch(in[8:]); n != 3 {
		t.Fatalf("PushBatch after freeing 3 = %d, want 3", n)
	}
	out = make([]msg, 16)
	n := r.PopBatch(out)
	if n != 8 {
		t.Fatalf("PopBatch(16) from full ring = %d, want 8", n)
	}
	for i, m := range out[:n] {
		if m.seq != uint64(i+3) || !m.valid() {
			t.Fatalf("out[%d] = %+v, want seq %d", i, m, i+3)
		}
	}
	if n := r.PopBatch(out); n != 0 {
		t.Fatalf("PopBatch from empty ring = %d", n)
	}
}

// TestModel runs random operations on one goroutine against a slice-backed
// FIFO, checking every result and Len after each step.
func TestModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, capacity := range []int{1, 2, 4, 16, 64} {
		r := mustNew[msg](t, capacity)
		var model []msg
		var next uint64
		buf := make([]msg, 2*capacity+1)
		for step := range 20000 {
			switch rng.IntN(4) {
			case 0:
				m := newMsg(next)
				ok := r.Push(m)
				if ok != (len(model) < capacity) {
					t.Fatalf("cap %d step %d: Push = %v with %d queued", capacity, step, ok, len(model))
				}
				if ok {
					model = append(model, m)
					next++
				}
			case 1:
				k := rng.IntN(len(buf))
				for i := range k {
					buf[i] = newMsg(next + uint64(i))
				}
				n := r.PushBatch(buf[:k])
				if want := min(k, capacity-len(model)); n != want {
					t.Fatalf("cap %d step %d: PushBatch(%d) = %d, want %d", capacity, step, k, n, want)
				}
				model = append(model, buf[:n]...)
				next += uint64(n)
			case 2:
				m, ok := r.Pop()
				if ok != (len(model) > 0) {
					t.Fatalf("cap %d step %d: Pop ok = %v with %d queued", capacity, step, ok, len(model))
				}
				if ok {
					if m != model[0] {
						t.Fatalf("cap %d step %d: Pop = %+v, want %+v", capacity, step, m, model[0])
					}
					model = model[1:]
				}
			case 3:
				k := rng.IntN(len(buf))
				n := r.PopBatch(buf[:k])
				if want := min(k, len(model)); n != want {
					t.Fatalf("cap %d step %d: PopBatch(%d) = %d, want %d", capacity, step, k, n, want)
				}
				for i := range n {
					if buf[i] != model[i] {
						t.Fatalf("cap %d step %d: PopBatch[%d] = %+v, want %+v", capacity, step, i, buf[i], model[i])
					}
				}
				model = model[n:]
			}
			if r.Len() != len(model) {
				t.Fatalf("cap %d step %d: Len %d, model %d", capacity, step, r.Len(), len(model))
			}
		}
	}
}

// stressMessages is how many messages each cross-goroutine stress run moves:
// millions normally, one million under the race detector.
func stressMessages() uint64 {
	if raceEnabled || testing.Short() {
		return 1 << 20
	}
	return 8 << 20
}

// stressMode selects how each side moves messages in runStress.
type stressMode int

const (
	single stressMode = iota // one message per call
	batch                    // random batch sizes, 1..maxBatch
	mixed                    // a random choice of single or batch per call
)

const maxBatch = 100

// runStress moves total messages from a producer goroutine to the calling
// goroutine and fails on the first loss, duplicate, reordering or torn
// message. Both sides spin (yielding) on a full or empty ring, and a
// watchdog fails the test if the consumer makes no progress for 10 s.
func runStress(t *testing.T, capacity int, total uint64, push, pop stressMode) {
	r := mustNew[msg](t, capacity)
	seed := uint64(time.Now().UnixNano())
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 2))
		buf := make([]msg, maxBatch)
		var next uint64
		for next < total && !stop.Load() {
			mode := push
			if mode == mixed {
				mode = stressMode(rng.IntN(2))
			}
			if mode == single {
				if r.Push(newMsg(next)) {
					next++
				} else {
					runtime.Gosched()
				}
				continue
			}
			k := min(uint64(1+rng.IntN(maxBatch)), total-next)
			for i := range k {
				buf[i] = newMsg(next + i)
			}
			// A batch may go in partly; push the rest before a new batch so
			// that sequence numbers stay contiguous.
			for sent := uint64(0); sent < k && !stop.Load(); {
				n := r.PushBatch(buf[sent:k])
				if n == 0 {
					runtime.Gosched()
				}
				sent += uint64(n)
			}
			next += k
		}
	}()
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()

	rng := rand.New(rand.NewPCG(seed, 3))
	buf := make([]msg, maxBatch)
	var want uint64
	lastProgress := time.Now()
	idle := 0
	check := func(m msg) {
		if m.seq != want || !m.valid() {
			t.Fatalf("seed %d: got %+v (valid %v), want seq %d", seed, m, m.valid(), want)
		}
		want++
	}
	for want < total {
		mode := pop
		if mode == mixed {
			mode = stressMode(rng.IntN(2))
		}
		got := 0
		if mode == single {
			if m, ok := r.Pop(); ok {
				check(m)
				got = 1
			}
		} else {
			got = r.PopBatch(buf[:1+rng.IntN(maxBatch)])
			for _, m := range buf[:got] {
				check(m)
			}
		}
		if got > 0 {
			idle = 0
			continue
		}
		runtime.Gosched()
		if idle++; idle&1023 == 0 {
			if time.Since(lastProgress) > 10*time.Second {
				t.Fatalf("seed %d: no message for 10 s after %d of %d", seed, want, total)
			}
		} else if idle == 1 {
			lastProgress = time.Now()
		}
	}
	if m, ok := r.Pop(); ok {
		t.Fatalf("extra message after %d: %+v", total, m)
	}
}

func TestStress(t *testing.T) {
	total := stressMessages()
	cases := []struct {
		name      string
		capacity  int
		push, pop stressMode
		total     uint64
	}{
		{"single", 256, single, single, total},
		{"batch", 256, batch, batch, total},
		{"mixed", 128, mixed, mixed, total},
		// A two-slot ring is full or empty almost all the time, which
		// exercises the cache refreshes on both sides.
		{"tiny", 2, mixed, mixed, total / 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			runStress(t, c.capacity, c.total, c.push, c.pop)
			t.Logf("%d messages in %v", c.total, time.Since(start))
		})
	}
}

func TestAllocs(t *testing.T) {
	r := mustNew[msg](t, 64)
	batch := make([]msg, 16)
	if a := testing.AllocsPerRun(1000, func() {
		r.Push(newMsg(1))
		r.Pop()
	}); a != 0 {
		t.Errorf("Push+Pop: %v allocs", a)
	}
	if a := testing.AllocsPerRun(1000, func() {
		r.PushBatch(batch)
		r.PopBatch(batch)
	}); a != 0 {
		t.Errorf("PushBatch+PopBatch: %v allocs", a)
	}
	if a := testing.AllocsPerRun(1000, func() { _ = r.Len() }); a != 0 {
		t.Errorf("Len: %v allocs", a)
	}
}

// msg64 is a cache-line-sized message, the upper end of what the daemon
// sends through its rings.
type msg64 struct {
	seq uint64
	_   [7]uint64
}

func BenchmarkPushPop(b *testing.B) {
	r := mustNew[msg](b, 1024)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r.Push(newMsg(uint64(i)))
		r.Pop()
	}
}

// BenchmarkCrossThread moves b.N messages one at a time from a producer
// goroutine to the benchmark goroutine; with GOMAXPROCS >= 2 they run on
// different threads, so every message crosses cores.
func BenchmarkCrossThread(b *testing.B) {
	b.Run("16B", func(b *testing.B) { benchCross(b, 1, func(i uint64) msg { return msg{seq: i} }) })
	b.Run("64B", func(b *testing.B) { benchCross(b, 1, func(i uint64) msg64 { return msg64{seq: i} }) })
}

// BenchmarkCrossThreadBatch is BenchmarkCrossThread with PushBatch and
// PopBatch of 64 messages.
func BenchmarkCrossThreadBatch(b *testing.B) {
	b.Run("16B", func(b *testing.B) { benchCross(b, 64, func(i uint64) msg { return msg{seq: i} }) })
	b.Run("64B", func(b *testing.B) { benchCross(b, 64, func(i uint64) msg64 { return msg64{seq: i} }) })
}

func benchCross[T any](b *testing.B, batchSize int, make1 func(uint64) T) {
	r := mustNew[T](b, 1024)
	out := make([]T, batchSize)
	in := make([]T, batchSize)
	for i := range in {
		in[i] = make1(uint64(i))
	}
	n := b.N
	done := make(chan struct{})
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		defer close(done)
		if batchSize == 1 {
			v := make1(0)
			for sent := 0; sent < n; {
				if r.Push(v) {
					sent++
				}
			}
			return
		}
		for sent := 0; sent < n; {
			sent += r.PushBatch(in[:min(batchSize, n-sent)])
		}
	}()
	for got := 0; got < n; {
		if batchSize == 1 {
			if _, ok := r.Pop(); ok {
				got++
			}
			continue
		}
		got += r.PopBatch(out)
	}
	b.StopTimer()
	<-done
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/msg")
}
