package grpcmsg

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Wire builders for hand-made messages.

func cat(fields ...[]byte) []byte { return bytes.Join(fields, nil) }

func fbytes(num protowire.Number, b []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
}

func fstr(num protowire.Number, s string) []byte { return fbytes(num, []byte(s)) }

func fvarint(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
}

func fgroup(num protowire.Number, contents ...[]byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.StartGroupType)
	b = append(b, cat(contents...)...)
	return protowire.AppendTag(b, num, protowire.EndGroupType)
}

func mustMarshal(t testing.TB, m proto.Message, deterministic bool) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: deterministic}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// http wraps the fields of an HttpRequest in a CheckRequest.
func http(fields ...[]byte) []byte {
	return fbytes(checkAttributes, fbytes(attrRequest, fbytes(requestHTTP, cat(fields...))))
}

func mapEntry(k, v string) []byte { return fbytes(httpHeaders, cat(fstr(1, k), fstr(2, v))) }

func headerMap(hvs ...[]byte) []byte {
	var b []byte
	for _, hv := range hvs {
		b = append(b, fbytes(headerMapHeaders, hv)...)
	}
	return fbytes(httpHeaderMap, b)
}

// agreeRLS decodes data and checks the outcome against proto.Unmarshal
// into the generated type: both accept and agree, or both refuse. It
// returns Decode's error.
func agreeRLS(t testing.TB, got *RateLimitRequest, data []byte) error {
	t.Helper()
	want := &rlsv3.RateLimitRequest{}
	perr := proto.Unmarshal(data, want)
	err := got.Decode(data)
	switch {
	case perr != nil && err == nil:
		t.Fatalf("Decode accepts what proto refuses (%v)", perr)
	case perr != nil:
		return err
	}
	wp := rlsFromProto(want.ProtoReflect())
	if wp.overBounds() {
		if !errors.Is(err, ErrTooManyDescriptors) && !errors.Is(err, ErrTooManyEntries) {
			t.Fatalf("over the bounds: Decode says %v", err)
		}
		return err
	}
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	samePlain(t, "RateLimitRequest", rlsFromDecoded(got), wp)
	return nil
}

// agreeCheck is agreeRLS for a CheckRequest.
func agreeCheck(t testing.TB, got *CheckRequest, data []byte) error {
	t.Helper()
	want := &authv3.CheckRequest{}
	perr := proto.Unmarshal(data, want)
	err := got.Decode(data)
	switch {
	case perr != nil && err == nil:
		t.Fatalf("Decode accepts what proto refuses (%v)", perr)
	case perr != nil:
		return err
	}
	wp := checkFromProto(want.ProtoReflect())
	if wp.overBounds() {
		if !errors.Is(err, ErrTooManyHeaders) {
			t.Fatalf("over the bounds (%d + %d headers): Decode says %v", len(wp.Map), len(wp.HeaderMap), err)
		}
		return err
	}
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	sameCheck(t, "CheckRequest", checkFromDecoded(t, got), wp)
	return nil
}

// logCase shows the message of a failed case, deferred so that it runs
// after a t.Fatal too.
func logCase(t *testing.T, i int, data []byte) {
	if t.Failed() {
		t.Logf("case %d: %x", i, data)
	}
}

func TestRateLimitRequestRoundTrip(t *testing.T) {
	r := newRand(1)
	var got RateLimitRequest
	over := 0
	for i := range 600 {
		m := randRateLimitRequest(r, MaxDescriptors, MaxEntries)
		var data []byte
		switch i % 4 {
		case 0:
			data = mustMarshal(t, m, false)
		case 1:
			data = mustMarshal(t, m, true)
		default:
			// Two messages one after the other are their merge to proto:
			// descriptors accumulate (past the bound at times), the
			// domain and hits_addend of the second win when set.
			m2 := randRateLimitRequest(r, MaxDescriptors/2, MaxEntries)
			data = append(mustMarshal(t, m, i%2 == 0), mustMarshal(t, m2, false)...)
		}
		func() {
			defer logCase(t, i, data)
			if agreeRLS(t, &got, data) != nil {
				over++
			}
			red, err := unmarshalReduced(data, reducedRLS)
			if err != nil {
				t.Fatalf("reduced schema refuses what the full one accepts: %v", err)
			}
			want := &rlsv3.RateLimitRequest{}
			_ = proto.Unmarshal(data, want)
			samePlain(t, "reduced schema", rlsFromProto(red), rlsFromProto(want.ProtoReflect()))
		}()
	}
	if over < 20 || over > 400 {
		t.Errorf("%d of the messages are over the bounds: want some, not most", over)
	}
}

