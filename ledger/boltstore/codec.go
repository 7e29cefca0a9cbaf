package boltstore

// Record encoding. Every value starts with a format byte (recordV1, or
// recordV2 for accounts and leases, which schema 3 gave a field each, or
// recordV3 for leases, which schema 6 gave their grace), then
// its fields in a fixed order: unsigned integers (units, ids, tokens,
// generations, small enums) as uvarints, times as zigzag varints, strings
// as a uvarint length and the bytes, optional byte slices as length+1 (0
// means nil, so "nothing" and "empty" stay distinct), digests as 32 raw
// bytes. The record's own id is its bbolt key and is not repeated in the
// value. A typical account is ~40 bytes, a lease with two funders ~60.
//
// Keys are big-endian so that bbolt's byte order is numeric order; signed
// times in keys have their sign bit flipped so that negative times sort
// first.

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// Record formats. A decoder reads every format up to the newest; an
// encoder writes the newest its record has.
const (
	recordV1 = 1
	recordV2 = 2 // accounts: + Repaid; leases: + Holder
	recordV3 = 3 // leases: + Grace
	// Admin tokens: recordV2 (schema 7) + Role; a recordV1 token is
	// ledger.RoleAdmin, every token's power before roles existed.
)

// ErrCorrupt reports a stored record that does not decode, or an index
// that disagrees with the records.
var ErrCorrupt = ledger.ErrCorrupt

type encoder struct{ b []byte }

func newEncoder(size int) *encoder { return newEncoderV(size, recordV1) }

func newEncoderV(size int, format byte) *encoder {
	return &encoder{b: append(make([]byte, 0, size), format)}
}

func (e *encoder) uint(v uint64)          { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) int(v int64)            { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) units(v core.CostUnits) { e.uint(uint64(v)) }
func (e *encoder) bool(v bool) {
	if v {
		e.uint(1)
	} else {
		e.uint(0)
	}
}
func (e *encoder) string(s string) {
	e.uint(uint64(len(s)))
	e.b = append(e.b, s...)
}
func (e *encoder) optional(p []byte) {
	if p == nil {
		e.uint(0)
		return
	}
	e.uint(uint64(len(p)) + 1)
	e.b = append(e.b, p...)
}
func (e *encoder) digest(d [32]byte) { e.b = append(e.b, d[:]...) }

// decoder reads what encoder wrote; the first error sticks and every later
// read returns zero values, so decode functions check err once at the end.
type decoder struct {
	b      []byte
	err    error
	format byte
}

// newDecoder reads a record of format recordV1 up to newest.
func newDecoder(what string, v []byte) *decoder { return newDecoderUpTo(what, v, recordV1) }

func newDecoderUpTo(what string, v []byte, newest byte) *decoder {
	d := &decoder{b: v}
	if len(v) == 0 || v[0] < recordV1 || v[0] > newest {
		d.fail("%s: unknown record format", what)
		return d
	}
	d.format, d.b = v[0], v[1:]
	return d
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	}
	d.b = nil
}

func (d *decoder) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) units() core.CostUnits { return core.CostUnits(d.uint()) }

// small reads an enum that must fit below limit.
func (d *decoder) small(limit uint64) uint8 {
	v := d.uint()
	if v >= limit {
		d.fail("value %d out of range", v)
		return 0
	}
	return uint8(v)
}

func (d *decoder) bool() bool { return d.small(2) == 1 }

func (d *decoder) bytes(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("length %d past the end", n)
		return nil
	}
	p := append([]byte(nil), d.b[:n]...) // bbolt's memory is only valid in the transaction
	d.b = d.b[n:]
	return p
}

func (d *decoder) string() string { return string(d.bytes(d.uint())) }

func (d *decoder) optional() []byte {
	n := d.uint()
	if n == 0 || d.err != nil {
		return nil
	}
	p := d.bytes(n - 1)
	if p == nil && d.err == nil {
		p = []byte{}
	}
	return p
}

func (d *decoder) digest() (out [32]byte) {
	copy(out[:], d.bytes(32))
	return out
}

// done reports the first error, or trailing bytes.
func (d *decoder) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return d.err
}

func encodeAccount(a *ledger.Account) []byte {
	e := newEncoderV(48+len(a.Parent)+len(a.Policy), recordV2)
	e.string(string(a.Parent))
	e.uint(uint64(a.Capacity))
	e.bool(a.Unmetered)
	e.uint(uint64(a.Scope))
	e.uint(uint64(a.Status))
	e.optional(a.Policy)
	e.uint(a.PolicyGeneration)
	e.units(a.Budget.Allowance)
	e.uint(uint64(a.Budget.Period))
	for _, v := range [...]core.CostUnits{a.Deposited, a.Overage, a.AllowanceLeft, a.TopUpLeft, a.Outstanding, a.Settled, a.Loss, a.Expired} {
		e.units(v)
	}
	e.int(a.PeriodStart)
	e.int(a.PeriodEnd)
	e.uint(a.NextToken)
	e.units(a.Repaid)
	return e.b
}

