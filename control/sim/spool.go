package sim

import (
	"errors"
	"fmt"
)

// memSpool is the usage spool as the simulator models it: records append
// in memory, become durable when the simulator flushes (after a latency it
// draws), and a crash keeps only the durable prefix. It numbers records
// consecutively from 1, as spool.Spool does.
type memSpool struct {
	records  [][]byte // records[i] has sequence i+1
	durable  uint64
	released uint64
	// full makes Append refuse with errFull (the simulator's stall fault).
	full bool
}

var errFull = errors.New("sim: spool full")

func (s *memSpool) Append(p []byte) (uint64, error) {
	if s.full {
		return 0, errFull
	}
	s.records = append(s.records, append([]byte(nil), p...))
	return uint64(len(s.records)), nil
}

func (s *memSpool) Durable() uint64 { return s.durable }

// flush makes everything appended durable.
func (s *memSpool) flush() { s.durable = uint64(len(s.records)) }

func (s *memSpool) Sync() error { s.flush(); return nil }

func (s *memSpool) Appended() uint64 { return uint64(len(s.records)) }

// crash drops what is not durable.
func (s *memSpool) crash() {
	clear(s.records[s.durable:])
	s.records = s.records[:s.durable]
	s.full = false
}

func (s *memSpool) Read(after uint64, limit int, fn func(uint64, []byte) error) (uint64, error) {
	last := after
	for seq := after + 1; seq <= s.durable && int(seq-after) <= limit; seq++ {
		if err := fn(seq, s.records[seq-1]); err != nil {
			return last, err
		}
		last = seq
	}
	return last, nil
}

func (s *memSpool) Release(upTo uint64) error {
	if upTo > s.durable {
		return fmt.Errorf("sim: release %d beyond durable %d", upTo, s.durable)
	}
	s.released = max(s.released, upTo)
	return nil
}

// Replay hands back every durable record not released, in order.
func (s *memSpool) Replay(fn func(uint64, []byte) error) error {
	for seq := s.released + 1; seq <= s.durable; seq++ {
		if err := fn(seq, s.records[seq-1]); err != nil {
			return err
		}
	}
	return nil
}