func TestCheckRequestRoundTrip(t *testing.T) {
	r := newRand(2)
	var got CheckRequest
	over := 0
	for i := range 600 {
		m := randCheckRequest(r, 90)
		var data []byte
		switch i % 4 {
		case 0:
			data = mustMarshal(t, m, false)
		case 1:
			data = mustMarshal(t, m, true)
		default:
			// A merge: the second message's map entries replace the
			// first's of the same key (the keys are drawn from a small
			// pool to make that frequent), header_map's accumulate.
			m2 := randCheckRequest(r, 50)
			data = append(mustMarshal(t, m, false), mustMarshal(t, m2, i%2 == 0)...)
		}
		func() {
			defer logCase(t, i, data)
			if agreeCheck(t, &got, data) != nil {
				over++
			}
			red, err := unmarshalReduced(data, reducedCheck)
			if err != nil {
				t.Fatalf("reduced schema refuses what the full one accepts: %v", err)
			}
			want := &authv3.CheckRequest{}
			_ = proto.Unmarshal(data, want)
			sameCheck(t, "reduced schema", checkFromProto(red), checkFromProto(want.ProtoReflect()))
		}()
	}
	if over < 20 || over > 300 {
		t.Errorf("%d of the messages are over the bounds: want some, not most", over)
	}
}

// envoyRateLimitRequest is what Envoy sends for a route with one rate
// limit action pair: the account from a header, the path.
func envoyRateLimitRequest() *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "tollgated", Descriptors: []*rlcommon.RateLimitDescriptor{{
		Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "account", Value: "acme-prod"}, {Key: "path", Value: "/v1/chat/completions"}},
	}}}
}

func TestRateLimitRequestEnvoy(t *testing.T) {
	m := envoyRateLimitRequest()
	m.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
	var got RateLimitRequest
	if err := got.Decode(mustMarshal(t, m, true)); err != nil {
		t.Fatal(err)
	}
	d := &got.Descriptors[0]
	if string(got.Domain) != "tollgated" || len(got.Descriptors) != 1 || len(d.Entries) != 2 ||
		string(d.Entries[1].Key) != "path" || string(d.Entries[1].Value) != "/v1/chat/completions" {
		t.Fatalf("%+v", got)
	}
	if !d.HasHitsAddend || d.HitsAddend != 0 || d.HasLimit || d.IsNegativeHits {
		t.Fatalf("a hits_addend of 0 is present and 0: %+v", d)
	}
}

func TestRateLimitRequestMerge(t *testing.T) {
	var got RateLimitRequest
	desc := func(fields ...[]byte) []byte { return fbytes(rlsDescriptors, cat(fields...)) }
	entry := func(fields ...[]byte) []byte { return fbytes(descEntries, cat(fields...)) }
	data := cat(
		fstr(rlsDomain, "first"), fvarint(rlsHitsAddend, 7),
		desc(entry(fstr(1, "k"), fstr(2, "v1"), fstr(2, "v2")), // value: last wins
			fbytes(descHitsAddend, fvarint(1, 5)), fbytes(descHitsAddend, nil), // merged: still 5
			fvarint(descIsNegativeHits, 1), fvarint(descIsNegativeHits, 0),
			fbytes(descLimit, nil), // an empty override is present
			entry()),               // an empty entry is one
		fstr(rlsDomain, "second"),
		fvarint(rlsHitsAddend, 1<<32+3), // truncated to uint32, as proto does
		desc(fbytes(descHitsAddend, fvarint(1, 9)), fbytes(descHitsAddend, fvarint(1, 0))),
	)
	if err := agreeRLS(t, &got, data); err != nil {
		t.Fatal(err)
	}
	want := rlsPlain{Domain: "second", HitsAddend: 3, Descriptors: []descPlain{
		{Entries: []entryPlain{{"k", "v2"}, {"", ""}}, HasLimit: true, HitsAddend: 5, HasHitsAddend: true},
		{HitsAddend: 0, HasHitsAddend: true},
	}}
	samePlain(t, "merge", rlsFromDecoded(&got), want)
}

