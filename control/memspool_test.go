package control

import (
	"errors"
	"sync"
)

// memSpool is an in-memory spool for tests: every append is durable at
// once, unless hold stopped the mark (a sync that does not end).
type memSpool struct {
	mu        sync.Mutex
	records   [][]byte
	released  uint64
	held      bool
	heldAt    uint64
	appended  bool   // an Append ran: Replay is refused, as spool.Spool refuses it
	onDurable func() // as spool.Options.OnDurable
}

// hold stops the durable mark where it is, until release.
func (s *memSpool) hold() {
	s.mu.Lock()
	s.held, s.heldAt = true, uint64(len(s.records))
	s.mu.Unlock()
}

// reopen is the spool as a restarted process finds it: the records are
// there, and Replay may run again.
func (s *memSpool) reopen() {
	s.mu.Lock()
	s.appended = false
	s.mu.Unlock()
}

// release lets the mark reach every record appended.
func (s *memSpool) release() {
	s.mu.Lock()
	s.held = false
	s.mu.Unlock()
	if s.onDurable != nil {
		s.onDurable()
	}
}

func (s *memSpool) Append(p []byte) (uint64, error) {
	s.mu.Lock()
	s.appended = true
	s.records = append(s.records, append([]byte(nil), p...))
	n := uint64(len(s.records))
	held := s.held
	s.mu.Unlock()
	if s.onDurable != nil && !held {
		s.onDurable()
	}
	return n, nil
}

func (s *memSpool) Durable() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		return s.heldAt
	}
	return uint64(len(s.records))
}

func (s *memSpool) Read(after uint64, limit int, fn func(uint64, []byte) error) (uint64, error) {
	s.mu.Lock()
	recs := s.records
	s.mu.Unlock()
	last := after
	for seq := after + 1; seq <= uint64(len(recs)) && int(seq-after) <= limit; seq++ {
		if err := fn(seq, recs[seq-1]); err != nil {
			return last, err
		}
		last = seq
	}
	return last, nil
}

func (s *memSpool) Release(upTo uint64) error {
	s.mu.Lock()
	s.released = max(s.released, upTo)
	s.mu.Unlock()
	return nil
}

func (s *memSpool) Sync() error { return nil }

// errReplayAfterAppend is spool.ErrReplay's counterpart.
var errReplayAfterAppend = errors.New("memSpool: Replay after Append")

func (s *memSpool) Replay(fn func(uint64, []byte) error) error {
	s.mu.Lock()
	from, appended := s.released, s.appended
	s.mu.Unlock()
	if appended {
		return errReplayAfterAppend
	}
	_, err := s.Read(from, 1<<30, fn)
	return err
}
