// Package core is tollgated's admission engine: everything a shard does to
// decide a request, with no I/O, no goroutines, no locks and no clock reads.
// Every function that depends on time takes `now` (Unix nanoseconds) from the
// caller, so the whole engine is testable exactly.
//
// The staged request path, in its only supported order:
//
//	ctx, reason := e.Begin(principal, required, now) // one lookup; pins the snapshot
//	// reserve a usage slot (backpressure sheds here, before the body)
//	// read and decode the body under ctx.Limits()
//	r, denial := e.Admit(&ctx, workload, slot, now) // shape, rates, concurrency, funding
//	err := e.AcquireCapacity(r)                     // execution capacity gate
//	err = e.Commit(r, requestID, now)               // at execution start; may refuse
//	billed, err := e.Finish(r, units, now)          // bills exactly once
//
// A reservation that is cancelled, shed, refused at start, or left pending
// past its deadline charges nothing. A committed reservation that is never
// finished is billed at its quote when its deadline passes (Expire), so a lost
// charge cannot go unnoticed.
//
// An Engine belongs to one goroutine (a shard's pinned thread). Programs that
// admit from many goroutines use Concurrent, which stripes accounts over
// engines behind per-stripe locks.
package core