func TestCheckRequestMapAndMerge(t *testing.T) {
	var got CheckRequest
	hv := func(k, v, raw string) []byte { return cat(fstr(hvKey, k), fstr(hvValue, v), fstr(hvRawValue, raw)) }
	data := cat(
		http(fstr(httpMethod, "PUT"), headerMap(hv("x-hm", "", "raw"), hv("x-hm", "v", "raw")),
			mapEntry("a", "1"), mapEntry("b", "2")),
		fbytes(checkAttributes, fbytes(1, fstr(2, "source service, skipped"))),
		http(fstr(httpMethod, "GET"), fstr(httpPath, "/p"),
			mapEntry("a", "3"), // replaces a's value, in place
			fbytes(httpHeaders, fstr(mapValue, "no key")), // key ""
			fbytes(httpHeaders, fstr(mapKey, "no value")),
			fbytes(httpHeaders, cat(fstr(mapKey, "k1"), fstr(mapKey, "k2"), fstr(mapValue, "v"))), // key: last wins
			headerMap(hv("x-hm2", "", ""))),
	)
	if err := agreeCheck(t, &got, data); err != nil {
		t.Fatal(err)
	}
	want := []Header{{Key: []byte("a"), Value: []byte("3")}, {Key: []byte("b"), Value: []byte("2")},
		{Key: nil, Value: []byte("no key")}, {Key: []byte("no value")}, {Key: []byte("k2"), Value: []byte("v")},
		{Key: []byte("x-hm"), Value: []byte("raw"), FromMap: true}, {Key: []byte("x-hm"), Value: []byte("v"), FromMap: true},
		{Key: []byte("x-hm2"), FromMap: true}}
	if showHeaders(got.Headers) != showHeaders(want) {
		t.Fatalf("Headers in order:\n got  %s\n want %s", showHeaders(got.Headers), showHeaders(want))
	}
	if !got.HasHTTP || string(got.Method) != "GET" || string(got.Path) != "/p" {
		t.Fatalf("%+v", got)
	}
}

func showHeaders(hs []Header) string {
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "%q=%q/%v ", h.Key, h.Value, h.FromMap)
	}
	return b.String()
}

func TestCheckRequestEmptyHTTP(t *testing.T) {
	var got CheckRequest
	for _, c := range []struct {
		data    []byte
		hasHTTP bool
	}{
		{nil, false},
		{fbytes(checkAttributes, nil), false},
		{fbytes(checkAttributes, fbytes(attrRequest, nil)), false},
		{http(), true},
		// A message field with another wire type is an unknown field.
		{fbytes(checkAttributes, fbytes(attrRequest, fvarint(requestHTTP, 1))), false},
	} {
		if err := agreeCheck(t, &got, c.data); err != nil || got.HasHTTP != c.hasHTTP {
			t.Errorf("%x: HasHTTP %v, err %v; want %v", c.data, got.HasHTTP, err, c.hasHTTP)
		}
	}
}

