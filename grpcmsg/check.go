package grpcmsg

import (
	"bytes"
	"hash/maphash"

	"google.golang.org/protobuf/encoding/protowire"
)

// MaxHeaders bounds the headers of a CheckRequest: the distinct keys of
// its headers map and the entries of its header_map, together.
const MaxHeaders = 128

// Field numbers on the way from envoy.service.auth.v3.CheckRequest to the
// HTTP request's fields, and those of envoy.config.core.v3.HeaderMap and
// HeaderValue.
const (
	checkAttributes = 1 // CheckRequest.attributes: AttributeContext
	attrRequest     = 4 // AttributeContext.request: AttributeContext.Request
	requestHTTP     = 2 // AttributeContext.Request.http: AttributeContext.HttpRequest

	httpMethod    = 2  // string
	httpHeaders   = 3  // map<string, string>
	httpPath      = 4  // string
	httpHeaderMap = 13 // envoy.config.core.v3.HeaderMap

	mapKey   = 1 // every map entry's key
	mapValue = 2 // and its value

	headerMapHeaders = 1 // HeaderMap.headers: repeated HeaderValue
	hvKey            = 1 // HeaderValue.key: string
	hvValue          = 2 // HeaderValue.value: string
	hvRawValue       = 3 // HeaderValue.raw_value: bytes
)

// A CheckRequest is envoy.service.auth.v3.CheckRequest, the fields of
// attributes.request.http tollgated reads. Decode fills it without
// allocating: Headers is backed by an array inside it, and the byte
// slices alias the decoded message, which must not change while they are
// in use. Like a RateLimitRequest, it is large and points into itself:
// reuse one, do not copy it.
type CheckRequest struct {
	// HasHTTP reports that attributes.request.http is there, even empty.
	HasHTTP      bool
	Method, Path []byte
	// Headers holds the entries of the headers map, one per distinct key
	// in the order keys first appear, and then the entries of header_map
	// in their order.
	Headers []Header

	mapHeaders int // Headers[:mapHeaders] are the map's
	mapEntries int // map entries read, duplicates too: an error's index
	// index finds a map key among Headers[:mapHeaders] in constant time,
	// so a message repeating keys costs no more than one that does not:
	// open addressing with linear probing, each slot 0 (free) or a
	// header's index plus one. At most half full, so probes end.
	// Its size is a power of two, and uint8 holds MaxHeaders.
	index   [2 * MaxHeaders]uint8
	headers [MaxHeaders]Header
}

// A Header is one header of the HTTP request.
type Header struct {
	Key, Value []byte
	// FromMap reports a header from header_map (a HeaderValue), rather
	// than from the headers map. Its Value is the HeaderValue's value, or
	// its raw_value when value is empty, as Envoy sends one or the other.
	FromMap bool
}

// seed keys the index's hash. It is random per process, so which keys
// collide cannot be chosen by a client.
var seed = maphash.MakeSeed()

// The index's slots hold a header's index plus one in a uint8.
const _ = uint8(MaxHeaders)

// Decode sets r to the CheckRequest msg holds, as proto.Unmarshal would
// (see the package documentation for where it differs). It resets r
// first. On error r holds part of msg and is not to be used; the error is
// a *FieldError.
func (r *CheckRequest) Decode(msg []byte) error {
	r.reset()
	if err := r.decode(msg); err != nil {
		return named(err, "CheckRequest")
	}
	return nil
}

// reset empties r, clearing only what the last Decode used: past the
// slices' lengths the backing arrays are zero, and the index is zero when
// no map header is in Headers.
func (r *CheckRequest) reset() {
	clear(r.headers[:min(len(r.Headers), MaxHeaders)])
	if r.mapHeaders > 0 {
		clear(r.index[:])
	}
	r.HasHTTP, r.Method, r.Path = false, nil, nil
	r.Headers = r.headers[:0]
	r.mapHeaders, r.mapEntries = 0, 0
}

// decode walks down to attributes.request.http. Each of the three is a
// singular message: when one occurs again, proto merges it into the
// first, and walking each occurrence into the same r does just that.
func (r *CheckRequest) decode(b []byte) error {
	return r.walk(b, checkAttributes, "attributes", (*CheckRequest).decodeAttributes)
}

func (r *CheckRequest) decodeAttributes(b []byte) error {
	return r.walk(b, attrRequest, "request", (*CheckRequest).decodeRequest)
}

func (r *CheckRequest) decodeRequest(b []byte) error {
	return r.walk(b, requestHTTP, "http", (*CheckRequest).decodeHTTP)
}

