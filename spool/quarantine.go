package spool

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// quarantineNote is the report Quarantine leaves in the directory it moves
// aside; its presence also tells an interrupted Quarantine which of two
// directories holds the originals.
const quarantineNote = "QUARANTINED.txt"

// Quarantined is what Quarantine did.
type Quarantined struct {
	Report *Report // what it found (before it changed anything)
	// Moved is where the original directory now is, every byte of it; ""
	// if the spool was clean and nothing was done.
	Moved string
	// Kept counts the good unreleased records of the new spool, each at
	// its own sequence number; a lost record's number holds an empty
	// record (a hole), which readers skip.
	Kept uint64
}

// Quarantine moves a damaged spool aside so that Open can start again
// without losing a record that can still be read. It reads every good
// unreleased record of dir (those Verify counts, including good records
// that follow damage), writes them in order into a new spool beside it
// with the same released mark, swaps the two directories in one atomic
// rename, and moves the original to dest, which must not exist, with a
// report of what was found in it (quarantineNote).
//
// What it costs: the records Verify reports lost — their sequence numbers
// carry no good record — are in neither spool, so their usage is never
// billed unless the exporter billed it before the damage; whatever bytes
// remain of them are in dest, at the offsets the report names. The kept records keep
// their sequence numbers, and a lost record's number is taken by an empty
// record: the ledger's export mark counts spool positions, so renumbering
// would make it skip or repeat records. Lost records after the last good
// one leave no hole; a start whose ledger mark is past the spool's end is
// refused by the daemon rather than skip what it would append next.
// With a damaged released mark, records already billed may be kept and
// billed again as duplicates, which the ledger recognises and ignores.
//
// A clean spool is left alone. The spool must not be open (ErrLocked).
// If Quarantine is interrupted, running it again finishes or redoes it:
// until the swap the original is untouched, and after it the original is
// recognised by its report.
func Quarantine(dir, dest string) (*Quarantined, error) {
	dir = filepath.Clean(dir)
	stage := dir + ".rebuild"
	if err := isDir(dir); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlockDir(lock)
	if err := finishInterrupted(stage, dest); err != nil {
		return nil, err
	}
	rep, err := inspect(dir, nil)
	if err != nil {
		return nil, err
	}
	q := &Quarantined{Report: rep}
	if rep.Clean() {
		return q, nil
	}
	if _, err := os.Lstat(dest); !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("spool: quarantine destination %s exists (or cannot be checked: %v): %w", dest, err, ErrArgument)
	}
	if q.Kept, err = rebuild(dir, stage, rep); err != nil {
		return nil, err
	}
	var note bytes.Buffer
	rep.WriteText(&note)
	fmt.Fprintf(&note, "quarantined: %d good records moved to a new spool in %s at their own sequence numbers, lost ones as empty records; this directory is the original\n",
		q.Kept, dir)
	if err := writeFileSynced(filepath.Join(dir, quarantineNote), note.Bytes()); err != nil {
		return nil, err
	}
	if err := exchange(dir, stage); err != nil {
		return nil, fmt.Errorf("spool: swapping in the rebuilt spool: %w (the rebuilt spool is in %s; the original is unchanged in %s apart from %s)",
			err, stage, dir, quarantineNote)
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return nil, err
	}
	if err := moveAside(stage, dest); err != nil {
		return nil, err
	}
	q.Moved = dest
	return q, nil
}

// finishInterrupted deals with a stage directory an interrupted Quarantine
// left: after the swap it holds the original (it has the note) and goes to
// dest; before it, it is a partial copy and is removed.
func finishInterrupted(stage, dest string) error {
	if _, err := os.Lstat(stage); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if _, err := os.Stat(filepath.Join(stage, quarantineNote)); err == nil {
		return moveAside(stage, dest)
	}
	if err := os.RemoveAll(stage); err != nil {
		return fmt.Errorf("spool: removing the partial rebuild %s: %w", stage, err)
	}
	return nil
}

// rebuild writes every good unreleased record of dir, in order, into a
// new spool in stage with dir's released mark, and checks the result. It
// returns how many records it wrote.
func rebuild(dir, stage string, want *Report) (uint64, error) {
	if err := os.RemoveAll(stage); err != nil {
		return 0, fmt.Errorf("spool: %w", err)
	}
	if err := os.Mkdir(stage, 0o700); err != nil {
		return 0, fmt.Errorf("spool: %w", err)
	}
	// The records keep their owner: the rebuilt spool is the same node's.
	if owner, err := readOwner(dir); err != nil {
		return 0, err
	} else if owner != "" {
		if err := writeFileSynced(filepath.Join(stage, ownerName), []byte(owner+"\n")); err != nil {
			return 0, err
		}
	}
	if want.Released > 0 {
		d, err := os.Open(stage)
		if err != nil {
			return 0, fmt.Errorf("spool: %w", err)
		}
		err = writeMark(stage, d, want.Released)
		d.Close()
		if err != nil {
			return 0, err
		}
	}
	s, err := Open(stage, Options{})
	if err != nil {
		return 0, err
	}
	kept, holes, next := uint64(0), uint64(0), want.Released+1
	appendOne := func(payload []byte) error {
		for {
			_, err := s.Append(payload)
			if errors.Is(err, ErrFull) {
				if err := s.Sync(); err != nil {
					return err
				}
				continue
			}
			return err
		}
	}
	rep, err := inspect(dir, func(seq uint64, payload []byte) error {
		// A lost record's number is kept by an empty record (a hole):
		// every good record keeps its own, so a position recorded outside
		// the spool (the ledger's export mark) still means the same record.
		for ; next < seq; next++ {
			if err := appendOne(nil); err != nil {
				return err
			}
			holes++
		}
		if err := appendOne(payload); err != nil {
			return err
		}
		kept, next = kept+1, seq+1
		return nil
	})
	if err == nil {
		err = s.Sync()
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("spool: rebuilding %s in %s: %w", dir, stage, err)
	}
	// The spool is locked, so the second reading must find what the first
	// did; and the rebuilt spool must be clean and hold exactly that.
	if rep.Records != want.Records || kept != want.Records {
		return 0, fmt.Errorf("spool: rebuild read %d records (kept %d), the first reading %d: %w", rep.Records, kept, want.Records, ErrCorrupt)
	}
	check, err := Verify(stage)
	if err != nil {
		return 0, err
	}
	if !check.Clean() || check.Records != kept+holes || check.Released != want.Released {
		return 0, fmt.Errorf("spool: the rebuilt spool in %s does not check (%d records, clean %v): %w", stage, check.Records, check.Clean(), ErrCorrupt)
	}
	return kept, nil
}

// moveAside renames from to dest, creating dest's parent, and syncs both
// parents.
func moveAside(from, dest string) error {
	if _, err := os.Lstat(dest); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("spool: cannot move %s to %s: it exists (or cannot be checked: %v)", from, dest, err)
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o700); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if err := os.Rename(from, dest); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if err := syncDir(filepath.Dir(dest)); err != nil {
		return err
	}
	return syncDir(filepath.Dir(from))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("spool: sync %s: %w", dir, err)
	}
	return nil
}

// writeFileSynced creates (or replaces) path with data, synced with its
// directory.
func writeFileSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("spool: %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}
