//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgated/tollgated/spool"
)

// spoolRecord is one record of a segment file, read by the on-disk format
// (spool/doc.go): a 16-byte header (length, CRC, sequence number), then
// the payload.
type spoolRecord struct {
	off int64
	len int64 // header and payload
	seq uint64
}

// segmentRecords lists the records of a segment file, up to the first
// that does not fit or the zeros after the last.
func segmentRecords(t *testing.T, path string) []spoolRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []spoolRecord
	for off := int64(0); off+spool.HeaderSize <= int64(len(b)); {
		n := spool.HeaderSize + int64(binary.LittleEndian.Uint32(b[off:]))
		if off+n > int64(len(b)) || binary.LittleEndian.Uint64(b[off+8:]) == 0 {
			break // no sequence number: the zeros the last segment is grown by
		}
		out = append(out, spoolRecord{off: off, len: n, seq: binary.LittleEndian.Uint64(b[off+8:])})
		off += n
	}
	return out
}

// killUnderLoad runs a daemon on dir, provisions an account, loads it,
// kills it with SIGKILL, and returns what clients saw acknowledged and the
// last segment of the spool, which holds unreleased records (the exporter
// releases at most once a second).
func killUnderLoad(t *testing.T, dir string) (*acked, string, *spool.Report) {
	t.Helper()
	p := startProc(t, dir, "--usage-history", "1000000")
	key := p.provision("acme", 1<<40, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := load(ctx, p.listen, key, 8)
	a.awaitAcked(t, 500)
	p.kill9()
	a.wait()
	if len(a.units) == 0 {
		t.Fatalf("nothing acknowledged before the kill (%v)", a.denied)
	}
	rep, err := spool.Verify(filepath.Join(dir, spoolDir))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || rep.Records < 3 {
		t.Fatalf("the killed daemon's spool should be clean and hold unreleased records: %d, clean %v", rep.Records, rep.Clean())
	}
	last := rep.Segments[len(rep.Segments)-1].Path
	return a, last, rep
}

// billedExcept checks that every acknowledged event is in the ledger except
// at most lost of them, and returns how many are missing.
func billedExcept(t *testing.T, dir string, a *acked, lost int) int {
	t.Helper()
	s := openLedger(t, dir)
	defer s.Close()
	usage := usageByID(t, s, "acme")
	missing := 0
	for id := range a.units {
		if _, ok := usage[id]; !ok {
			missing++
		}
	}
	if missing > lost {
		t.Fatalf("%d acknowledged events missing from the ledger, at most %d may be", missing, lost)
	}
	return missing
}

// metric reads one sample from the admin API's /metrics (0 if absent).
func (p *proc) metric(name string) float64 {
	p.t.Helper()
	for _, line := range strings.Split(p.scrape(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				p.t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// TestSpoolTruncationIsReportedAndCounted: the spool of a daemon killed
// under load is truncated in the middle of its last record; the next start
// cuts the torn tail, says so in one WARN line with the records and bytes
// dropped, counts them in the metrics, and bills everything else.
func TestSpoolTruncationIsReportedAndCounted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills real processes")
	}
	t.Parallel()
	dir := t.TempDir()
	a, last, _ := killUnderLoad(t, dir)
	recs := segmentRecords(t, last)
	victim := recs[len(recs)-1]
	cut := victim.off + spool.HeaderSize + 3
	if err := os.Truncate(last, cut); err != nil {
		t.Fatal(err)
	}

	p := startProc(t, dir, "--usage-history", "1000000")
	var warn map[string]any
	for _, line := range strings.Split(p.all.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["level"] == "warn" && strings.Contains(m["message"].(string), "usage spool") {
			if warn != nil {
				t.Fatalf("two spool warnings:\n%s", p.all.String())
			}
			warn = m
		}
	}
	if warn == nil || warn["records"] != 1.0 || warn["bytes"] != float64(spool.HeaderSize+3) ||
		warn["file"] != last || warn["offset"] != float64(victim.off) || warn["first_seq"] != float64(victim.seq) {
		t.Fatalf("warning %v; want 1 record, %d bytes at %s offset %d, seq %d", warn, spool.HeaderSize+3, last, victim.off, victim.seq)
	}
	t.Logf("%s", warn["message"])
	if r, b := p.metric("tollgated_spool_recovery_dropped_records_total"), p.metric("tollgated_spool_recovery_dropped_bytes_total"); r != 1 || b != spool.HeaderSize+3 {
		t.Fatalf("metrics: %v records, %v bytes", r, b)
	}
	p.stop()
	missing := billedExcept(t, dir, a, 1)
	t.Logf("%d acknowledged, %d of them lost with the cut record", len(a.units), missing)
}

// TestSpoolVerifyAndQuarantineOverADamagedSpool: a byte flipped in the
// middle of a killed daemon's spool makes start-up refuse, naming the
// file and offset; `spool verify` reports it (exit 1), `spool quarantine`
// moves it aside keeping every other record, and the daemon starts and
// bills them.
func TestSpoolVerifyAndQuarantineOverADamagedSpool(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills real processes")
	}
	t.Parallel()
	dir := t.TempDir()
	a, last, rep := killUnderLoad(t, dir)
	var unreleased []spoolRecord
	for _, r := range segmentRecords(t, last) {
		if r.seq > rep.Released {
			unreleased = append(unreleased, r)
		}
	}
	victim := unreleased[len(unreleased)/2] // good records on both sides
	b, _ := os.ReadFile(last)
	b[victim.off+spool.HeaderSize+5] ^= 0x01
	if err := os.WriteFile(last, b, 0o600); err != nil {
		t.Fatal(err)
	}
	at := "offset " + strconv.FormatInt(victim.off, 10)

	code, stderr := runFailingProc(t, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--data-dir", dir, "--shards", "2")
	if code != 1 || !strings.Contains(stderr, last) || !strings.Contains(stderr, at) || !strings.Contains(stderr, "tollgated spool verify") {
		t.Fatalf("start on a damaged spool: exit %d\n%s", code, stderr)
	}

	spoolCmd := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := run(append([]string{"spool"}, args...), noEnv, &out, &errOut, nil)
		return code, out.String() + errOut.String()
	}
	code, out := spoolCmd("verify", "--data-dir", dir)
	if code != exitDamaged || !strings.Contains(out, last) || !strings.Contains(out, at) || !strings.Contains(out, "REFUSES") ||
		!strings.Contains(out, "never billed unless exported before the damage): 1 records: "+strconv.FormatUint(victim.seq, 10)) {
		t.Fatalf("spool verify: exit %d\n%s", code, out)
	}
	t.Logf("spool verify:\n%s", out)

	code, out = spoolCmd("quarantine", "--data-dir", dir)
	if code != exitClean || !strings.Contains(out, "quarantined: the original spool is now "+filepath.Join(dir, "spool-quarantine")) {
		t.Fatalf("spool quarantine: exit %d\n%s", code, out)
	}
	t.Logf("spool quarantine:\n%s", out)
	if code, out := spoolCmd("verify", "--data-dir", dir); code != exitClean {
		t.Fatalf("verify after quarantine: exit %d\n%s", code, out)
	}

	p := startProc(t, dir, "--usage-history", "1000000")
	if code, out := spoolCmd("verify", "--data-dir", dir); code != exitUsage || !strings.Contains(out, "stop it first") {
		t.Fatalf("verify of a running daemon's spool: exit %d\n%s", code, out)
	}
	p.stop()
	missing := billedExcept(t, dir, a, 1)
	t.Logf("%d acknowledged, %d lost with the damaged record", len(a.units), missing)
}

func TestSpoolCommandUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	for args, want := range map[string]int{"spool": exitUsage, "spool --help": exitClean, "spool fix": exitUsage,
		"spool verify extra": exitUsage, "spool verify --nope": exitUsage} {
		out.Reset()
		errOut.Reset()
		if code := run(strings.Fields(args), noEnv, &out, &errOut, nil); code != want {
			t.Errorf("%s: exit %d, want %d\n%s%s", args, code, want, out.String(), errOut.String())
		}
	}
	code := run([]string{"spool", "verify", "--data-dir", filepath.Join(t.TempDir(), "none")}, noEnv, &out, &errOut, nil)
	if code != exitUsage {
		t.Fatalf("verify of a missing data dir: exit %d", code)
	}
}
