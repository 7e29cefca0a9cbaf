package spool

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Report is what Verify found in a spool directory: every segment that
// holds unreleased records read record by record, past damage too, and
// what Open would make of the directory.
type Report struct {
	Dir string
	// Released is the released mark. If the mark is damaged (MarkDamaged),
	// it is the highest mark the segments allow, one before the first
	// segment's first record: segments are deleted only once released.
	Released    uint64
	MarkDamaged bool
	Segments    []SegmentReport
	// Strays are files named like segments that are not segment files.
	Strays []string
	// Records counts the good unreleased records: what a replay would
	// deliver, and what Quarantine keeps.
	Records uint64
	// Lost are the unreleased sequence numbers no good record carries.
	// Their usage is never billed, unless the exporter had billed it
	// before the damage (it releases at most once a second, so records
	// above the mark may already be in the ledger).
	// Past the last good record only what the bytes show is known (see
	// Dropped): whole records cut from the end of the last segment leave
	// no trace.
	Lost []SeqRange
	// Start is what Open would return: nil when it starts, after cutting
	// Tail if Tail.Bytes > 0.
	Start error
	Tail  Dropped
}

// SegmentReport is one segment file.
type SegmentReport struct {
	Path  string
	First uint64 // sequence number its name gives its first record
	Size  int64  // of the file
	// Free counts the zero bytes after the last record of the last
	// segment, to the end of the file: space grown ahead of the writes,
	// not damage.
	Free int64
	// Released: it holds only released records, so Open deletes it unread
	// (and Verify does not read it either).
	Released bool
	Records  uint64 // good records in it, released ones included
	Damage   []Damage
}

// Damage is a stretch of a segment that holds no good record.
type Damage struct {
	Offset int64
	Bytes  int64  // up to the next good record, or the end of the file
	Seq    uint64 // the sequence number the record at Offset should carry
	Reason string
	// Records counts, for damage that runs to the end of the file, the
	// records its bytes held as far as their headers tell.
	Records uint64
}

// SeqRange is the sequence numbers First through Last.
type SeqRange struct{ First, Last uint64 }

// Len is the number of sequence numbers in r.
func (r SeqRange) Len() uint64 { return r.Last - r.First + 1 }

// Clean reports whether Open would start without cutting or refusing
// anything.
func (r *Report) Clean() bool { return r.Start == nil && r.Tail.Bytes == 0 }

// LostRecords is the number of sequence numbers in Lost.
func (r *Report) LostRecords() uint64 {
	n := uint64(0)
	for _, l := range r.Lost {
		n += l.Len()
	}
	return n
}

// Verify reads every record of the spool in dir that is not released,
// checking lengths, CRCs and sequence numbers, reports each damaged
// stretch with its file and offset, and says what Open would do. It
// changes nothing, and takes the spool's lock while it reads: a spool in
// use is ErrLocked.
func Verify(dir string) (*Report, error) {
	if err := isDir(dir); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlockDir(lock)
	return inspect(dir, nil)
}

func isDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("spool: %s is not a directory: %w", dir, ErrArgument)
	}
	return nil
}

// inspect builds the report of dir; the caller holds its lock. keep, if
// set, is called with every good unreleased record's payload, in order of
// sequence number; an error from it stops inspect.
func inspect(dir string, keep func(seq uint64, payload []byte) error) (*Report, error) {
	rep := &Report{Dir: dir}
	plan, err := planRecovery(dir)
	rep.Start = err
	if err == nil {
		rep.Tail = plan.dropped(dir)
	}
	released, err := readMark(dir)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			return nil, err
		}
		rep.MarkDamaged = true
	}
	firsts, strays, err := segmentFiles(dir)
	if err != nil {
		return nil, err
	}
	rep.Strays = strays
	if rep.MarkDamaged {
		released = 0
		if len(firsts) > 0 {
			released = firsts[0] - 1
		}
	}
	rep.Released = released

	w := walker{rep: rep, keep: keep, expect: released + 1}
	for i, first := range firsts {
		seg := SegmentReport{Path: segPath(dir, first), First: first}
		if i+1 < len(firsts) && firsts[i+1]-1 <= released {
			seg.Released = true
			if fi, err := os.Stat(seg.Path); err == nil {
				seg.Size = fi.Size()
			}
		} else if err := w.segment(&seg, i == len(firsts)-1); err != nil {
			return nil, err
		}
		rep.Segments = append(rep.Segments, seg)
	}
	w.lostAtEnd()
	return rep, nil
}