// TestUnknownFields skips a field of every wire type at every level, and
// known numbers under another wire type than their own.
func TestUnknownFields(t *testing.T) {
	unknown := cat(
		fvarint(99, 1<<63), protowire.AppendFixed32(protowire.AppendTag(nil, 98, protowire.Fixed32Type), 1),
		protowire.AppendFixed64(protowire.AppendTag(nil, 97, protowire.Fixed64Type), 1),
		fbytes(96, []byte{0xff, 0xfe}), // an unknown field's bytes: not UTF-8 checked
		fgroup(95, fvarint(1, 1), fgroup(2, fstr(3, "x"), fgroup(2)), fbytes(4, []byte{0xff})),
		fgroup(1), fgroup(2), fgroup(3), fgroup(4), // no field read is a group
	)
	packed := fbytes(rlsHitsAddend, []byte{1, 2}) // a packed-looking singular uint32
	var rl RateLimitRequest
	data := cat(unknown, fvarint(rlsDomain, 5), fstr(rlsDomain, "d"), packed, fvarint(rlsDescriptors, 5),
		fbytes(rlsDescriptors, cat(unknown, fvarint(descEntries, 5), fvarint(descLimit, 5), fvarint(descHitsAddend, 5),
			fbytes(descIsNegativeHits, []byte{1}),
			fbytes(descEntries, cat(unknown, fvarint(entryKey, 5), fstr(entryKey, "k"), fvarint(entryValue, 5))))))
	if err := agreeRLS(t, &rl, data); err != nil {
		t.Fatal(err)
	}
	d := &rl.Descriptors[0]
	if string(rl.Domain) != "d" || rl.HitsAddend != 0 || len(rl.Descriptors) != 1 || string(d.Entries[0].Key) != "k" ||
		d.HasLimit || d.HasHitsAddend || d.IsNegativeHits {
		t.Fatalf("%+v", rl)
	}

	var cr CheckRequest
	data = cat(unknown, fvarint(checkAttributes, 5), fbytes(checkAttributes, cat(unknown, fvarint(attrRequest, 5),
		fbytes(attrRequest, cat(unknown, fvarint(requestHTTP, 5),
			fbytes(requestHTTP, cat(unknown, fvarint(httpHeaderMap, 1), fvarint(httpHeaders, 1), fstr(httpMethod, "GET"),
				fvarint(httpPath, 1), fbytes(httpHeaderMap, cat(unknown, fvarint(headerMapHeaders, 1),
					fbytes(headerMapHeaders, cat(unknown, fvarint(hvKey, 1), fvarint(hvValue, 1), fvarint(hvRawValue, 1))))),
				fbytes(httpHeaders, cat(unknown, fvarint(mapKey, 1), fgroup(mapValue), fstr(mapKey, "k"))))))))))
	if err := agreeCheck(t, &cr, data); err != nil {
		t.Fatal(err)
	}
	if string(cr.Method) != "GET" || len(cr.Headers) != 2 || string(cr.Headers[0].Key) != "k" || !cr.Headers[1].FromMap {
		t.Fatalf("%+v", cr)
	}
}

// malformedCases are wire data proto refuses, each inside a message
// field or at the top.
var malformedCases = map[string][]byte{
	"truncated tag":          {0x80},
	"truncated varint":       {0x18, 0x80},
	"overlong varint":        {0x18, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},
	"varint over 64 bits":    {0x18, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02},
	"length past the end":    {0x0a, 0x05, 'a'},
	"length overflow":        {0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	"field number 0":         {0x00, 0x00},
	"field number 2^29":      protowire.AppendVarint(nil, uint64(protowire.MaxValidNumber+1)<<3),
	"field number 2^31-1":    protowire.AppendVarint(nil, uint64(1<<31-1)<<3),
	"reserved wire type 6":   {0x0e, 0x00},
	"reserved wire type 7":   {0x0f, 0x00},
	"stray end group":        {0x0c},
	"unmatched end group":    {0x0b, 0x14},
	"unterminated group":     {0x0b, 0x08, 0x01},
	"truncated fixed32":      {0x0d, 0x01, 0x02},
	"truncated fixed64":      {0x09, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07},
	"group bad field number": {0x0b, 0x00, 0x00, 0x0c},
}

func TestMalformed(t *testing.T) {
	var rl RateLimitRequest
	var cr CheckRequest
	for name, bad := range malformedCases {
		for _, data := range [][]byte{
			bad,
			cat(fstr(rlsDomain, "d"), bad),
			fbytes(rlsDescriptors, bad),
			fbytes(rlsDescriptors, fbytes(descEntries, bad)),
			fbytes(rlsDescriptors, fbytes(descHitsAddend, bad)),
		} {
			err := agreeRLS(t, &rl, data)
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: RateLimitRequest %x: %v, want ErrMalformed", name, data, err)
			}
		}
		for _, data := range [][]byte{
			bad,
			fbytes(checkAttributes, bad),
			http(bad),
			http(fbytes(httpHeaders, bad)),
			http(fbytes(httpHeaderMap, bad)),
			http(headerMap(bad)),
		} {
			err := agreeCheck(t, &cr, data)
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: CheckRequest %x: %v, want ErrMalformed", name, data, err)
			}
		}
		if _, err := DecodeHealthCheck(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: HealthCheckRequest: %v, want ErrMalformed", name, err)
		}
	}
}

