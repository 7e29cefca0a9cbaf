package sim

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tollgated/tollgated/spool"
)

// contractSpool is what a node asks of its spool (control's Spool,
// RecoverSpool and ExportSpool together).
type contractSpool interface {
	Append(p []byte) (uint64, error)
	Durable() uint64
	Sync() error
	Read(after uint64, limit int, fn func(uint64, []byte) error) (uint64, error)
	Release(upTo uint64) error
	Replay(fn func(uint64, []byte) error) error
}

// TestTheSpoolDoubleKeepsTheRealContract runs one script against the real
// spool and the simulator's: every answer — sequence numbers, what is
// replayed and read, and every refusal — must be the same, so the double
// refuses what the real spool refuses.
func TestTheSpoolDoubleKeepsTheRealContract(t *testing.T) {
	real := func(t *testing.T) (contractSpool, func() contractSpool) {
		dir := t.TempDir()
		open := func() *spool.Spool {
			s, err := spool.Open(dir, spool.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
		s := open()
		return s, func() contractSpool { s.Close(); s = open(); return s }
	}
	double := func(t *testing.T) (contractSpool, func() contractSpool) {
		s := newMemSpool()
		return s, func() contractSpool { s.Sync(); s.crash(); return s }
	}
	want := contractScript(t, real)
	got := contractScript(t, double)
	if len(got) != len(want) {
		t.Fatalf("the double answered %d steps, the real spool %d:\n%q\n%q", len(got), len(want), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d: the double answered %q, the real spool %q", i, got[i], want[i])
		}
	}
}

// contractScript drives a spool and returns what it answered at each step.
func contractScript(t *testing.T, open func(*testing.T) (contractSpool, func() contractSpool)) []string {
	var out []string
	say := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	kind := func(err error) string {
		for _, e := range []error{spool.ErrReplay, spool.ErrNotDurable, spool.ErrArgument, spool.ErrTooLarge, spool.ErrFull} {
			if errors.Is(err, e) {
				return e.Error()
			}
		}
		if err != nil {
			return "other: " + err.Error()
		}
		return "ok"
	}
	read := func(s contractSpool, after uint64, limit int) string {
		var seqs []uint64
		last, err := s.Read(after, limit, func(seq uint64, p []byte) error {
			if string(p) != fmt.Sprint("r", seq) {
				return fmt.Errorf("record %d holds %q", seq, p)
			}
			seqs = append(seqs, seq)
			return nil
		})
		return fmt.Sprintf("read %v last %d %s", seqs, last, kind(err))
	}
	replay := func(s contractSpool) string {
		var seqs []uint64
		err := s.Replay(func(seq uint64, p []byte) error { seqs = append(seqs, seq); return nil })
		return fmt.Sprintf("replay %v %s", seqs, kind(err))
	}
	s, reopen := open(t)
	say("%s", replay(s)) // an empty spool replays nothing
	for i := range 5 {
		seq, err := s.Append(fmt.Append(nil, "r", i+1))
		say("append %d %s", seq, kind(err))
	}
	_, err := s.Append(make([]byte, spool.MaxPayload+1))
	say("oversize %s", kind(err))
	say("%s", replay(s)) // after an Append: refused
	say("sync %s", kind(s.Sync()))
	say("durable %d", s.Durable())
	say("%s", read(s, 0, 2))
	say("%s", read(s, 2, 100))
	say("%s", read(s, 0, 0))
	say("release beyond %s", kind(s.Release(6)))
	say("release %s", kind(s.Release(2)))
	say("release again %s", kind(s.Release(1)))
	say("%s", read(s, 0, 100))
	s = reopen()
	say("%s", replay(s)) // what was not released, in order
	say("%s", replay(s)) // Replay may repeat until something is appended
	seq, err := s.Append([]byte("r6"))
	say("append after reopen %d %s", seq, kind(err))
	say("%s", replay(s))
	say("sync %s", kind(s.Sync()))
	say("%s", read(s, 0, 100))
	return out
}
