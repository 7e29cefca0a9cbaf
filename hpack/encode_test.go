package hpack

import (
	"testing"

	xhpack "golang.org/x/net/http2/hpack"
)

func TestAppendRoundTrip(t *testing.T) {
	long := string(make([]byte, 300)) // lengths past the 7-bit prefix
	var b []byte
	b = AppendIndexed(b, StaticStatus200)
	b = AppendLiteralIndexedName(b, StaticContentType, "application/grpc")
	b = AppendLiteral(b, "grpc-status", "0")
	b = AppendLiteral(b, "grpc-message", "")
	b = AppendLiteralBytes(b, "x-long", []byte(long))
	b = AppendLiteralIndexedName(b, 61, "w")
	b = AppendIndexed(b, 61)
	want := []pair{
		{":status", "200"}, {"content-type", "application/grpc"}, {"grpc-status", "0"},
		{"grpc-message", ""}, {"x-long", long}, {"www-authenticate", "w"}, {"www-authenticate", ""},
	}
	x := xhpack.NewDecoder(4096, nil)
	hf, err := x.DecodeFull(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := referenceList(hf); !equalLists(got, want) {
		t.Fatalf("reference decodes %v", got)
	}
	// Nothing entered the reference's table: a second pass decodes alike.
	if hf, err := x.DecodeFull(b); err != nil || !equalLists(referenceList(hf), want) {
		t.Fatalf("second pass: %v", err)
	}
	d := NewDecoder(4096)
	f := NewFields(4096)
	if err := d.Decode(b, f); err != nil || !equalLists(listOf(f), want) || d.table.count != 0 {
		t.Fatalf("Decode: %v, %v", err, listOf(f))
	}
	if v, ok := f.Get("content-type"); !ok || string(v) != "application/grpc" {
		t.Fatalf("Get = %q, %v", v, ok)
	}
	if _, ok := f.Get("Content-Type"); ok {
		t.Fatal("Get is exact")
	}
}

func TestAppendPanicsOnBadIndex(t *testing.T) {
	for _, index := range []uint64{0, 62} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("AppendIndexed(%d) did not panic", index)
				}
			}()
			AppendIndexed(nil, index)
		}()
	}
}

func TestAppendAllocs(t *testing.T) {
	buf := make([]byte, 0, 256)
	value := []byte("0")
	allocs := testing.AllocsPerRun(100, func() {
		b := AppendIndexed(buf[:0], StaticStatus200)
		b = AppendLiteralIndexedName(b, StaticContentType, "application/grpc")
		b = AppendLiteral(b, "grpc-status", "0")
		b = AppendLiteralBytes(b, "grpc-message", value)
		buf = b
	})
	if allocs != 0 {
		t.Fatalf("%v allocations", allocs)
	}
}
