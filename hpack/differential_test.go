package hpack

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	xhpack "golang.org/x/net/http2/hpack"
)

// headerGen makes random header lists, with names and values drawn mostly
// from small pools so that the encoder indexes and reuses entries.
type headerGen struct {
	r      *rand.Rand
	names  []string
	values []string
}

func newHeaderGen(r *rand.Rand) *headerGen {
	g := &headerGen{r: r}
	for _, e := range staticTable {
		g.names = append(g.names, e.name)
		if e.value != "" {
			g.values = append(g.values, e.value)
		}
	}
	g.names = append(g.names, "grpc-timeout", "te", "grpc-encoding", "grpc-accept-encoding",
		"x-request-id", "x-envoy-expected-rq-timeout-ms", "custom-key", "x-bin-bin", "Upper-Case")
	g.values = append(g.values, "application/grpc", "trailers", "grpc-go/1.85.0", "999m", "gzip", "")
	for range 20 {
		g.names = append(g.names, g.str(1+r.IntN(30)))
		g.values = append(g.values, g.str(r.IntN(60)))
	}
	return g
}

// str returns n random octets: mostly header-like text, sometimes any
// octet, so that Huffman codes of every length appear.
func (g *headerGen) str(n int) string {
	var b strings.Builder
	binary := g.r.IntN(8) == 0
	for range n {
		if binary {
			b.WriteByte(byte(g.r.IntN(256)))
		} else {
			b.WriteByte("abcdefghijklmnopqrstuvwxyz0123456789-_/.:;=, ABCXYZ"[g.r.IntN(51)])
		}
	}
	return b.String()
}

func (g *headerGen) list() []xhpack.HeaderField {
	list := make([]xhpack.HeaderField, g.r.IntN(20))
	for i := range list {
		h := &list[i]
		h.Name = g.names[g.r.IntN(len(g.names))]
		switch k := g.r.IntN(20); {
		case k == 0:
			h.Value = g.str(g.r.IntN(5000)) // larger than most tables
		case k < 6:
			h.Value = g.str(g.r.IntN(300))
		default:
			h.Value = g.values[g.r.IntN(len(g.values))]
		}
		h.Sensitive = g.r.IntN(10) == 0
	}
	return list
}

// TestDifferential encodes random header lists with the reference encoder,
// many blocks in sequence per connection with table size changes, and
// checks that Decode yields them exactly. A second decoder with a small
// Fields bound follows the same blocks, to check that ErrTooLarge keeps
// the table in step.
func TestDifferential(t *testing.T) {
	limits := []uint32{0, 32, 64, 256, 1000, 4096, 16384, MaxTableBytes}
	f := NewFields(1 << 20)
	small := NewFields(400)
	blocks, tooLarge, doubleUpdates := 0, 0, 0
	for conn := range 32 {
		r := rand.New(rand.NewPCG(uint64(conn), 7541))
		g := newHeaderGen(r)
		limit := limits[conn%len(limits)]
		var enc bytes.Buffer
		e := xhpack.NewEncoder(&enc)
		e.SetMaxDynamicTableSizeLimit(limit)
		d := NewDecoder(limit)
		dSmall := NewDecoder(limit)
		for block := range 150 {
			if r.IntN(8) == 0 {
				// One or two changes between blocks: the encoder signals the
				// smallest and then the final size.
				for range 1 + r.IntN(2) {
					e.SetMaxDynamicTableSize(uint32(r.IntN(int(limit) + 1)))
				}
			}
			list := g.list()
			enc.Reset()
			for _, h := range list {
				if err := e.WriteField(h); err != nil {
					t.Fatal(err)
				}
			}
			want := referenceList(list)
			if _, two := twoSizeUpdates(enc.Bytes()); two {
				doubleUpdates++
			}
			if err := d.Decode(enc.Bytes(), f); err != nil {
				t.Fatalf("conn %d block %d (limit %d): %v\n%x", conn, block, limit, err, enc.Bytes())
			}
			if got := listOf(f); !equalLists(got, want) {
				t.Fatalf("conn %d block %d: got %v\nwant %v", conn, block, got, want)
			}
			if f.Size() != listSize(want) {
				t.Fatalf("conn %d block %d: Size %d, want %d", conn, block, f.Size(), listSize(want))
			}
			if err := checkInvariants(d); err != nil {
				t.Fatalf("conn %d block %d: %v", conn, block, err)
			}
			err := dSmall.Decode(enc.Bytes(), small)
			if err == ErrTooLarge {
				tooLarge++
			}
			if err := checkBounded(small, err, want, 400); err != nil {
				t.Fatalf("conn %d block %d: %v", conn, block, err)
			}
			blocks++
		}
	}
	if tooLarge == 0 || tooLarge == blocks || doubleUpdates == 0 {
		t.Fatalf("of %d blocks, %d too large, %d with two size updates", blocks, tooLarge, doubleUpdates)
	}
}
