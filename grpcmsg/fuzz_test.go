package grpcmsg

import (
	"errors"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The fuzz targets hold Decode to three oracles:
//
//   - proto.Unmarshal into the reduced schema (the fields Decode reads,
//     nothing else): Decode accepts exactly what it accepts, within the
//     bounds, and yields the same fields;
//   - proto.Unmarshal into the generated type: what it accepts, Decode
//     accepts (within the bounds) with the same fields;
//   - when the generated type refuses what Decode accepts, the cause must
//     lie in the fields Decode skips: with those dropped (the message
//     marshalled again from the reduced schema, unknown fields discarded)
//     the generated type accepts it, and it holds what Decode yielded.

func FuzzRateLimitRequest(f *testing.F) {
	f.Add(mustMarshal(f, envoyRateLimitRequest(), false))
	r := newRand(6)
	for i := range 16 {
		f.Add(mustMarshal(f, randRateLimitRequest(r, 3, 4), i%2 == 0))
	}
	for _, bad := range malformedCases {
		f.Add(bad)
		f.Add(fbytes(rlsDescriptors, bad))
	}
	f.Add(cat(fbytes(rlsDescriptors, cat(fbytes(descHitsAddend, fvarint(1, 5)), fbytes(descHitsAddend, nil),
		fbytes(descLimit, []byte{0x08}), fgroup(7, fstr(1, "x")))), fstr(rlsDomain, "a"), fstr(rlsDomain, "b")))
	f.Fuzz(func(t *testing.T, data []byte) {
		got := new(RateLimitRequest)
		err := got.Decode(data)
		red, redErr := unmarshalReduced(data, reducedRLS)
		full := &rlsv3.RateLimitRequest{}
		fullErr := proto.Unmarshal(data, full)
		if fullErr == nil && redErr != nil {
			t.Fatalf("the reduced schema refuses what the generated type accepts: %v", redErr)
		}
		if redErr != nil {
			if err == nil {
				t.Fatalf("Decode accepts what proto refuses in the fields Decode reads: %v", redErr)
			}
			return
		}
		want := rlsFromProto(red)
		if want.overBounds() {
			if !errors.Is(err, ErrTooManyDescriptors) && !errors.Is(err, ErrTooManyEntries) {
				t.Fatalf("over the bounds, Decode says %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Decode refuses what proto accepts: %v", err)
		}
		decoded := rlsFromDecoded(got)
		samePlain(t, "against the reduced schema", decoded, want)
		if fullErr == nil {
			samePlain(t, "against the generated type", decoded, rlsFromProto(full.ProtoReflect()))
			return
		}
		// A limit override's contents are not read: empty them.
		stripped := stripReduced(t, data, reducedRLS, func(m protoreflect.Message) {
			ds := get(m, "descriptors").List()
			for i := range ds.Len() {
				d := ds.Get(i).Message()
				if l := get(d, "limit").List(); l.Len() > 0 {
					l.Truncate(0)
					l.Append(protoreflect.ValueOfBytes(nil))
				}
			}
		})
		full.Reset()
		if err := proto.Unmarshal(stripped, full); err != nil {
			t.Fatalf("Decode accepts what proto refuses (%v), even without the fields Decode skips (%v)", fullErr, err)
		}
		samePlain(t, "against the generated type, without the fields Decode skips", decoded, rlsFromProto(full.ProtoReflect()))
	})
}

func FuzzCheckRequest(f *testing.F) {
	f.Add(mustMarshal(f, envoyCheckRequest(false), false))
	f.Add(mustMarshal(f, envoyCheckRequest(true), false))
	r := newRand(7)
	for i := range 16 {
		f.Add(mustMarshal(f, randCheckRequest(r, 6), i%2 == 0))
	}
	for _, bad := range malformedCases {
		f.Add(bad)
		f.Add(http(bad))
		f.Add(http(fbytes(httpHeaders, bad)))
		f.Add(http(headerMap(bad)))
	}
	f.Add(cat(http(mapEntry("a", "1"), headerMap(cat(fstr(hvKey, "k"), fbytes(hvRawValue, []byte{0xff}))), mapEntry("b", "2")),
		http(mapEntry("a", "3"), fbytes(5, []byte{0xff}), fgroup(20, fvarint(1, 1)))))
	f.Fuzz(func(t *testing.T, data []byte) {
		got := new(CheckRequest)
		err := got.Decode(data)
		red, redErr := unmarshalReduced(data, reducedCheck)
		full := &authv3.CheckRequest{}
		fullErr := proto.Unmarshal(data, full)
		if fullErr == nil && redErr != nil {
			t.Fatalf("the reduced schema refuses what the generated type accepts: %v", redErr)
		}
		if redErr != nil {
			if err == nil {
				t.Fatalf("Decode accepts what proto refuses in the fields Decode reads: %v", redErr)
			}
			return
		}
		want := checkFromProto(red)
		if want.overBounds() {
			if !errors.Is(err, ErrTooManyHeaders) {
				t.Fatalf("over the bounds, Decode says %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Decode refuses what proto accepts: %v", err)
		}
		decoded := checkFromDecoded(t, got)
		sameCheck(t, "against the reduced schema", decoded, want)
		if fullErr == nil {
			sameCheck(t, "against the generated type", decoded, checkFromProto(full.ProtoReflect()))
			return
		}
		stripped := stripReduced(t, data, reducedCheck, func(protoreflect.Message) {})
		full.Reset()
		if err := proto.Unmarshal(stripped, full); err != nil {
			t.Fatalf("Decode accepts what proto refuses (%v), even without the fields Decode skips (%v)", fullErr, err)
		}
		sameCheck(t, "against the generated type, without the fields Decode skips", decoded, checkFromProto(full.ProtoReflect()))
	})
}

// stripReduced is data marshalled again from the reduced schema md
// without its unknown fields, edit applied first: data less the fields
// Decode skips.
func stripReduced(t *testing.T, data []byte, md protoreflect.MessageDescriptor, edit func(protoreflect.Message)) []byte {
	t.Helper()
	m, _ := unmarshalReduced(nil, md)
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, m.Interface()); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, err := proto.Marshal(m.Interface())
	if err != nil {
		t.Fatal(err)
	}
	return b
}
