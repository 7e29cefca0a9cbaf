package seqlock

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// quad is a record whose four words must always agree: word i is base+i.
type quad struct{ base uint64 }

func (q quad) Pack() [Words]uint64 {
	return [Words]uint64{q.base, q.base + 1, q.base + 2, q.base + 3}
}

func (quad) Unpack(w [Words]uint64) quad { return quad{base: w[0]} }

// torn is the same record, but Unpack keeps the words so a test can check
// that they belong to one write.
type torn struct{ w [Words]uint64 }

func (t torn) Pack() [Words]uint64 {
	b := t.w[0]
	return [Words]uint64{b, b + 1, b + 2, b + 3}
}

func (torn) Unpack(w [Words]uint64) torn { return torn{w: w} }

func TestEmptyCellHasNoRecord(t *testing.T) {
	var c Cell[quad]
	if c.Present() {
		t.Fatal("new cell reports a record")
	}
	if _, ok := c.Load(); ok {
		t.Fatal("new cell loaded a record")
	}
}

func TestStoreLoadClear(t *testing.T) {
	var c Cell[quad]
	c.Store(quad{base: 40})
	r, ok := c.Load()
	if !ok || r.base != 40 {
		t.Fatalf("Load = %v, %v; want 40, true", r, ok)
	}
	c.Store(quad{base: 7})
	if r, _ := c.Load(); r.base != 7 {
		t.Fatalf("second store not visible: %v", r)
	}
	v := c.Version()
	c.Clear()
	if c.Present() {
		t.Fatal("cleared cell still present")
	}
	if _, ok := c.Load(); ok {
		t.Fatal("cleared cell loaded a record")
	}
	if c.Version() != v+1 {
		t.Fatalf("Version after clear = %d, want %d", c.Version(), v+1)
	}
}

func TestLoadDoesNotAllocate(t *testing.T) {
	var c Cell[quad]
	c.Store(quad{base: 1})
	allocs := testing.AllocsPerRun(1000, func() {
		if _, ok := c.Load(); !ok {
			t.Fatal("lost record")
		}
	})
	if allocs != 0 {
		t.Fatalf("Load allocates %v times", allocs)
	}
}

// TestNoTornReads runs one writer against several readers. Each write stores
// four words derived from one counter; a reader that ever sees words from two
// different writes, or sees the counter go backwards, has observed a torn read.
func TestNoTornReads(t *testing.T) {
	writes := uint64(200_000)
	if testing.Short() || raceEnabled {
		writes = 50_000
	}
	var c Cell[torn]
	var done atomic.Bool
	var wg sync.WaitGroup
	readers := max(2, runtime.GOMAXPROCS(0))
	var started, loads, hits atomic.Uint64
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started.Add(1)
			var last uint64
			var n uint64
			for !done.Load() {
				n++
				r, ok := c.Load()
				if !ok {
					continue
				}
				hits.Add(1)
				for i := range Words {
					if r.w[i] != r.w[0]+uint64(i) {
						t.Errorf("torn read: %v", r.w)
						return
					}
				}
				if r.w[0] < last {
					t.Errorf("went backwards: %d after %d", r.w[0], last)
					return
				}
				last = r.w[0]
			}
			loads.Add(n)
		}()
	}
	for started.Load() < uint64(readers) {
		runtime.Gosched()
	}
	// Write at least writes records, and on until the readers have seen
	// some of them while writes were going on (a loaded machine may not
	// schedule them at first), within a bound.
	deadline := time.Now().Add(10 * time.Second)
	for i := uint64(1); i <= writes || (hits.Load() < 1000 && time.Now().Before(deadline)); i++ {
		c.Store(torn{w: [Words]uint64{i * 8}})
		if i%1000 == 0 {
			c.Clear() // readers must see "none", never a half-cleared record
			runtime.Gosched()
		}
	}
	done.Store(true)
	wg.Wait()
	if hits.Load() == 0 {
		t.Fatalf("readers never saw a record in %d loads; the test proved nothing", loads.Load())
	}
}

func BenchmarkLoadAbsent(b *testing.B) {
	var c Cell[quad]
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := c.Load(); ok {
			b.Fatal("present")
		}
	}
}

func BenchmarkLoadPresent(b *testing.B) {
	var c Cell[quad]
	c.Store(quad{base: 3})
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := c.Load(); !ok {
			b.Fatal("absent")
		}
	}
}
