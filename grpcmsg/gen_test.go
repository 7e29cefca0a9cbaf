package grpcmsg

import (
	"math"
	"math/rand/v2"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Random messages of the generated types, for the round trips and the
// fuzz seeds. Strings are valid UTF-8 (the generated types cannot marshal
// others); everything else ranges wide: empty and long strings, multi-byte
// and control characters, the largest numbers, unknown fields of every
// wire type.

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x67727063)) }

var (
	runePool = []rune("aZ09 -_/.:é日本語ß€\u0000\t\n\u007f\u00a0\u200b\ufeff\ufffd😀𝄞")
	keyPool  = []string{"content-type", "x-request-id", ":authority", ":path", "host", "x-tollgate-key", "accept", "user-agent", "日本", ""}
)

func randString(r *rand.Rand) string {
	switch r.IntN(8) {
	case 0:
		return ""
	case 1:
		return strings.Repeat(string(runePool[r.IntN(len(runePool))]), 100+r.IntN(300))
	case 2, 3:
		b := make([]byte, r.IntN(24))
		for i := range b {
			b[i] = byte(' ' + r.IntN(95))
		}
		return string(b)
	default:
		rs := make([]rune, r.IntN(20))
		for i := range rs {
			rs[i] = runePool[r.IntN(len(runePool))]
		}
		return string(rs)
	}
}

// randKey draws keys often from a small pool, so that merged messages
// repeat map keys.
func randKey(r *rand.Rand) string {
	if r.IntN(2) == 0 {
		return keyPool[r.IntN(len(keyPool))]
	}
	return randString(r)
}

func randBytes(r *rand.Rand) []byte {
	b := make([]byte, r.IntN(40))
	for i := range b {
		b[i] = byte(r.Uint32()) // not UTF-8, as bytes may be
	}
	return b
}

func randU64(r *rand.Rand) uint64 {
	switch r.IntN(5) {
	case 0:
		return 0
	case 1:
		return math.MaxUint64
	case 2:
		return uint64(r.IntN(300))
	default:
		return r.Uint64() >> r.IntN(64)
	}
}

func randU32(r *rand.Rand) uint32 { return uint32(randU64(r) >> 32) }

// randUnknown sets unknown fields on m, of every wire type, groups nested
// in groups included. Besides numbers its schema does not know, it uses
// those it knows with another wire type, which proto skips as unknown
// too: lenNums are m's length-delimited fields, varNums its varints.
func randUnknown(r *rand.Rand, m proto.Message, lenNums, varNums []protowire.Number) {
	if r.IntN(3) != 0 {
		return
	}
	var b []byte
	for range 1 + r.IntN(4) {
		switch k := r.IntN(3); {
		case k == 1 && len(lenNums) > 0:
			b = appendUnknown(r, b, lenNums[r.IntN(len(lenNums))], protowire.BytesType, 2)
		case k == 2 && len(varNums) > 0:
			b = appendUnknown(r, b, varNums[r.IntN(len(varNums))], protowire.VarintType, 2)
		default:
			nums := []protowire.Number{99, 1000, protowire.MaxValidNumber}
			b = appendUnknown(r, b, nums[r.IntN(len(nums))], -1, 2)
		}
	}
	m.ProtoReflect().SetUnknown(b)
}

// appendUnknown appends field num of a random wire type other than avoid.
func appendUnknown(r *rand.Rand, b []byte, num protowire.Number, avoid protowire.Type, depth int) []byte {
	types := []protowire.Type{protowire.VarintType, protowire.Fixed32Type, protowire.Fixed64Type, protowire.BytesType, protowire.StartGroupType}
	typ := types[r.IntN(len(types))]
	for typ == avoid {
		typ = types[r.IntN(len(types))]
	}
	b = protowire.AppendTag(b, num, typ)
	switch typ {
	case protowire.VarintType:
		return protowire.AppendVarint(b, randU64(r))
	case protowire.Fixed32Type:
		return protowire.AppendFixed32(b, r.Uint32())
	case protowire.Fixed64Type:
		return protowire.AppendFixed64(b, r.Uint64())
	case protowire.BytesType:
		return protowire.AppendBytes(b, randBytes(r))
	}
	for i := range r.IntN(3) {
		if depth > 0 {
			b = appendUnknown(r, b, protowire.Number(1+i), -1, depth-1)
		}
	}
	return protowire.AppendTag(b, num, protowire.EndGroupType)
}

// nums is a list of field numbers, for randUnknown.
func nums(n ...protowire.Number) []protowire.Number { return n }

