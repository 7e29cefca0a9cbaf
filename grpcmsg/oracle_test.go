package grpcmsg

import (
	"fmt"
	"maps"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The tests compare what Decode yields with what proto.Unmarshal puts in
// a message, both seen as the plain values below. The message is either
// a generated type or a dynamic message of the reduced schema; both are
// read through protoreflect by field name.

type rlsPlain struct {
	Domain      string
	HitsAddend  uint32
	Descriptors []descPlain
}

type descPlain struct {
	Entries        []entryPlain
	HasLimit       bool
	HitsAddend     uint64
	HasHitsAddend  bool
	IsNegativeHits bool
}

type entryPlain struct{ Key, Value string }

type checkPlain struct {
	HasHTTP      bool
	Method, Path string
	Map          map[string]string // the headers map
	HeaderMap    []entryPlain      // header_map: value, or raw_value when value is empty
}

func (p rlsPlain) overBounds() bool {
	if len(p.Descriptors) > MaxDescriptors {
		return true
	}
	for _, d := range p.Descriptors {
		if len(d.Entries) > MaxEntries {
			return true
		}
	}
	return false
}

func (p checkPlain) overBounds() bool { return len(p.Map)+len(p.HeaderMap) > MaxHeaders }

func get(m protoreflect.Message, name protoreflect.Name) protoreflect.Value {
	fd := m.Descriptor().Fields().ByName(name)
	if fd == nil {
		panic(fmt.Sprintf("%s has no field %s", m.Descriptor().FullName(), name))
	}
	return m.Get(fd)
}

// has is a field's presence: a message set, or a list not empty (the
// reduced schema's stand-in for a field whose contents are not read).
func has(m protoreflect.Message, name protoreflect.Name) bool {
	fd := m.Descriptor().Fields().ByName(name)
	if fd.IsList() {
		return m.Get(fd).List().Len() > 0
	}
	return m.Has(fd)
}

func rlsFromProto(m protoreflect.Message) rlsPlain {
	p := rlsPlain{Domain: get(m, "domain").String(), HitsAddend: uint32(get(m, "hits_addend").Uint())}
	ds := get(m, "descriptors").List()
	for i := range ds.Len() {
		d := ds.Get(i).Message()
		dp := descPlain{HasLimit: has(d, "limit"), IsNegativeHits: get(d, "is_negative_hits").Bool()}
		if has(d, "hits_addend") {
			dp.HasHitsAddend = true
			dp.HitsAddend = get(get(d, "hits_addend").Message(), "value").Uint()
		}
		es := get(d, "entries").List()
		for j := range es.Len() {
			e := es.Get(j).Message()
			dp.Entries = append(dp.Entries, entryPlain{get(e, "key").String(), get(e, "value").String()})
		}
		p.Descriptors = append(p.Descriptors, dp)
	}
	return p
}

func rlsFromDecoded(r *RateLimitRequest) rlsPlain {
	p := rlsPlain{Domain: string(r.Domain), HitsAddend: r.HitsAddend}
	for i := range r.Descriptors {
		d := &r.Descriptors[i]
		dp := descPlain{HasLimit: d.HasLimit, HitsAddend: d.HitsAddend, HasHitsAddend: d.HasHitsAddend, IsNegativeHits: d.IsNegativeHits}
		for _, e := range d.Entries {
			dp.Entries = append(dp.Entries, entryPlain{string(e.Key), string(e.Value)})
		}
		p.Descriptors = append(p.Descriptors, dp)
	}
	return p
}

func checkFromProto(m protoreflect.Message) checkPlain {
	p := checkPlain{Map: map[string]string{}}
	for _, name := range []protoreflect.Name{"attributes", "request", "http"} {
		if !has(m, name) {
			return p
		}
		m = get(m, name).Message()
	}
	p.HasHTTP = true
	p.Method, p.Path = get(m, "method").String(), get(m, "path").String()
	get(m, "headers").Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		p.Map[k.String()] = v.String()
		return true
	})
	if has(m, "header_map") {
		hs := get(get(m, "header_map").Message(), "headers").List()
		for i := range hs.Len() {
			h := hs.Get(i).Message()
			v := get(h, "value").String()
			if v == "" {
				v = string(get(h, "raw_value").Bytes())
			}
			p.HeaderMap = append(p.HeaderMap, entryPlain{get(h, "key").String(), v})
		}
	}
	return p
}