func TestErrorMessages(t *testing.T) {
	bad := string([]byte{'a', 0xff})
	entries := func(n int) []byte {
		var b []byte
		for range n {
			b = append(b, fbytes(descEntries, fstr(entryKey, "k"))...)
		}
		return b
	}
	descs := func(n int) []byte {
		var b []byte
		for range n {
			b = append(b, fbytes(rlsDescriptors, nil)...)
		}
		return b
	}
	mapEntries := func(n int) []byte {
		var b []byte
		for i := range n {
			b = append(b, mapEntry(fmt.Sprint(i), "v")...)
		}
		return b
	}
	hvs := func(n int) [][]byte {
		b := make([][]byte, n)
		for i := range b {
			b[i] = fstr(hvKey, "k")
		}
		return b
	}
	var rl RateLimitRequest
	var cr CheckRequest
	for _, c := range []struct {
		err  error
		want string
	}{
		{rl.Decode(fstr(rlsDomain, bad)), "grpcmsg: RateLimitRequest.domain: string field is not valid UTF-8"},
		{rl.Decode(cat(descs(2), fbytes(rlsDescriptors, cat(entries(1), fbytes(descEntries, fstr(entryValue, bad)))))),
			"grpcmsg: RateLimitRequest.descriptors[2].entries[1].value: string field is not valid UTF-8"},
		{rl.Decode(cat(descs(1), fbytes(rlsDescriptors, fbytes(descEntries, fstr(entryKey, bad))))),
			"grpcmsg: RateLimitRequest.descriptors[1].entries[0].key: string field is not valid UTF-8"},
		{rl.Decode(descs(MaxDescriptors + 1)), "grpcmsg: RateLimitRequest.descriptors: more than 16 descriptors"},
		{rl.Decode(cat(descs(3), fbytes(rlsDescriptors, entries(MaxEntries+1)))),
			"grpcmsg: RateLimitRequest.descriptors[3].entries: more than 16 entries"},
		{rl.Decode(fbytes(rlsDescriptors, fbytes(descHitsAddend, []byte{0x08}))),
			"grpcmsg: RateLimitRequest.descriptors[0].hits_addend: malformed protobuf wire data: unexpected EOF"},
		{rl.Decode([]byte{0x0b}), "grpcmsg: RateLimitRequest: malformed protobuf wire data: unexpected EOF"},
		{cr.Decode(http(fstr(httpMethod, bad))), "grpcmsg: CheckRequest.attributes.request.http.method: string field is not valid UTF-8"},
		{cr.Decode(http(fstr(httpPath, bad))), "grpcmsg: CheckRequest.attributes.request.http.path: string field is not valid UTF-8"},
		{cr.Decode(http(mapEntry("a", "b"), mapEntry("a", "c"), mapEntry(bad, "x"))),
			"grpcmsg: CheckRequest.attributes.request.http.headers[2].key: string field is not valid UTF-8"},
		{cr.Decode(http(mapEntry("a", bad))), "grpcmsg: CheckRequest.attributes.request.http.headers[0].value: string field is not valid UTF-8"},
		{cr.Decode(http(mapEntry("a", "b"), headerMap(fstr(hvKey, "k"), fstr(hvValue, bad)))),
			"grpcmsg: CheckRequest.attributes.request.http.header_map.headers[1].value: string field is not valid UTF-8"},
		{cr.Decode(http(headerMap(fstr(hvKey, bad)))), "grpcmsg: CheckRequest.attributes.request.http.header_map.headers[0].key: string field is not valid UTF-8"},
		{cr.Decode(http(mapEntries(MaxHeaders + 1))),
			"grpcmsg: CheckRequest.attributes.request.http.headers: more than 128 headers (headers and header_map together)"},
		{cr.Decode(http(mapEntries(100), headerMap(hvs(29)...))),
			"grpcmsg: CheckRequest.attributes.request.http.header_map.headers: more than 128 headers (headers and header_map together)"},
		{cr.Decode(http(headerMap(hvs(100)...), mapEntries(29))),
			"grpcmsg: CheckRequest.attributes.request.http.headers: more than 128 headers (headers and header_map together)"},
		{cr.Decode(http(headerMap([]byte{0x0b}))),
			"grpcmsg: CheckRequest.attributes.request.http.header_map.headers[0]: malformed protobuf wire data: unexpected EOF"},
		{func() error { _, err := DecodeHealthCheck(fstr(healthService, bad)); return err }(),
			"grpcmsg: HealthCheckRequest.service: string field is not valid UTF-8"},
	} {
		if c.err == nil || c.err.Error() != c.want {
			t.Errorf("error %v\n         want %s", c.err, c.want)
		}
		var fe *FieldError
		if !errors.As(c.err, &fe) {
			t.Errorf("%v is not a *FieldError", c.err)
		}
	}
}

