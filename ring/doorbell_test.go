package ring

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgated/tollgated/internal/await"
)

// awaitBlockedIn waits until a goroutine with fn on its stack is blocked
// there: parked, or in a system call. A test that must push to a consumer
// already asleep states that, instead of sleeping and hoping.
func awaitBlockedIn(t *testing.T, fn string) {
	t.Helper()
	await.True(t, "a goroutine blocked in "+fn, func() bool {
		buf := make([]byte, 1<<20)
		for _, g := range bytes.Split(buf[:runtime.Stack(buf, true)], []byte("\n\n")) {
			header, _, _ := bytes.Cut(g, []byte("\n"))
			if bytes.Contains(g, []byte(fn)) && !bytes.Contains(header, []byte("[running")) &&
				!bytes.Contains(header, []byte("[runnable")) {
				return true
			}
		}
		return false
	})
}

// pause busy-waits for d: a pause at a point the seed picks, as short as
// asked on a loaded machine, where a sleep lasts at least a timer tick.
func pause(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
		runtime.Gosched()
	}
}

func newDoorbell(t testing.TB, capacity int) *Doorbell[msg] {
	t.Helper()
	d, err := NewDoorbell(mustNew[msg](t, capacity))
	if err != nil {
		t.Fatalf("NewDoorbell: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestDoorbellWakesWaiter(t *testing.T) {
	d := newDoorbell(t, 16)
	woke := make(chan bool)
	asleep := make(chan struct{})
	go func() {
		ok := d.BeginSleep()
		close(asleep)
		if ok {
			ok = d.Wait(5 * time.Second)
			d.EndSleep()
		}
		woke <- ok
	}()
	<-asleep
	awaitBlockedIn(t, "(*bell).wait(")
	d.Push(newMsg(1))
	if !<-woke {
		t.Fatal("sleeping consumer was not woken within 5 s")
	}
	if d.Rings() != 1 {
		t.Fatalf("Rings = %d, want 1", d.Rings())
	}
}

func TestDoorbellOneRingPerSleep(t *testing.T) {
	d := newDoorbell(t, 256)
	if !d.BeginSleep() {
		t.Fatal("BeginSleep on an empty ring = false")
	}
	for i := range 100 {
		d.Push(newMsg(uint64(i)))
	}
	batch := make([]msg, 10)
	for i := range batch {
		batch[i] = newMsg(uint64(100 + i))
	}
	d.PushBatch(batch)
	if d.Rings() != 1 {
		t.Fatalf("110 pushes during one sleep rang %d times, want 1", d.Rings())
	}
	if !d.Wait(0) {
		t.Fatal("Wait after a ring = false")
	}
	if d.Wait(0) {
		t.Fatal("Wait = true again without a new ring")
	}
	d.EndSleep()
}

func TestDoorbellNoRingWhenAwake(t *testing.T) {
	d := newDoorbell(t, 1024)
	for i := range 500 {
		d.Push(newMsg(uint64(i)))
	}
	// Queued messages refuse the sleep, and must not arm the producer.
	if d.BeginSleep() {
		t.Fatal("BeginSleep with 500 queued = true")
	}
	for i := range 500 {
		d.Push(newMsg(uint64(500 + i)))
	}
	d.PushBatch([]msg{newMsg(1000)})
	d.Notify()
	if d.Rings() != 0 {
		t.Fatalf("awake consumer was rung %d times", d.Rings())
	}
	if d.Wait(0) {
		t.Fatal("bell readable although never rung")
	}
	// After EndSleep, pushes stop ringing again.
	for d.Ring().Len() > 0 {
		d.Ring().Pop()
	}
	if !d.BeginSleep() {
		t.Fatal("BeginSleep on an empty ring = false")
	}
	d.EndSleep()
	d.Push(newMsg(0))
	if d.Rings() != 0 {
		t.Fatalf("push after EndSleep rang %d times", d.Rings())
	}
}

func TestDoorbellFullRingDoesNotRing(t *testing.T) {
	d := newDoorbell(t, 2)
	d.Push(newMsg(0))
	d.Push(newMsg(1))
	if d.Push(newMsg(2)) || d.PushBatch([]msg{newMsg(2)}) != 0 {
		t.Fatal("push into a full ring succeeded")
	}
	if d.Rings() != 0 {
		t.Fatalf("Rings = %d", d.Rings())
	}
}

// TestDoorbellStress sends bursts of messages and fails if a sleeping consumer
// is ever left with messages in the ring: a lost wake-up shows as a 5 s Wait
// timing out. After half of the bursts the producer waits until the consumer
// has taken everything, so that the burst's last push is the only one that
// can wake it; the other half overlap with the consumer going to sleep.
func TestDoorbellStress(t *testing.T) {
	total := uint64(100_000)
	if raceEnabled || testing.Short() {
		total = 50_000
	}
	d := newDoorbell(t, 64)
	seed := uint64(time.Now().UnixNano())
	var consumed atomic.Uint64
	var wg sync.WaitGroup
	wg.Add(1)
	stop := make(chan struct{})
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 4))
		for next := uint64(0); next < total; {
			for k := min(1+rng.Uint64N(48), total-next); k > 0; k-- {
				for !d.Push(newMsg(next)) {
					if stopped() {
						return
					}
					runtime.Gosched()
				}
				next++
			}
			switch rng.IntN(16) {
			case 0:
				pause(time.Duration(rng.IntN(50)) * time.Microsecond)
			case 1, 2, 3, 4, 5, 6, 7:
				for consumed.Load() < next {
					if stopped() {
						return
					}
					runtime.Gosched()
				}
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()
	buf := make([]msg, 16)
	// attempts counts BeginSleep calls: each arms the producer once, so it
	// bounds the rings, including those for sleeps BeginSleep then refused.
	var want, attempts, sleeps uint64
	for want < total {
		n := d.Ring().PopBatch(buf)
		for _, m := range buf[:n] {
			if m.seq != want || !m.valid() {
				t.Fatalf("seed %d: got %+v, want seq %d", seed, m, want)
			}
			want++
		}
		if n > 0 {
			consumed.Store(want)
			continue
		}
		attempts++
		if !d.BeginSleep() {
			continue
		}
		sleeps++
		rang := d.Wait(5 * time.Second)
		d.EndSleep()
		if !rang {
			t.Fatalf("seed %d: lost wake-up after %d of %d (queued %d)", seed, want, total, d.Ring().Len())
		}
	}
	if d.Rings() > attempts {
		t.Fatalf("%d rings for %d sleep attempts", d.Rings(), attempts)
	}
	if sleeps == 0 {
		t.Fatal("the consumer never slept; the test checked nothing")
	}
	t.Logf("%d messages, %d sleeps of %d attempts, %d rings", total, sleeps, attempts, d.Rings())
}

func TestDoorbellAllocs(t *testing.T) {
	d := newDoorbell(t, 64)
	if a := testing.AllocsPerRun(1000, func() {
		d.Push(newMsg(1))
		d.Ring().Pop()
	}); a != 0 {
		t.Errorf("Push+Pop while awake: %v allocs", a)
	}
	// The sleeping path rings and drains the descriptor: two system calls,
	// still no allocation.
	if a := testing.AllocsPerRun(100, func() {
		d.BeginSleep()
		d.Push(newMsg(1))
		d.EndSleep()
		d.Drain()
		d.Ring().Pop()
	}); a != 0 {
		t.Errorf("ring+Drain: %v allocs", a)
	}
	if d.Rings() == 0 {
		t.Error("the sleeping path never rang")
	}
}

func TestDoorbellClose(t *testing.T) {
	d, err := NewDoorbell(mustNew[msg](t, 4))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := d.Close(); !errors.Is(err, errClosed) {
		t.Fatalf("second Close = %v, want errClosed", err)
	}
}

// BenchmarkDoorbellCrossThread is BenchmarkCrossThread through the doorbell
// with the consumer awake: the cost over the bare ring is the producer's
// load of the sleeping flag.
func BenchmarkDoorbellCrossThread(b *testing.B) {
	d := newDoorbell(b, 1024)
	n := b.N
	done := make(chan struct{})
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		defer close(done)
		for sent := 0; sent < n; {
			if d.Push(msg{seq: uint64(sent)}) {
				sent++
			}
		}
	}()
	r := d.Ring()
	for got := 0; got < n; {
		if _, ok := r.Pop(); ok {
			got++
		}
	}
	b.StopTimer()
	<-done
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/msg")
}

// BenchmarkDoorbellWake measures a full sleep and wake-up: the consumer
// announces sleep and blocks in Wait, the producer pushes one message and
// rings, and waits for the consumer to take it before the next.
func BenchmarkDoorbellWake(b *testing.B) {
	d := newDoorbell(b, 16)
	back, err := NewDoorbell(mustNew[msg](b, 16))
	if err != nil {
		b.Fatal(err)
	}
	defer back.Close()
	n := b.N
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		// Echo each message back through the second doorbell.
		r := d.Ring()
		for got := 0; got < n; {
			m, ok := r.Pop()
			if !ok {
				if d.BeginSleep() {
					d.Wait(-1)
					d.EndSleep()
				}
				continue
			}
			for !back.Push(m) {
			}
			got++
		}
	}()
	r := back.Ring()
	for i := 0; i < n; i++ {
		for !d.Push(msg{seq: uint64(i)}) {
		}
		for {
			if _, ok := r.Pop(); ok {
				break
			}
			if back.BeginSleep() {
				back.Wait(-1)
				back.EndSleep()
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/roundtrip")
}

// TestDoorbellNapRingsOnlyForUrgent: a napping consumer is rung by Notify
// (urgent) but not by NotifyIfAsleep (routine); a sleeping one by both.
func TestDoorbellNapRingsOnlyForUrgent(t *testing.T) {
	d := newDoorbell(t, 16)
	if !d.BeginNap() {
		t.Fatal("BeginNap on an empty ring = false")
	}
	d.r.Push(newMsg(1))
	d.NotifyIfAsleep()
	if d.Rings() != 0 {
		t.Fatalf("a routine push rang a napping consumer (%d rings)", d.Rings())
	}
	d.Notify()
	if d.Rings() != 1 {
		t.Fatalf("an urgent push did not ring a napping consumer (%d rings)", d.Rings())
	}
	d.EndSleep()
	d.r.Pop()
	if !d.BeginSleep() {
		t.Fatal("BeginSleep on an empty ring = false")
	}
	d.r.Push(newMsg(2))
	d.NotifyIfAsleep()
	if d.Rings() != 2 {
		t.Fatalf("a routine push did not ring a sleeping consumer (%d rings)", d.Rings())
	}
	d.EndSleep()
	if d.BeginNap() {
		t.Fatal("BeginNap with a message queued = true")
	}
}