func decodeAccount(id []byte, v []byte) (ledger.Account, error) {
	d := newDecoderUpTo("account", v, recordV2)
	a := ledger.Account{AccountSpec: ledger.AccountSpec{ID: core.AccountID(id)}}
	a.Parent = core.AccountID(d.string())
	a.Capacity = core.CapacityClass(d.small(uint64(core.CapacityBestEffort) + 1))
	a.Unmetered = d.bool()
	a.Scope = core.Scope(d.small(uint64(core.ScopeOrg) + 1))
	a.Status = core.Status(d.small(uint64(core.StatusClosed) + 1))
	a.Policy = d.optional()
	a.PolicyGeneration = d.uint()
	a.Budget.Allowance = d.units()
	a.Budget.Period = ledger.Period(d.small(uint64(ledger.PeriodMonth) + 1))
	for _, p := range [...]*core.CostUnits{&a.Deposited, &a.Overage, &a.AllowanceLeft, &a.TopUpLeft, &a.Outstanding, &a.Settled, &a.Loss, &a.Expired} {
		*p = d.units()
	}
	a.PeriodStart = d.int()
	a.PeriodEnd = d.int()
	a.NextToken = d.uint()
	if d.format >= recordV2 {
		a.Repaid = d.units()
	}
	if err := d.done(); err != nil {
		return ledger.Account{}, fmt.Errorf("account %q: %w", id, err)
	}
	return a, nil
}

func encodeLease(rec *ledger.LeaseRecord) []byte {
	e := newEncoderV(40+len(rec.Account)+len(rec.Holder)+24*len(rec.Funding), recordV3)
	e.string(string(rec.Account))
	e.uint(rec.Token)
	e.units(rec.Granted)
	e.units(rec.Used)
	e.units(rec.Credited)
	e.uint(uint64(rec.State))
	e.int(rec.GrantedAt)
	e.int(rec.ExpiresAt)
	e.uint(uint64(len(rec.Funding)))
	for _, f := range rec.Funding {
		e.string(string(f.Account))
		e.units(f.Allowance)
		e.units(f.TopUp)
		e.int(f.PeriodStart)
	}
	e.string(rec.Holder)
	e.int(rec.Grace)
	return e.b
}

func decodeLease(id uint64, v []byte) (ledger.LeaseRecord, error) {
	d := newDecoderUpTo("lease", v, recordV3)
	rec := ledger.LeaseRecord{Lease: ledger.Lease{ID: id}}
	rec.Account = core.AccountID(d.string())
	rec.Token = d.uint()
	rec.Granted = d.units()
	rec.Used = d.units()
	rec.Credited = d.units()
	rec.State = ledger.LeaseState(d.small(uint64(ledger.LeaseReclaimed) + 1))
	rec.GrantedAt = d.int()
	rec.ExpiresAt = d.int()
	n := d.uint()
	if n > 3 { // a funding chain is at most org, workspace, agent
		d.fail("%d funders", n)
	}
	for range n {
		rec.Funding = append(rec.Funding, ledger.Funding{
			Account: core.AccountID(d.string()), Allowance: d.units(), TopUp: d.units(), PeriodStart: d.int(),
		})
	}
	if d.format >= recordV2 {
		rec.Holder = d.string()
	}
	rec.Grace = ledger.NoGrace // granted before leases kept their holder's
	if d.format >= recordV3 {
		rec.Grace = d.int()
	}
	if err := d.done(); err != nil {
		return ledger.LeaseRecord{}, fmt.Errorf("lease %d: %w", id, err)
	}
	if rec.Grace < ledger.NoGrace {
		return ledger.LeaseRecord{}, fmt.Errorf("%w: lease %d has grace %d", ErrCorrupt, id, rec.Grace)
	}
	return rec, nil
}

func encodeUsage(u *ledger.Usage) []byte {
	e := newEncoder(48 + len(u.Account))
	e.b = append(e.b, u.ID[:]...)
	e.string(string(u.Account))
	e.uint(uint64(u.Source))
	e.uint(u.LeaseID)
	e.uint(u.Token)
	e.units(u.Units)
	e.int(u.OccurredAt)
	return e.b
}

func decodeUsage(v []byte) (ledger.Usage, error) {
	d := newDecoder("usage", v)
	var u ledger.Usage
	copy(u.ID[:], d.bytes(16))
	u.Account = core.AccountID(d.string())
	u.Source = ledger.UsageSource(d.small(math.MaxUint8 + 1))
	u.LeaseID = d.uint()
	u.Token = d.uint()
	u.Units = d.units()
	u.OccurredAt = d.int()
	return u, d.done()
}

// A key's layout since schema 3; decodeSchema2Key reads the one before it
// (no name, expiry or last use), for the upgrade only.
func encodeKey(k *ledger.Key) []byte {
	e := newEncoder(64 + len(k.Account) + len(k.Name))
	e.string(string(k.Account))
	e.string(k.Name)
	e.digest(k.Digest)
	e.int(k.CreatedAt)
	e.int(k.ExpiresAt)
	e.int(k.LastUsed)
	e.bool(k.Revoked)
	return e.b
}