func TestBoundsExactly(t *testing.T) {
	m := &rlsv3.RateLimitRequest{}
	for range MaxDescriptors {
		d := &rlcommon.RateLimitDescriptor{}
		for range MaxEntries {
			d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
		}
		m.Descriptors = append(m.Descriptors, d)
	}
	var rl RateLimitRequest
	if err := agreeRLS(t, &rl, mustMarshal(t, m, false)); err != nil {
		t.Fatalf("at the bounds: %v", err)
	}
	// As many map headers and header_map headers as fit, then many more
	// map entries repeating keys: a repeated key adds no header.
	var fields [][]byte
	hm := &corev3.HeaderMap{}
	for i := range MaxHeaders / 2 {
		fields = append(fields, mapEntry(fmt.Sprint("key", i), "v"))
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: "k", Value: "v"})
	}
	fields = append(fields, fbytes(httpHeaderMap, mustMarshal(t, hm, false)))
	for i := range 10 * MaxHeaders {
		fields = append(fields, mapEntry(fmt.Sprint("key", i%(MaxHeaders/2)), fmt.Sprint(i)))
	}
	var cr CheckRequest
	if err := agreeCheck(t, &cr, http(fields...)); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	if len(cr.Headers) != MaxHeaders {
		t.Fatalf("%d headers", len(cr.Headers))
	}
}

