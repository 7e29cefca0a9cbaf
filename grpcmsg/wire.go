package grpcmsg

import (
	"errors"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// A field is one field of a message as it is on the wire. Only varint and
// length-delimited values are kept: every field read here is one of the
// two. A field of another wire type is only skipped.
type field struct {
	num protowire.Number
	typ protowire.Type
	u   uint64 // a varint's value
	b   []byte // a length-delimited value, aliasing the message
}

// errFieldNumber is a tag whose field number is over 2^29-1: protowire
// reads up to 2^31-1 (MessageSet's range), proto.Unmarshal refuses it.
var errFieldNumber = errors.New("field number out of range")

// next reads the first field of b into f and returns the rest of b.
//
// It checks the wire format as proto.Unmarshal checks a field it does not
// know: the tag, then the value's extent. A group is skipped whole,
// nested groups and matching end marker included, so f is never a group;
// an end-group marker outside a group is an error, as it is to proto. The
// contents of a length-delimited value are not looked into: that is for
// the caller, which knows whether it is a message, a string or bytes.
func next(b []byte, f *field) ([]byte, error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return nil, malformed(protowire.ParseError(n))
	}
	if num > protowire.MaxValidNumber {
		return nil, malformed(errFieldNumber)
	}
	b = b[n:]
	f.num, f.typ = num, typ
	switch typ {
	case protowire.VarintType:
		f.u, n = protowire.ConsumeVarint(b)
	case protowire.BytesType:
		f.b, n = protowire.ConsumeBytes(b)
	default:
		n = protowire.ConsumeFieldValue(num, typ, b)
	}
	if n < 0 {
		return nil, malformed(protowire.ParseError(n))
	}
	return b[n:], nil
}

// is reports whether f is field num of wire type typ. A known field number
// with another wire type is an unknown field to proto, skipped, and so it
// is here: the decoders' switches fall through to their default.
func (f *field) is(num protowire.Number, typ protowire.Type) bool {
	return f.num == num && f.typ == typ
}

// str is f's value as a proto3 string field: its bytes, if valid UTF-8.
func (f *field) str(name string) ([]byte, error) {
	if !utf8.Valid(f.b) {
		return nil, fail(ErrInvalidUTF8, name)
	}
	return f.b, nil
}

// The encoders write what proto.Marshal writes: fields in the order of
// their numbers, a proto3 scalar only when it is not zero, an embedded
// message whenever it is set (even empty). Each message's length is
// computed by a size pass over it before its contents are appended.

// enum is an int32 or enum value as proto encodes it: sign-extended to 64
// bits, so a negative value takes ten bytes.
func enum(v int32) uint64 { return uint64(int64(v)) }

// sizeVarint is the size of varint field num holding v, if v is not zero.
func sizeVarint(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

// sizeString is the size of string or bytes field num holding b, if b is
// not empty.
func sizeString(num protowire.Number, b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(b))
}

// sizeMessage is the size of message field num whose contents are n bytes.
func sizeMessage(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func appendVarint(dst []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return dst
	}
	dst = protowire.AppendTag(dst, num, protowire.VarintType)
	return protowire.AppendVarint(dst, v)
}

func appendString(dst []byte, num protowire.Number, b []byte) []byte {
	if len(b) == 0 {
		return dst
	}
	dst = protowire.AppendTag(dst, num, protowire.BytesType)
	return protowire.AppendBytes(dst, b)
}

// appendMessage appends the tag and length of message field num whose
// contents, n bytes, the caller appends next.
func appendMessage(dst []byte, num protowire.Number, n int) []byte {
	dst = protowire.AppendTag(dst, num, protowire.BytesType)
	return protowire.AppendVarint(dst, uint64(n))
}