// segmentFiles lists dir's segment files (first sequence numbers, in
// order) and, apart, the paths of files named like segments that are not.
func segmentFiles(dir string) (firsts []uint64, strays []string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("spool: list segments: %w", err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), segSuffix) {
			continue
		}
		if first, ok := parseSegName(e.Name()); ok && e.Type().IsRegular() {
			firsts = append(firsts, first)
		} else {
			strays = append(strays, filepath.Join(dir, e.Name()))
		}
	}
	slices.Sort(firsts)
	return firsts, strays, nil
}

// walker reads segments in order, past damage, keeping the good records
// whose sequence numbers increase.
type walker struct {
	rep    *Report
	keep   func(seq uint64, payload []byte) error
	expect uint64 // the next unreleased sequence number not yet seen
	// tailRecords: the last segment read ended in damage that held this
	// many records, as far as their headers tell.
	tailRecords uint64
}

// segment reads one segment into seg; last says it is the last one, the
// only one whose records may end in zeros.
func (w *walker) segment(seg *SegmentReport, last bool) error {
	f, err := os.Open(seg.Path)
	if err != nil {
		return fmt.Errorf("spool: verify: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("spool: verify: %w", err)
	}
	seg.Size = fi.Size()
	var r chunkReader
	r.reset(f)
	w.tailRecords = 0
	next := seg.First    // the least sequence number the next record may carry
	afterDamage := false // the records missing before the next good one are in damaged bytes
	for off := int64(0); off < seg.Size; {
		h, rec, err := r.record(off)
		if err == nil && h.seq >= next {
			if h.seq > next && !afterDamage {
				seg.Damage = append(seg.Damage, Damage{Offset: off, Seq: next,
					Reason: fmt.Sprintf("record has seq %d, want %d (records missing)", h.seq, next)})
			}
			seg.Records++
			if err := w.good(h.seq, rec[HeaderSize:]); err != nil {
				return err
			}
			next = h.seq + 1
			off += int64(len(rec))
			afterDamage = false
			continue
		}
		afterDamage = true
		if err == nil { // whole, but out of order: skipped
			seg.Damage = append(seg.Damage, Damage{Offset: off, Bytes: int64(len(rec)), Seq: next,
				Reason: fmt.Sprintf("record has seq %d, want %d (out of order)", h.seq, next)})
			off += int64(len(rec))
			continue
		}
		if !badRecord(err) {
			return fmt.Errorf("spool: verify %s: offset %d: %w", seg.Path, off, err)
		}
		if last {
			zero, zerr := zeroTail(&r, off, seg.Size)
			if zerr != nil {
				return fmt.Errorf("spool: verify %s: %w", seg.Path, zerr)
			}
			if zero {
				seg.Free = seg.Size - off
				break
			}
		}
		at, found, ferr := findRecord(&r, off+1, seg.Size, next)
		if ferr != nil {
			return fmt.Errorf("spool: verify %s: %w", seg.Path, ferr)
		}
		d := Damage{Offset: off, Bytes: seg.Size - off, Seq: next, Reason: err.Error()}
		if found {
			d.Bytes = at - off
		} else {
			if d.Records, ferr = countTail(&r, off, seg.Size, next); ferr != nil {
				return fmt.Errorf("spool: verify %s: %w", seg.Path, ferr)
			}
			// The zeros after the damage are room the flusher grew, not
			// damage.
			dirty, derr := dirtyEnd(&r, off, seg.Size)
			if derr != nil {
				return fmt.Errorf("spool: verify %s: %w", seg.Path, derr)
			}
			d.Bytes = dirty - off
		}
		seg.Damage = append(seg.Damage, d)
		w.tailRecords = d.Records
		off += d.Bytes
	}
	return nil
}

// good takes one good record: released ones are skipped, sequence numbers
// skipped since the last one are lost.
func (w *walker) good(seq uint64, payload []byte) error {
	if seq < w.expect {
		return nil // released, or a repeat
	}
	if seq > w.expect {
		w.rep.Lost = append(w.rep.Lost, SeqRange{w.expect, seq - 1})
	}
	w.expect = seq + 1
	w.rep.Records++
	if w.keep != nil {
		return w.keep(seq, payload)
	}
	return nil
}

// lostAtEnd counts the records the damaged end of the last segment held.
func (w *walker) lostAtEnd() {
	if w.tailRecords > 0 {
		w.rep.Lost = append(w.rep.Lost, SeqRange{w.expect, w.expect + w.tailRecords - 1})
	}
}

// WriteText writes the report for an operator: one line per finding.
func (r *Report) WriteText(out io.Writer) {
	fmt.Fprintf(out, "spool %s\n", r.Dir)
	if r.MarkDamaged {
		fmt.Fprintf(out, "  released mark: DAMAGED; taking %d (one before the first segment): records after it may already be billed, and re-sending them is harmless (the ledger counts them duplicate)\n", r.Released)
	} else {
		fmt.Fprintf(out, "  released mark: %d (records up to it are billed)\n", r.Released)
	}
	for _, s := range r.Strays {
		fmt.Fprintf(out, "  %s: not a segment file\n", s)
	}
	for _, s := range r.Segments {
		switch {
		case s.Released:
			fmt.Fprintf(out, "  %s: %d bytes, released (start-up deletes it)\n", s.Path, s.Size)
			continue
		case len(s.Damage) == 0 && s.Free > 0:
			fmt.Fprintf(out, "  %s: %d bytes, %d records, ok; the last %d bytes are zeros, room for more records\n", s.Path, s.Size, s.Records, s.Free)
			continue
		case len(s.Damage) == 0:
			fmt.Fprintf(out, "  %s: %d bytes, %d records, ok\n", s.Path, s.Size, s.Records)
			continue
		}
		fmt.Fprintf(out, "  %s: %d bytes, %d good records, DAMAGED:\n", s.Path, s.Size, s.Records)
		for _, d := range s.Damage {
			fmt.Fprintf(out, "    offset %d: %d bytes (seq %d expected): %s", d.Offset, d.Bytes, d.Seq, d.Reason)
			if d.Records > 0 {
				fmt.Fprintf(out, "; they held %d records", d.Records)
			}
			fmt.Fprintln(out)
		}
	}
	fmt.Fprintf(out, "  unreleased good records: %d\n", r.Records)
	if len(r.Lost) > 0 {
		fmt.Fprintf(out, "  lost (no good copy left; never billed unless exported before the damage): %d records:", r.LostRecords())
		for _, l := range r.Lost {
			fmt.Fprintf(out, " %d-%d", l.First, l.Last)
		}
		fmt.Fprintln(out)
	}
	switch {
	case r.Start != nil:
		fmt.Fprintf(out, "  start-up: REFUSES: %v\n", r.Start)
	case r.Tail.Bytes > 0:
		fmt.Fprintf(out, "  start-up: cuts a torn or damaged tail of %s at offset %d: %d bytes, %d records from seq %d\n",
			r.Tail.File, r.Tail.Offset, r.Tail.Bytes, r.Tail.Records, r.Tail.FirstSeq)
	default:
		fmt.Fprintf(out, "  start-up: ok, clean\n")
	}
}