// TestDocumentedDifference: the contents of a field Decode skips are not
// checked. proto refuses these; Decode, and proto with the reduced schema,
// accept them.
func TestDocumentedDifference(t *testing.T) {
	bad := []byte{'a', 0xff}
	for name, data := range map[string][]byte{
		"attributes.source.service UTF-8": fbytes(checkAttributes, fbytes(1, fbytes(2, bad))),
		"http.host UTF-8":                 http(fstr(httpMethod, "GET"), fbytes(5, bad)),
		"http.id UTF-8":                   http(fbytes(1, bad)),
		"context_extensions UTF-8":        fbytes(checkAttributes, fbytes(10, fbytes(1, bad))),
		"request.time malformed":          fbytes(checkAttributes, fbytes(attrRequest, fbytes(1, []byte{0x08}))),
	} {
		var cr CheckRequest
		if err := proto.Unmarshal(data, &authv3.CheckRequest{}); err == nil {
			t.Errorf("%s: proto accepts", name)
		}
		if _, err := unmarshalReduced(data, reducedCheck); err != nil {
			t.Errorf("%s: reduced schema: %v", name, err)
		}
		if err := cr.Decode(data); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, data := range map[string][]byte{
		"limit malformed":    fbytes(rlsDescriptors, fbytes(descLimit, []byte{0x08})),
		"limit wrong varint": fbytes(rlsDescriptors, fbytes(descLimit, []byte{0x18, 0x80})),
	} {
		var rl RateLimitRequest
		if err := proto.Unmarshal(data, &rlsv3.RateLimitRequest{}); err == nil {
			t.Errorf("%s: proto accepts", name)
		}
		if err := rl.Decode(data); err != nil || !rl.Descriptors[0].HasLimit {
			t.Errorf("%s: %v", name, err)
		}
	}
	// raw_value is bytes, so not UTF-8 checked by either.
	var cr CheckRequest
	if err := agreeCheck(t, &cr, http(headerMap(cat(fstr(hvKey, "k"), fbytes(hvRawValue, bad))))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cr.Headers[0].Value, bad) {
		t.Fatalf("%q", cr.Headers[0].Value)
	}
}

// TestReuse decodes a large message, then small ones, into the same
// struct: nothing of the large one shows or stays referenced.
func TestReuse(t *testing.T) {
	r := newRand(3)
	var rl RateLimitRequest
	var cr CheckRequest
	for range 50 {
		big := randRateLimitRequest(r, MaxDescriptors, MaxEntries)
		_ = rl.Decode(mustMarshal(t, big, false))
		if err := agreeRLS(t, &rl, mustMarshal(t, envoyRateLimitRequest(), false)); err != nil {
			t.Fatal(err)
		}
		for i := len(rl.Descriptors); i < MaxDescriptors; i++ {
			if d := &rl.descriptors[i]; d.Entries != nil || d.HasLimit || d.HasHitsAddend || d.HitsAddend != 0 || d.IsNegativeHits {
				t.Fatalf("descriptors[%d] holds %+v", i, d)
			}
			for j, e := range rl.descriptors[i].entries {
				if e.Key != nil || e.Value != nil {
					t.Fatalf("descriptors[%d].entries[%d] holds %+v", i, j, e)
				}
			}
		}
		for i := range rl.Descriptors {
			d := &rl.Descriptors[i]
			for j := len(d.Entries); j < MaxEntries; j++ {
				if e := d.entries[j]; e.Key != nil || e.Value != nil {
					t.Fatalf("descriptors[%d].entries[%d] holds %+v", i, j, d.entries[j])
				}
			}
		}
		_ = cr.Decode(mustMarshal(t, randCheckRequest(r, 60), false))
		if err := agreeCheck(t, &cr, http(mapEntry("a", "b"))); err != nil {
			t.Fatal(err)
		}
		for i := len(cr.Headers); i < MaxHeaders; i++ {
			if h := cr.headers[i]; h.Key != nil || h.Value != nil || h.FromMap {
				t.Fatalf("headers[%d] holds %+v", i, h)
			}
		}
		used := 0
		for _, s := range cr.index {
			if s != 0 {
				used++
			}
		}
		if used != 1 {
			t.Fatalf("%d index slots used, want 1", used)
		}
	}
	if err := cr.Decode(nil); err != nil || len(cr.Headers) != 0 || cr.HasHTTP || cr.index != ([2 * MaxHeaders]uint8{}) {
		t.Fatalf("after an empty message: %v %+v", err, cr)
	}
}

func TestDecodeHealthCheck(t *testing.T) {
	for _, c := range []struct {
		data []byte
		want string
	}{
		{nil, ""},
		{fstr(healthService, "envoy.service.ratelimit.v3.RateLimitService"), "envoy.service.ratelimit.v3.RateLimitService"},
		{cat(fstr(healthService, "a"), fvarint(healthService, 3), fgroup(7, fstr(1, "\xff")), fstr(healthService, "日本")), "日本"},
	} {
		got, err := DecodeHealthCheck(c.data)
		want := &healthpb.HealthCheckRequest{}
		if perr := proto.Unmarshal(c.data, want); perr != nil || err != nil || string(got) != c.want || want.GetService() != c.want {
			t.Errorf("%x: %q %v, proto %q %v; want %q", c.data, got, err, want.GetService(), perr, c.want)
		}
	}
	if _, err := DecodeHealthCheck(fbytes(healthService, []byte{0xc0, 0x80})); !errors.Is(err, ErrInvalidUTF8) {
		t.Errorf("overlong UTF-8: %v", err)
	}
}

func TestFieldErrorUnwrap(t *testing.T) {
	var rl RateLimitRequest
	err := rl.Decode(fstr(rlsDomain, "\xff"))
	if !errors.Is(err, ErrInvalidUTF8) || errors.Is(err, ErrMalformed) || !strings.HasPrefix(err.Error(), "grpcmsg: ") {
		t.Fatal(err)
	}
}
