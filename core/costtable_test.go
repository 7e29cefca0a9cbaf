package core

import "testing"

func testTable() CostTable {
	return CostTable{
		Classes: []OpClass{
			{Name: "input_tokens", Weight: 1},
			{Name: "output_tokens", Weight: 3},
			{Name: "requests", Weight: 10},
			{Name: "images", Weight: 500, Permission: 1 << 5},
		},
		Fixed:   2,
		Minimum: 20,
	}
}

func TestQuote(t *testing.T) {
	tab := testTable()
	cases := []struct {
		name   string
		work   []WorkItem
		quote  CostUnits
		reason DenyReason
	}{
		{"sum plus fixed", []WorkItem{{0, 1200}, {2, 1}}, 2 + 1200 + 10, DenyNone},
		{"minimum applies", []WorkItem{{0, 3}}, 20, DenyNone},
		{"repeated class sums", []WorkItem{{1, 10}, {1, 10}}, 2 + 60, DenyNone},
		{"zero counts skipped", []WorkItem{{0, 0}, {1, 100}}, 302, DenyNone},
		{"empty", nil, 0, DenyEmptyWorkload},
		{"all zero", []WorkItem{{0, 0}, {3, 0}}, 0, DenyEmptyWorkload},
		{"unpriced", []WorkItem{{0, 1}, {4, 1}}, 0, DenyUnpricedOperation},
		{"weight overflow", []WorkItem{{3, 1 << 60}}, 0, DenyCostOverflow},
		{"sum overflow", []WorkItem{{0, 1 << 63}, {0, 1 << 63}}, 0, DenyCostOverflow},
		{"fixed overflow", []WorkItem{{0, ^uint64(0) - 1}}, 0, DenyCostOverflow},
	}
	for _, c := range cases {
		q, r := tab.Quote(c.work)
		if q != c.quote || r != c.reason {
			t.Errorf("%s: Quote = %d, %s; want %d, %s", c.name, q, r, c.quote, c.reason)
		}
	}
}

func TestQuoteCollectsClassPermissions(t *testing.T) {
	tab := testTable()
	p, r := tab.quote([]WorkItem{{0, 1}, {3, 2}})
	if r != DenyNone || p.perms != 1<<5 || p.items != 3 {
		t.Fatalf("quote = %+v, %s", p, r)
	}
}

func TestWorstCase(t *testing.T) {
	tab := testTable()
	w, err := tab.worstCase(10)
	if err != nil || w != 2+500*10 {
		t.Fatalf("worstCase(10) = %d, %v", w, err)
	}
	if w, _ := (&CostTable{Minimum: 99}).worstCase(10); w != 99 {
		t.Fatalf("minimum-only worst case = %d", w)
	}
	if _, err := tab.worstCase(1 << 62); err == nil {
		t.Fatal("overflowing worst case accepted")
	}
}
