package hpack

import "testing"

// step is one header block of an Appendix C example: the block, the list
// it decodes to, and the dynamic table after it, newest entry first.
type step struct {
	block string // hex
	list  []pair
	table []pair
	size  int
}

// decodeSteps decodes steps in order on one connection.
func decodeSteps(t *testing.T, maxTable uint32, steps []step) {
	t.Helper()
	d := NewDecoder(maxTable)
	f := NewFields(4096)
	for i, s := range steps {
		if err := d.Decode(dehex(s.block), f); err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
		if got := listOf(f); !equalLists(got, s.list) {
			t.Fatalf("block %d: list %v, want %v", i, got, s.list)
		}
		if f.Size() != listSize(s.list) {
			t.Errorf("block %d: Size %d, want %d", i, f.Size(), listSize(s.list))
		}
		if got := tableOf(d); !equalLists(got, s.table) {
			t.Errorf("block %d: table %v, want %v", i, got, s.table)
		}
		if d.table.size != s.size {
			t.Errorf("block %d: table size %d, want %d", i, d.table.size, s.size)
		}
		if err := checkInvariants(d); err != nil {
			t.Errorf("block %d: %v", i, err)
		}
	}
}

// C.2: each block on a fresh connection.
func TestAppendixC2(t *testing.T) {
	t.Run("C.2.1 literal with indexing", func(t *testing.T) {
		decodeSteps(t, 4096, []step{{
			"400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
			[]pair{{"custom-key", "custom-header"}},
			[]pair{{"custom-key", "custom-header"}}, 55,
		}})
	})
	t.Run("C.2.2 literal without indexing", func(t *testing.T) {
		decodeSteps(t, 4096, []step{{
			"040c 2f73 616d 706c 652f 7061 7468",
			[]pair{{":path", "/sample/path"}},
			[]pair{}, 0,
		}})
	})
	t.Run("C.2.3 literal never indexed", func(t *testing.T) {
		decodeSteps(t, 4096, []step{{
			"1008 7061 7373 776f 7264 0673 6563 7265 74",
			[]pair{{"password", "secret"}},
			[]pair{}, 0,
		}})
	})
	t.Run("C.2.4 indexed", func(t *testing.T) {
		decodeSteps(t, 4096, []step{{
			"82",
			[]pair{{":method", "GET"}},
			[]pair{}, 0,
		}})
	})
}

var (
	c3list1  = []pair{{":method", "GET"}, {":scheme", "http"}, {":path", "/"}, {":authority", "www.example.com"}}
	c3list2  = append(c3list1[:4:4], pair{"cache-control", "no-cache"})
	c3list3  = []pair{{":method", "GET"}, {":scheme", "https"}, {":path", "/index.html"}, {":authority", "www.example.com"}, {"custom-key", "custom-value"}}
	c3table1 = []pair{{":authority", "www.example.com"}}
	c3table2 = []pair{{"cache-control", "no-cache"}, {":authority", "www.example.com"}}
	c3table3 = []pair{{"custom-key", "custom-value"}, {"cache-control", "no-cache"}, {":authority", "www.example.com"}}
)

// C.3: requests without Huffman coding.
var appendixC3 = []step{
	{"8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d", c3list1, c3table1, 57},
	{"8286 84be 5808 6e6f 2d63 6163 6865", c3list2, c3table2, 110},
	{"8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65", c3list3, c3table3, 164},
}

// C.4: the same requests with Huffman coding.
var appendixC4 = []step{
	{"8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff", c3list1, c3table1, 57},
	{"8286 84be 5886 a8eb 1064 9cbf", c3list2, c3table2, 110},
	{"8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf", c3list3, c3table3, 164},
}

var (
	c5list1 = []pair{
		{":status", "302"}, {"cache-control", "private"},
		{"date", "Mon, 21 Oct 2013 20:13:21 GMT"}, {"location", "https://www.example.com"},
	}
	c5table1 = []pair{
		{"location", "https://www.example.com"}, {"date", "Mon, 21 Oct 2013 20:13:21 GMT"},
		{"cache-control", "private"}, {":status", "302"},
	}
	c5list2 = []pair{
		{":status", "307"}, {"cache-control", "private"},
		{"date", "Mon, 21 Oct 2013 20:13:21 GMT"}, {"location", "https://www.example.com"},
	}
	c5table2 = []pair{
		{":status", "307"}, {"location", "https://www.example.com"},
		{"date", "Mon, 21 Oct 2013 20:13:21 GMT"}, {"cache-control", "private"},
	}
	c5list3 = []pair{
		{":status", "200"}, {"cache-control", "private"},
		{"date", "Mon, 21 Oct 2013 20:13:22 GMT"}, {"location", "https://www.example.com"},
		{"content-encoding", "gzip"},
		{"set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"},
	}
	c5table3 = []pair{
		{"set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"},
		{"content-encoding", "gzip"}, {"date", "Mon, 21 Oct 2013 20:13:22 GMT"},
	}
)

// C.5: responses without Huffman coding, with a 256-octet table, so that
// entries are evicted.
var appendixC5 = []step{
	{`4803 3330 3258 0770 7269 7661 7465 611d
	  4d6f 6e2c 2032 3120 4f63 7420 3230 3133
	  2032 303a 3133 3a32 3120 474d 546e 1768
	  7474 7073 3a2f 2f77 7777 2e65 7861 6d70
	  6c65 2e63 6f6d`, c5list1, c5table1, 222},
	{"4803 3330 37c1 c0bf", c5list2, c5table2, 222},
	{`88c1 611d 4d6f 6e2c 2032 3120 4f63 7420
	  3230 3133 2032 303a 3133 3a32 3220 474d
	  54c0 5a04 677a 6970 7738 666f 6f3d 4153
	  444a 4b48 514b 425a 584f 5157 454f 5049
	  5541 5851 5745 4f49 553b 206d 6178 2d61
	  6765 3d33 3630 303b 2076 6572 7369 6f6e
	  3d31`, c5list3, c5table3, 215},
}

// C.6: the same responses with Huffman coding.
var appendixC6 = []step{
	{`4882 6402 5885 aec3 771a 4b61 96d0 7abe
	  9410 54d4 44a8 2005 9504 0b81 66e0 82a6
	  2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8
	  e9ae 82ae 43d3`, c5list1, c5table1, 222},
	{"4883 640e ffc1 c0bf", c5list2, c5table2, 222},
	{`88c1 6196 d07a be94 1054 d444 a820 0595
	  040b 8166 e084 a62d 1bff c05a 839b d9ab
	  77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b
	  3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
	  9587 3160 65c0 03ed 4ee5 b106 3d50 07`, c5list3, c5table3, 215},
}

func TestAppendixC3(t *testing.T) { decodeSteps(t, 4096, appendixC3) }
func TestAppendixC4(t *testing.T) { decodeSteps(t, 4096, appendixC4) }
func TestAppendixC5(t *testing.T) { decodeSteps(t, 256, appendixC5) }
func TestAppendixC6(t *testing.T) { decodeSteps(t, 256, appendixC6) }
