package grpcmsg

import "google.golang.org/protobuf/encoding/protowire"

// Bounds of a RateLimitRequest: the sizes of its fixed backing arrays.
const (
	MaxDescriptors = 16 // descriptors in a request
	MaxEntries     = 16 // entries in a descriptor
)

// Field numbers of envoy.service.ratelimit.v3.RateLimitRequest.
const (
	rlsDomain      = 1 // string
	rlsDescriptors = 2 // repeated envoy.extensions.common.ratelimit.v3.RateLimitDescriptor
	rlsHitsAddend  = 3 // uint32
)

// Field numbers of envoy.extensions.common.ratelimit.v3.RateLimitDescriptor,
// its Entry, and google.protobuf.UInt64Value.
const (
	descEntries        = 1 // repeated Entry
	descLimit          = 2 // RateLimitOverride
	descHitsAddend     = 3 // google.protobuf.UInt64Value
	descIsNegativeHits = 4 // bool

	entryKey   = 1 // string
	entryValue = 2 // string

	wrapperValue = 1 // the value of every google.protobuf wrapper
)

// A RateLimitRequest is envoy.service.ratelimit.v3.RateLimitRequest, the
// fields tollgated reads. Decode fills it without allocating: the slices
// are backed by arrays inside it, and the byte slices alias the decoded
// message, which must not change while they are in use.
//
// A RateLimitRequest is large (about 13 KiB) and points into itself: keep
// one per worker and reuse it; do not copy it after its first Decode.
// Iterate over Descriptors by index, as each Descriptor is large too.
type RateLimitRequest struct {
	Domain      []byte
	Descriptors []Descriptor
	HitsAddend  uint32

	descriptors [MaxDescriptors]Descriptor
}

// A Descriptor is envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.
type Descriptor struct {
	Entries []Entry
	// HasLimit reports that the descriptor carries a limit override. Its
	// contents are not decoded: tollgated refuses overrides.
	HasLimit bool
	// HitsAddend is hits_addend's value when HasHitsAddend, which tells a
	// hits_addend of zero from none.
	HitsAddend     uint64
	HasHitsAddend  bool
	IsNegativeHits bool

	entries [MaxEntries]Entry
}

// An Entry is one key and value of a descriptor.
type Entry struct {
	Key, Value []byte
}

// Decode sets r to the RateLimitRequest msg holds, as proto.Unmarshal
// would (see the package documentation for where it differs). It resets r
// first, so nothing of an earlier message is left. On error r holds part
// of msg and is not to be used; the error is a *FieldError.
func (r *RateLimitRequest) Decode(msg []byte) error {
	r.reset()
	if err := r.decode(msg); err != nil {
		return named(err, "RateLimitRequest")
	}
	return nil
}

// reset empties r. Invariant: the backing arrays hold zero values past the
// slices' lengths, so r keeps no earlier message alive; reset restores it
// by clearing only what the last Decode used.
func (r *RateLimitRequest) reset() {
	for i := range min(len(r.Descriptors), MaxDescriptors) {
		r.descriptors[i].reset()
	}
	r.Domain, r.HitsAddend = nil, 0
	r.Descriptors = r.descriptors[:0]
}

func (r *RateLimitRequest) decode(b []byte) error {
	var f field
	var err error
	for len(b) > 0 {
		if b, err = next(b, &f); err != nil {
			return err
		}
		switch {
		case f.is(rlsDomain, protowire.BytesType):
			if r.Domain, err = f.str("domain"); err != nil {
				return err
			}
		case f.is(rlsDescriptors, protowire.BytesType):
			if err := r.decodeDescriptor(f.b); err != nil {
				return err
			}
		case f.is(rlsHitsAddend, protowire.VarintType):
			r.HitsAddend = uint32(f.u) // proto truncates, as a uint32 field
		}
	}
	return nil
}

// decodeDescriptor appends the descriptor b holds: each occurrence of a
// repeated field is a new element.
func (r *RateLimitRequest) decodeDescriptor(b []byte) error {
	i := len(r.Descriptors)
	if i == MaxDescriptors {
		return fail(ErrTooManyDescriptors, "descriptors")
	}
	r.Descriptors = r.Descriptors[:i+1]
	d := &r.Descriptors[i]
	d.Entries = d.entries[:0]
	if err := d.decode(b); err != nil {
		return within(err, "descriptors", i)
	}
	return nil
}

// reset zeroes d, clearing the entries it used (see RateLimitRequest.reset).
func (d *Descriptor) reset() {
	clear(d.entries[:min(len(d.Entries), MaxEntries)])
	d.Entries = nil
	d.HasLimit, d.HitsAddend, d.HasHitsAddend, d.IsNegativeHits = false, 0, false, false
}

func (d *Descriptor) decode(b []byte) error {
	var f field
	var err error
	for len(b) > 0 {
		if b, err = next(b, &f); err != nil {
			return err
		}
		switch {
		case f.is(descEntries, protowire.BytesType):
			if err := d.decodeEntry(f.b); err != nil {
				return err
			}
		case f.is(descLimit, protowire.BytesType):
			d.HasLimit = true
		case f.is(descHitsAddend, protowire.BytesType):
			// A singular message seen again is merged into the first, so
			// an empty second occurrence leaves the value as it was.
			d.HasHitsAddend = true
			if err := decodeUInt64Value(f.b, &d.HitsAddend); err != nil {
				return within(err, "hits_addend", -1)
			}
		case f.is(descIsNegativeHits, protowire.VarintType):
			d.IsNegativeHits = f.u != 0
		}
	}
	return nil
}

func (d *Descriptor) decodeEntry(b []byte) error {
	i := len(d.Entries)
	if i == MaxEntries {
		return fail(ErrTooManyEntries, "entries")
	}
	d.Entries = d.Entries[:i+1]
	if err := d.Entries[i].decode(b); err != nil {
		return within(err, "entries", i)
	}
	return nil
}

func (e *Entry) decode(b []byte) error {
	var f field
	var err error
	for len(b) > 0 {
		if b, err = next(b, &f); err != nil {
			return err
		}
		switch {
		case f.is(entryKey, protowire.BytesType):
			e.Key, err = f.str("key")
		case f.is(entryValue, protowire.BytesType):
			e.Value, err = f.str("value")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeUInt64Value merges the google.protobuf.UInt64Value b holds into v.
func decodeUInt64Value(b []byte, v *uint64) error {
	var f field
	var err error
	for len(b) > 0 {
		if b, err = next(b, &f); err != nil {
			return err
		}
		if f.is(wrapperValue, protowire.VarintType) {
			*v = f.u
		}
	}
	return nil
}