// walk reads the message b holds, passing each occurrence of its message
// field num, named name, to decode and skipping every other field.
func (r *CheckRequest) walk(b []byte, num protowire.Number, name string, decode func(*CheckRequest, []byte) error) error {
	var f field
	var err error
	for len(b) > 0 {
		if b, err = next(b, &f); err != nil {
			return err
		}
		if f.is(num, protowire.BytesType) {
			if err := decode(r, f.b); err != nil {
				return within(err, name, -1)
			}
		}
	}
	return nil
}

func (r *CheckRequest) decodeHTTP(b []byte) error {
	r.HasHTTP = true
	var f field
	var err error
	for len(b) > 0 {
		if b, err = next(b, &f); err != nil {
			return err
		}
		switch {
		case f.is(httpMethod, protowire.BytesType):
			r.Method, err = f.str("method")
		case f.is(httpPath, protowire.BytesType):
			r.Path, err = f.str("path")
		case f.is(httpHeaders, protowire.BytesType):
			err = r.decodeMapEntry(f.b)
		case f.is(httpHeaderMap, protowire.BytesType):
			if err = r.decodeHeaderMap(f.b); err != nil {
				err = within(err, "header_map", -1)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeMapEntry reads one entry of the headers map. A missing key or
// value is empty; a key already there takes the new value in its place,
// as the last entry for a key is what proto keeps.
func (r *CheckRequest) decodeMapEntry(b []byte) error {
	i := r.mapEntries
	r.mapEntries++
	key, value, err := decodeMapEntry(b)
	if err != nil {
		return within(err, "headers", i)
	}
	slot := r.slot(key)
	if j := r.index[slot]; j != 0 {
		r.Headers[j-1].Value = value
		return nil
	}
	if len(r.Headers) == MaxHeaders {
		return fail(ErrTooManyHeaders, "headers")
	}
	// Map headers go before header_map's, which move up by one when a
	// message sends header_map first.
	m, n := r.mapHeaders, len(r.Headers)
	r.Headers = r.Headers[:n+1]
	copy(r.Headers[m+1:], r.Headers[m:n])
	r.Headers[m] = Header{Key: key, Value: value}
	r.mapHeaders++
	r.index[slot] = uint8(m + 1)
	return nil
}

// slot is where key is in the index, or the free slot where it goes.
func (r *CheckRequest) slot(key []byte) int {
	const mask = len(r.index) - 1
	i := int(maphash.Bytes(seed, key)) & mask
	for r.index[i] != 0 && !bytes.Equal(r.Headers[r.index[i]-1].Key, key) {
		i = (i + 1) & mask
	}
	return i
}

// decodeMapEntry reads a map<string, string> entry.
func decodeMapEntry(b []byte) (key, value []byte, err error) {
	var f field
	for len(b) > 0 {
		if b, err = next(b, &f); err != nil {
			return nil, nil, err
		}
		switch {
		case f.is(mapKey, protowire.BytesType):
			key, err = f.str("key")
		case f.is(mapValue, protowire.BytesType):
			value, err = f.str("value")
		}
		if err != nil {
			return nil, nil, err
		}
	}
	return key, value, nil
}

// decodeHeaderMap reads an envoy.config.core.v3.HeaderMap. It is a
// singular field, so when it occurs again its headers accumulate.
func (r *CheckRequest) decodeHeaderMap(b []byte) error {
	var f field
	var err error
	for len(b) > 0 {
		if b, err = next(b, &f); err != nil {
			return err
		}
		if !f.is(headerMapHeaders, protowire.BytesType) {
			continue
		}
		i := len(r.Headers) - r.mapHeaders
		if len(r.Headers) == MaxHeaders {
			return fail(ErrTooManyHeaders, "headers")
		}
		if err := r.decodeHeaderValue(f.b); err != nil {
			return within(err, "headers", i)
		}
	}
	return nil
}

// decodeHeaderValue appends the envoy.config.core.v3.HeaderValue b holds;
// Headers has room for it.
func (r *CheckRequest) decodeHeaderValue(b []byte) error {
	n := len(r.Headers)
	r.Headers = r.Headers[:n+1]
	h := &r.Headers[n]
	h.FromMap = true
	var f field
	var raw []byte
	var err error
	for len(b) > 0 {
		if b, err = next(b, &f); err != nil {
			return err
		}
		switch {
		case f.is(hvKey, protowire.BytesType):
			h.Key, err = f.str("key")
		case f.is(hvValue, protowire.BytesType):
			h.Value, err = f.str("value")
		case f.is(hvRawValue, protowire.BytesType):
			raw = f.b // bytes: not UTF-8 checked
		}
		if err != nil {
			return err
		}
	}
	if len(h.Value) == 0 {
		h.Value = raw
	}
	return nil
}
