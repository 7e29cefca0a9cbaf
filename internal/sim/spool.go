package sim

import (
	"fmt"

	"github.com/tollgated/tollgated/control"
	"github.com/tollgated/tollgated/spool"
)

// memSpool is a node's usage spool as the simulator keeps it: records in
// memory that become durable when the world flushes them, and a crash
// keeps only the durable ones. It enforces the contract of spool.Spool
// that the node relies on, with the real spool's errors — records are
// numbered consecutively from the last one there; Replay only before the
// first Append; Read within its limits and only durable records; Release
// never beyond the durable ones; ErrFull while the disk is full —, and
// TestTheSpoolDoubleKeepsTheRealContract runs the same checks against the
// real spool: a double that accepted what the real spool refuses would
// hide the bugs the simulator is for.
type memSpool struct {
	records  [][]byte // records[i] has sequence first+i
	first    uint64   // the sequence of records[0]
	durable  uint64
	released uint64
	started  bool // something was appended since open: Replay is over
	// full makes Append refuse with spool.ErrFull (the full-disk fault).
	full bool
	// cut is how many durable records the last open lost at the tail (the
	// lost-tail fault): what the daemon reads as a damaged tail.
	cut int
	// owner is the incarnation of its node the spool belongs to (0: a new,
	// empty data directory).
	owner uint64
	// node is the node id the spool belongs to ("": a new data directory).
	node string
	// flushedAt is when the world last flushed it.
	flushedAt int64
}

func newMemSpool() *memSpool { return &memSpool{first: 1} }

// identity is what the daemon reads of the spool's owner at a start.
func (s *memSpool) identity() control.SpoolIdentity {
	return control.SpoolIdentity{Node: s.node, Incarnation: s.owner, Used: s.durable > 0 || s.released > 0}
}

func (s *memSpool) last() uint64 { return s.first + uint64(len(s.records)) - 1 }

// Appended is the last sequence appended (0: none ever).
func (s *memSpool) Appended() uint64 { return s.last() }

func (s *memSpool) Append(p []byte) (uint64, error) {
	switch {
	case len(p) > spool.MaxPayload:
		return 0, spool.ErrTooLarge
	case s.full:
		return 0, spool.ErrFull
	}
	s.started = true
	s.records = append(s.records, append([]byte(nil), p...))
	return s.last(), nil
}

func (s *memSpool) Durable() uint64 { return s.durable }

// flush makes everything appended durable (the disk keeps up), unless it
// is full.
func (s *memSpool) flush() {
	if !s.full {
		s.durable = s.last()
	}
}

func (s *memSpool) Sync() error {
	if s.full && s.durable < s.last() {
		return spool.ErrNoSpace
	}
	s.flush()
	return nil
}

func (s *memSpool) Read(after uint64, limit int, fn func(uint64, []byte) error) (uint64, error) {
	if limit < 1 || limit > spool.MaxReadRecords || fn == nil {
		return after, fmt.Errorf("sim: Read limit %d: %w", limit, spool.ErrArgument)
	}
	last := after
	for seq := max(after, s.released) + 1; seq <= s.durable && int(seq-after) <= limit; seq++ {
		if err := fn(seq, s.records[seq-s.first]); err != nil {
			return last, err
		}
		last = seq
	}
	return last, nil
}

func (s *memSpool) Release(upTo uint64) error {
	if upTo > s.durable {
		return fmt.Errorf("sim: release %d, durable %d: %w", upTo, s.durable, spool.ErrNotDurable)
	}
	s.released = max(s.released, upTo)
	return nil
}

// Replay hands back every durable record not released, in order; it must
// come before the first Append, as the real spool's.
func (s *memSpool) Replay(fn func(uint64, []byte) error) error {
	if fn == nil {
		return fmt.Errorf("sim: Replay with nil fn: %w", spool.ErrArgument)
	}
	if s.started {
		return spool.ErrReplay
	}
	for seq := s.released + 1; seq <= s.durable; seq++ {
		if err := fn(seq, s.records[seq-s.first]); err != nil {
			return err
		}
	}
	return nil
}

// crash is kill -9 and a restart: what is not durable is gone, the disk is
// no longer full, and the reopened spool has appended nothing yet.
func (s *memSpool) crash() {
	clear(s.records[s.durable+1-s.first:])
	s.records = s.records[:s.durable+1-s.first]
	s.full, s.started, s.cut = false, false, 0
}

// loseTail is damage to the disk under a crashed node: the last n durable
// records are gone (zeroed), billed or not; the next open cuts them.
func (s *memSpool) loseTail(n int) {
	n = min(n, int(s.durable-s.released))
	if n <= 0 {
		return
	}
	s.durable -= uint64(n)
	s.records = s.records[:s.durable+1-s.first]
	s.cut = n
}
