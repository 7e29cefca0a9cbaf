package hpack

import (
	"bytes"
	"testing"

	xhpack "golang.org/x/net/http2/hpack"
)

// grpcRequest is a realistic gRPC request header list.
var grpcRequest = []xhpack.HeaderField{
	{Name: ":method", Value: "POST"},
	{Name: ":scheme", Value: "http"},
	{Name: ":path", Value: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
	{Name: ":authority", Value: "ratelimit.internal:8081"},
	{Name: "content-type", Value: "application/grpc"},
	{Name: "te", Value: "trailers"},
	{Name: "user-agent", Value: "grpc-go/1.85.0"},
	{Name: "grpc-timeout", Value: "999m"},
}

// grpcBlocks returns the first and second blocks of grpcRequest sent twice
// on a connection by the reference encoder: the first of literals, mostly
// Huffman-coded, the second indexed.
func grpcBlocks(t testing.TB) (first, later []byte) {
	var buf bytes.Buffer
	e := xhpack.NewEncoder(&buf)
	for _, h := range grpcRequest {
		e.WriteField(h)
	}
	first = bytes.Clone(buf.Bytes())
	buf.Reset()
	for _, h := range grpcRequest {
		e.WriteField(h)
	}
	later = bytes.Clone(buf.Bytes())
	if len(later) != len(grpcRequest) {
		t.Fatalf("second block not all indexed: %x", later)
	}
	return first, later
}

func TestDecodeAllocs(t *testing.T) {
	first, later := grpcBlocks(t)
	d := NewDecoder(4096)
	f := NewFields(16 << 10)
	want := referenceList(grpcRequest)
	allocs := testing.AllocsPerRun(100, func() {
		d.Reset()
		if err := d.Decode(first, f); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("first block: %v allocations", allocs)
	}
	if !equalLists(listOf(f), want) {
		t.Fatalf("first block: %v", listOf(f))
	}
	allocs = testing.AllocsPerRun(100, func() {
		if err := d.Decode(later, f); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("later block: %v allocations", allocs)
	}
	if !equalLists(listOf(f), want) {
		t.Fatalf("later block: %v", listOf(f))
	}
	// Without Reset, the first block repeatedly inserts and evicts.
	allocs = testing.AllocsPerRun(100, func() {
		d.Decode(first, f)
		if v, ok := f.Get("grpc-timeout"); !ok || string(v) != "999m" {
			t.Fatal("grpc-timeout")
		}
	})
	if allocs != 0 {
		t.Errorf("first block, again: %v allocations", allocs)
	}
}

func BenchmarkDecode(b *testing.B) {
	first, later := grpcBlocks(b)
	d := NewDecoder(4096)
	f := NewFields(16 << 10)
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(first)))
		for b.Loop() {
			d.Reset()
			if err := d.Decode(first, f); err != nil {
				b.Fatal(err)
			}
		}
	})
	d.Reset()
	d.Decode(first, f)
	b.Run("steady", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(later)))
		for b.Loop() {
			if err := d.Decode(later, f); err != nil {
				b.Fatal(err)
			}
		}
	})
}
