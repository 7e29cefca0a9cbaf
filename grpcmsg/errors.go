package grpcmsg

import (
	"errors"
	"strconv"
)

// The kinds of error Decode reports, to be told apart with errors.Is. Each
// is returned inside a *FieldError naming the field.
var (
	// ErrMalformed is wire data that is not a protobuf message: a
	// truncated or overlong varint, a length past the end, a field number
	// out of range, a reserved wire type, or an unmatched group marker.
	ErrMalformed = errors.New("malformed protobuf wire data")
	// ErrInvalidUTF8 is a string field that is not valid UTF-8, which
	// proto3 forbids.
	ErrInvalidUTF8 = errors.New("string field is not valid UTF-8")

	// ErrTooManyDescriptors is a RateLimitRequest with more than
	// MaxDescriptors descriptors.
	ErrTooManyDescriptors = errors.New("more than " + strconv.Itoa(MaxDescriptors) + " descriptors")
	// ErrTooManyEntries is a descriptor with more than MaxEntries entries.
	ErrTooManyEntries = errors.New("more than " + strconv.Itoa(MaxEntries) + " entries")
	// ErrTooManyHeaders is an HTTP request with more than MaxHeaders
	// headers, counting the distinct keys of headers and every entry of
	// header_map.
	ErrTooManyHeaders = errors.New("more than " + strconv.Itoa(MaxHeaders) + " headers (headers and header_map together)")
)

// A FieldError is a message Decode refuses, and where: the message's type
// and the path of the field within it. Indexes in the path count the
// field's occurrences on the wire, from 0; for a map, each entry is one.
type FieldError struct {
	Message string // the message type, as RateLimitRequest
	Field   string // as descriptors[2].entries[0].key; empty for the message itself
	Err     error  // one of the Err* values of this package
	cause   error  // what the wire parser said, for ErrMalformed
}

func (e *FieldError) Error() string {
	s := "grpcmsg: " + e.Message
	if e.Field != "" {
		s += "." + e.Field
	}
	s += ": " + e.Err.Error()
	if e.cause != nil {
		s += ": " + e.cause.Error()
	}
	return s
}

// Unwrap is Err, so that errors.Is(err, ErrTooManyHeaders) works.
func (e *FieldError) Unwrap() error { return e.Err }

// fail is an error of kind at the current level; the levels above prefix
// their field names as it returns through them. Errors are built only
// when decoding fails, so a message that decodes allocates nothing.
func fail(kind error, field string) error {
	return &FieldError{Err: kind, Field: field}
}

// malformed is ErrMalformed for a parse error of protowire.
func malformed(cause error) error {
	return &FieldError{Err: ErrMalformed, cause: cause}
}

// within prefixes err's path with the field that held it: name, and its
// index when i >= 0. err is always a *FieldError of this package.
func within(err error, name string, i int) error {
	e := err.(*FieldError)
	if i >= 0 {
		name += "[" + strconv.Itoa(i) + "]"
	}
	if e.Field != "" {
		name += "." + e.Field
	}
	e.Field = name
	return e
}

// named sets the message type of err, at the top of a Decode.
func named(err error, message string) error {
	err.(*FieldError).Message = message
	return err
}