func decodeKey(id []byte, v []byte) (ledger.Key, error) {
	d := newDecoder("key", v)
	k := ledger.Key{ID: string(id)}
	k.Account = core.AccountID(d.string())
	k.Name = d.string()
	k.Digest = d.digest()
	k.CreatedAt = d.int()
	k.ExpiresAt = d.int()
	k.LastUsed = d.int()
	k.Revoked = d.bool()
	return k, d.done()
}

func decodeSchema2Key(id []byte, v []byte) (ledger.Key, error) {
	d := newDecoder("schema-2 key", v)
	k := ledger.Key{ID: string(id)}
	k.Account = core.AccountID(d.string())
	k.Digest = d.digest()
	k.CreatedAt = d.int()
	k.Revoked = d.bool()
	return k, d.done()
}

func encodeAdminToken(t *ledger.AdminToken) []byte {
	e := newEncoderV(56+len(t.Name), recordV2)
	e.string(t.Name)
	e.digest(t.Digest)
	e.int(t.CreatedAt)
	e.bool(t.Revoked)
	e.string(t.Role)
	return e.b
}

func decodeAdminToken(id []byte, v []byte) (ledger.AdminToken, error) {
	d := newDecoderUpTo("admin token", v, recordV2)
	t := ledger.AdminToken{ID: string(id), Role: ledger.RoleAdmin}
	t.Name = d.string()
	t.Digest = d.digest()
	t.CreatedAt = d.int()
	t.Revoked = d.bool()
	if d.format >= recordV2 {
		t.Role = d.string()
	}
	if d.err == nil && !ledger.ValidRole(t.Role) {
		d.fail("admin token %s: unknown role %q", id, t.Role)
	}
	return t, d.done()
}

func encodePlatformToken(t *ledger.PlatformToken) []byte {
	e := newEncoder(48)
	e.digest(t.Digest)
	e.int(t.CreatedAt)
	e.bool(t.Revoked)
	return e.b
}

func decodePlatformToken(id []byte, v []byte) (ledger.PlatformToken, error) {
	d := newDecoder("platform token", v)
	t := ledger.PlatformToken{ID: string(id)}
	t.Digest = d.digest()
	t.CreatedAt = d.int()
	t.Revoked = d.bool()
	return t, d.done()
}

func encodeAudit(r *ledger.AuditRecord) []byte {
	e := newEncoder(16 + len(r.Actor) + len(r.Action) + len(r.Target) + len(r.Before) + len(r.After))
	e.int(r.At)
	e.string(r.Actor)
	e.string(r.Action)
	e.string(r.Target)
	e.optional(r.Before)
	e.optional(r.After)
	return e.b
}

func decodeAudit(seq uint64, v []byte) (ledger.AuditRecord, error) {
	d := newDecoder("audit record", v)
	r := ledger.AuditRecord{Seq: seq}
	r.At = d.int()
	r.Actor = d.string()
	r.Action = d.string()
	r.Target = d.string()
	r.Before = d.optional()
	r.After = d.optional()
	return r, d.done()
}

func encodeIncarnation(i *ledger.Incarnation) []byte {
	e := newEncoder(24)
	e.uint(i.Number)
	e.int(i.Grace)
	e.int(i.StartedAt)
	return e.b
}

func decodeIncarnation(node []byte, v []byte) (ledger.Incarnation, error) {
	d := newDecoder("incarnation", v)
	i := ledger.Incarnation{Node: string(node)}
	i.Number = d.uint()
	i.Grace = d.int()
	i.StartedAt = d.int()
	if err := d.done(); err != nil {
		return ledger.Incarnation{}, fmt.Errorf("node %q: %w", node, err)
	}
	if i.Number == 0 || i.Grace < ledger.NoGrace {
		return ledger.Incarnation{}, fmt.Errorf("%w: node %q: incarnation %d, grace %d", ErrCorrupt, node, i.Number, i.Grace)
	}
	return i, nil
}

// u64Key is v big-endian: numeric order is byte order.
func u64Key(v uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), v) }

// timeKey appends t (Unix ns) so that byte order is time order.
func timeKey(dst []byte, t int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(t)^(1<<63))
}

// dueKey indexes an account by the end of its budget period.
func dueKey(end int64, id core.AccountID) []byte {
	return append(timeKey(make([]byte, 0, 8+len(id)), end), id...)
}

// expiryKey indexes an active lease by its expiry, then id.
func expiryKey(expires int64, lease uint64) []byte {
	return binary.BigEndian.AppendUint64(timeKey(make([]byte, 0, 16), expires), lease)
}

// pairKey is account, a 0 byte (never in an account id), then name: keys
// of one account are contiguous and prefixed by account+0.
func pairKey(account core.AccountID, name string) []byte {
	k := make([]byte, 0, len(account)+1+len(name))
	return append(append(append(k, account...), 0), name...)
}