// randRateLimitRequest is a request of up to maxDesc descriptors.
func randRateLimitRequest(r *rand.Rand, maxDesc, maxEntries int) *rlsv3.RateLimitRequest {
	m := &rlsv3.RateLimitRequest{Domain: randString(r), HitsAddend: randU32(r)}
	for range r.IntN(maxDesc + 1) {
		m.Descriptors = append(m.Descriptors, randDescriptor(r, maxEntries))
	}
	// Known numbers with another wire type are unknown fields too: a
	// varint domain, a length-delimited (packed-looking) hits_addend.
	randUnknown(r, m, nums(1, 2), nums(3))
	return m
}

func randDescriptor(r *rand.Rand, maxEntries int) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{IsNegativeHits: r.IntN(3) == 0}
	for range r.IntN(maxEntries + 1) {
		e := &rlcommon.RateLimitDescriptor_Entry{Key: randKey(r), Value: randString(r)}
		randUnknown(r, e, nums(1, 2), nil)
		d.Entries = append(d.Entries, e)
	}
	if r.IntN(3) == 0 {
		d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: randU32(r), Unit: typev3.RateLimitUnit(r.IntN(8))}
		if r.IntN(2) == 0 {
			d.Limit.UnitMultiplier = wrapperspb.UInt32(randU32(r))
		}
	}
	if r.IntN(2) == 0 {
		d.HitsAddend = wrapperspb.UInt64(randU64(r))
		randUnknown(r, d.HitsAddend, nil, nums(1))
	}
	randUnknown(r, d, nums(1, 2, 3), nums(4))
	return d
}

// randCheckRequest is a request of up to maxHeaders headers in each of the
// map and header_map, with the fields Decode skips filled too.
func randCheckRequest(r *rand.Rand, maxHeaders int) *authv3.CheckRequest {
	m := &authv3.CheckRequest{}
	if r.IntN(10) == 0 {
		return m
	}
	a := &authv3.AttributeContext{Source: randPeer(r), Destination: randPeer(r)}
	if r.IntN(2) == 0 {
		a.ContextExtensions = map[string]string{randKey(r): randString(r), "x": randString(r)}
		a.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			randString(r): {Fields: map[string]*structpb.Value{"a": structpb.NewStringValue(randString(r)), "n": structpb.NewNumberValue(r.Float64())}}}}
		a.TlsSession = &authv3.AttributeContext_TLSSession{Sni: randString(r)}
	}
	m.Attributes = a
	randUnknown(r, m, nums(1), nil)
	randUnknown(r, a, nums(4), nil)
	if r.IntN(10) == 0 {
		return m
	}
	a.Request = &authv3.AttributeContext_Request{Time: timestamppb.New(time.Unix(int64(r.Uint32()), int64(r.IntN(1e9))))}
	randUnknown(r, a.Request, nums(2), nil)
	if r.IntN(10) == 0 {
		return m
	}
	h := &authv3.AttributeContext_HttpRequest{Id: randString(r), Method: randString(r), Path: randString(r),
		Host: randString(r), Scheme: "https", Query: randString(r), Fragment: randString(r), Size: int64(randU64(r)),
		Protocol: "HTTP/2", Body: randString(r), RawBody: randBytes(r)}
	a.Request.Http = h
	if n := r.IntN(maxHeaders + 1); n > 0 {
		h.Headers = map[string]string{}
		for range n {
			h.Headers[randKey(r)] = randString(r)
		}
	}
	if r.IntN(2) == 0 {
		h.HeaderMap = &corev3.HeaderMap{}
		for range r.IntN(maxHeaders + 1) {
			hv := &corev3.HeaderValue{Key: randKey(r)}
			switch r.IntN(3) {
			case 0:
				hv.Value = randString(r)
			case 1:
				hv.RawValue = randBytes(r)
			default:
				hv.Value, hv.RawValue = randString(r), randBytes(r)
			}
			randUnknown(r, hv, nums(1, 2, 3), nil)
			h.HeaderMap.Headers = append(h.HeaderMap.Headers, hv)
		}
		randUnknown(r, h.HeaderMap, nums(1), nil)
	}
	randUnknown(r, h, nums(2, 3, 4, 13), nil)
	return m
}

func randPeer(r *rand.Rand) *authv3.AttributeContext_Peer {
	if r.IntN(2) == 0 {
		return nil
	}
	return &authv3.AttributeContext_Peer{Service: randString(r), Principal: randString(r),
		Labels: map[string]string{randString(r): randString(r)},
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "10.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(r.IntN(65536))}}}}}
}
