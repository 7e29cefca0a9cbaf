package bench

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tollgated/tollgated/core"
)

// BenchmarkThreadPerCore8 is eight locked OS threads, each owning its own
// engine and accounts, running the full path: the thread-per-core layout
// tollgated's shards use. ns/op is wall time per request across all eight
// threads; on a machine with fewer than eight cores they share them, so
// per-thread cost is ns/op × min(8, cores). BENCHMARKS.md reports both.
func BenchmarkThreadPerCore8(b *testing.B) {
	const threads = 8
	engines := make([]*core.Engine, threads)
	principals := make([][]core.Principal, threads)
	for i := range threads {
		engines[i], principals[i] = engineWith(b, 8, nil)
	}
	var next atomic.Int64
	total := int64(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for i := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			e, ps := engines[i], principals[i]
			var usage core.DiscardUsage
			now := t0
			for {
				// Claim work in chunks so the shared counter stays off the path.
				start := next.Add(256) - 256
				if start >= total {
					return
				}
				for j := start; j < min(start+256, total); j++ {
					now += 10_000
					fullPath(b, e, ps[j&7], &usage, now)
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkConcurrent measures the supported way in for goroutines that do
// not own an engine: striped engines behind per-stripe locks, one-shot
// admit → start → finish per request.
func BenchmarkConcurrent(b *testing.B) {
	for _, tc := range []struct {
		name     string
		accounts int
	}{{"distinct_accounts", 1024}, {"one_account", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			c := core.NewConcurrent(4*runtime.GOMAXPROCS(0), core.Config{MaxReservations: 1 << 14})
			binds := map[core.Principal]core.AccountID{}
			ps := make([]core.Principal, tc.accounts)
			for i := range ps {
				s := snapshot(core.AccountID("acct-" + strconv.Itoa(i)))
				c.With(s.Account, func(e *core.Engine) error {
					if err := e.Install(s); err != nil {
						return err
					}
					return e.GrantLease(s.Account, 1, 1<<50, t0+1<<50, 0)
				})
				ps[i] = core.Principal{Hi: uint64(i) + 1}
				binds[ps[i]] = s.Account
			}
			if err := c.BindMany(binds); err != nil {
				b.Fatal(err)
			}
			var seed atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var usage core.DiscardUsage
				i := int(seed.Add(7919))
				now := t0
				for pb.Next() {
					now += 10_000
					i++
					tk, d := c.Admit(ps[i%len(ps)], 1, workload, &usage, now)
					if d.Denied() {
						b.Fatal(d)
					}
					if err := c.Start(tk, core.RequestID{}, now); err != nil {
						b.Fatal(err)
					}
					if _, err := c.Finish(tk, 1000, now); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
