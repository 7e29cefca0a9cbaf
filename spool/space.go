package spool

import (
	"errors"
	"fmt"
	"syscall"
	"time"
)

// Health is whether the spool can make what is appended durable.
//
// A full filesystem and a failed sync are different faults and end
// differently. Running out of space is found when a write(2) is refused
// (ENOSPC, EDQUOT): nothing reached the page cache for the refused bytes,
// so the same write can be made again later and the data is whole. A
// failed fdatasync is another matter: Linux may have dropped the dirty
// pages and cleared the error, so a retried sync can succeed without the
// data. So a spool short of space waits and retries, and a spool whose
// sync (or any other write) failed is broken for good (ErrBroken).
type Health uint32

const (
	// Healthy: the segment being written has at least a grow step of
	// durable zeros ahead of its records, or could get them.
	Healthy Health = iota
	// NoSpace: the flusher could not reserve the next GrowBytes of the
	// segment, or could not write a batch, for want of space. Records
	// still go into the zeros already reserved (the reserve: up to half a
	// grow step); a batch that does not fit waits in memory. The flusher
	// retries with backoff (noSpaceRetryMin … noSpaceRetryMax) and
	// returns to Healthy by itself once a whole step could be reserved.
	NoSpace
	// Broken: a sync or a write failed for another reason; nothing more
	// becomes durable (ErrBroken). Only a restart, on a sound disk, ends it.
	Broken
)

var healthNames = [...]string{"healthy", "no-space", "broken"}

func (h Health) String() string {
	if int(h) < len(healthNames) {
		return healthNames[h]
	}
	return "unknown"
}

// ErrNoSpace is what Sync returns while records wait for room on the
// filesystem, and what Close returns when it had to leave some in memory.
var ErrNoSpace = errors.New("spool: no space left for records on the spool's filesystem")

// Retry schedule while short of space: the first retry soon (a burst of
// temporary files may just have been deleted), then doubling, so a disk
// that stays full costs one failed write every noSpaceRetryMax.
const (
	noSpaceRetryMin = 10 * time.Millisecond
	noSpaceRetryMax = 500 * time.Millisecond
)

// isNoSpace reports whether err is the filesystem (or the user's quota)
// refusing to allocate: the bytes were not written and may be written
// again.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// errNoRoom marks a write of records the filesystem refused for want of
// space; the batch stays in memory and is written again later.
var errNoRoom = errors.New("spool: a batch found no room")

// DiskOp names a flusher operation a test may make fail (SetDiskFault).
type DiskOp uint8

const (
	OpGrow  DiskOp = iota + 1 // writing zeros ahead of the records
	OpWrite                   // writing records
	OpSync                    // fdatasync of the segment
)

// DiskFault decides whether a write of n bytes at off into the segment
// being written (n and off 0 for a sync) fails, and with what (nil: it
// goes ahead).
type DiskFault func(op DiskOp, off, n int64) error

// SetDiskFault makes the flusher ask fault before each write and sync of
// a segment and fail it, writing nothing, with the error fault returns.
// For tests of a full or failing disk where none can be mounted; nil
// removes it. Safe to call while the spool runs.
func (s *Spool) SetDiskFault(fault DiskFault) {
	if fault == nil {
		s.fault.Store(nil)
		return
	}
	s.fault.Store(&fault)
}

// injected is the error a test's fault makes op fail with, or nil.
func (s *Spool) injected(op DiskOp, off, n int64) error {
	if f := s.fault.Load(); f != nil {
		return (*f)(op, off, n)
	}
	return nil
}

// Health reports the spool's health as the flusher last found it.
func (s *Spool) Health() Health { return Health(s.health.Load()) }

// setHealth records h and tells OnHealth when it changes. Only the flusher
// calls it. Sync waiters are woken: a spool short of space answers them at
// once instead of leaving them to wait for the disk.
func (s *Spool) setHealth(h Health) {
	if Health(s.health.Load()) == h {
		return
	}
	s.mu.Lock()
	s.health.Store(uint32(h))
	s.cond.Broadcast()
	s.mu.Unlock()
	s.announce(h)
}

// breakLocked makes err the spool's permanent failure; s.mu is held. It
// reports whether the spool was not broken before (announce it then,
// once mu is released): a Sync that sees the error sees Broken too.
func (s *Spool) breakLocked(err error) bool {
	s.err = fmt.Errorf("%w: %w", ErrBroken, err)
	s.cond.Broadcast()
	return Health(s.health.Swap(uint32(Broken))) != Broken
}

// announce does what a change of health entails besides the word itself:
// counters, the retry schedule, OnHealth.
func (s *Spool) announce(h Health) {
	switch h {
	case NoSpace:
		s.stats.noSpace.Add(1)
		s.retryWait = noSpaceRetryMin
		s.retryAt = time.Now().Add(s.retryWait)
	case Healthy:
		s.retryWait = 0
	}
	if s.opts.OnHealth != nil {
		s.opts.OnHealth(h)
	}
}

// retryDue reports whether, short of space, the flusher should try to
// reserve room again now; it moves the next try further out each time.
func (s *Spool) retryDue(now time.Time) bool {
	if now.Before(s.retryAt) {
		return false
	}
	s.retryWait = min(2*s.retryWait, noSpaceRetryMax)
	s.retryAt = now.Add(s.retryWait)
	return true
}