// checkFromDecoded also checks Headers' shape: the map's headers first,
// each key once.
func checkFromDecoded(t testing.TB, r *CheckRequest) checkPlain {
	t.Helper()
	p := checkPlain{HasHTTP: r.HasHTTP, Method: string(r.Method), Path: string(r.Path), Map: map[string]string{}}
	for i, h := range r.Headers {
		if !h.FromMap {
			if len(p.HeaderMap) > 0 {
				t.Errorf("Headers[%d]: a map header after header_map's", i)
			}
			if _, dup := p.Map[string(h.Key)]; dup {
				t.Errorf("Headers[%d]: map key %q twice", i, h.Key)
			}
			p.Map[string(h.Key)] = string(h.Value)
			continue
		}
		p.HeaderMap = append(p.HeaderMap, entryPlain{string(h.Key), string(h.Value)})
	}
	return p
}

func samePlain(t testing.TB, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %+v\n want %+v", what, got, want)
	}
}

// sameCheck compares two checkPlain, the maps as sets.
func sameCheck(t testing.TB, what string, got, want checkPlain) {
	t.Helper()
	if !maps.Equal(got.Map, want.Map) {
		t.Fatalf("%s: headers map:\n got  %q\n want %q", what, got.Map, want.Map)
	}
	got.Map, want.Map = nil, nil
	samePlain(t, what, got, want)
}

// The reduced schema declares, with the same numbers and types, only the
// fields Decode reads; every other field is unknown to it, so
// proto.Unmarshal checks those only at the level they occur, as Decode
// does. A field whose presence alone is read (a descriptor's limit) is
// repeated bytes: seen, but its contents not parsed. proto.Unmarshal into
// this schema is then the exact oracle for what Decode accepts.
var reducedRLS, reducedCheck = func() (protoreflect.MessageDescriptor, protoreflect.MessageDescriptor) {
	const (
		str   = descriptorpb.FieldDescriptorProto_TYPE_STRING
		byt   = descriptorpb.FieldDescriptorProto_TYPE_BYTES
		u32   = descriptorpb.FieldDescriptorProto_TYPE_UINT32
		u64   = descriptorpb.FieldDescriptorProto_TYPE_UINT64
		boo   = descriptorpb.FieldDescriptorProto_TYPE_BOOL
		msg   = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
		opt   = descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
		rep   = descriptorpb.FieldDescriptorProto_LABEL_REPEATED
		outer = ".reduced."
	)
	field := func(name string, num int32, typ descriptorpb.FieldDescriptorProto_Type, label descriptorpb.FieldDescriptorProto_Label, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(num), Type: typ.Enum(), Label: label.Enum()}
		if typeName != "" {
			f.TypeName = proto.String(outer + typeName)
		}
		return f
	}
	message := func(name string, fields ...*descriptorpb.FieldDescriptorProto) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{Name: proto.String(name), Field: fields}
	}
	http := message("Http", field("method", 2, str, opt, ""), field("headers", 3, msg, rep, "Http.HeadersEntry"),
		field("path", 4, str, opt, ""), field("header_map", 13, msg, opt, "HeaderMap"))
	entry := message("HeadersEntry", field("key", 1, str, opt, ""), field("value", 2, str, opt, ""))
	entry.Options = &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)}
	http.NestedType = []*descriptorpb.DescriptorProto{entry}
	file := &descriptorpb.FileDescriptorProto{
		Name: proto.String("grpcmsg_reduced.proto"), Package: proto.String("reduced"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			message("RateLimitRequest", field("domain", 1, str, opt, ""), field("descriptors", 2, msg, rep, "Descriptor"),
				field("hits_addend", 3, u32, opt, "")),
			message("Descriptor", field("entries", 1, msg, rep, "Entry"), field("limit", 2, byt, rep, ""),
				field("hits_addend", 3, msg, opt, "UInt64Value"), field("is_negative_hits", 4, boo, opt, "")),
			message("Entry", field("key", 1, str, opt, ""), field("value", 2, str, opt, "")),
			message("UInt64Value", field("value", 1, u64, opt, "")),
			message("CheckRequest", field("attributes", 1, msg, opt, "Attributes")),
			message("Attributes", field("request", 4, msg, opt, "Request")),
			message("Request", field("http", 2, msg, opt, "Http")),
			http,
			message("HeaderMap", field("headers", 1, msg, rep, "HeaderValue")),
			message("HeaderValue", field("key", 1, str, opt, ""), field("value", 2, str, opt, ""), field("raw_value", 3, byt, opt, "")),
		},
	}
	fd, err := protodesc.NewFile(file, nil)
	if err != nil {
		panic(err)
	}
	return fd.Messages().ByName("RateLimitRequest"), fd.Messages().ByName("CheckRequest")
}()

// unmarshalReduced is proto.Unmarshal of b into the reduced schema's md.
func unmarshalReduced(b []byte, md protoreflect.MessageDescriptor) (protoreflect.Message, error) {
	m := dynamicpb.NewMessage(md)
	return m, proto.Unmarshal(b, m)
}
