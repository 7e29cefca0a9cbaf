package policy

import "testing"

func TestValidName(t *testing.T) {
	for _, ok := range []string{"a", "chat", "input_tokens", "v1.embed-large", "0", "_x", "-"} {
		if p := validName(ok); p != "" {
			t.Errorf("%q refused: %s", ok, p)
		}
	}
	for _, bad := range []string{"", "Chat", "a b", "a/b", "é", "a\x00", string(make([]byte, MaxNameLen+1))} {
		if validName(bad) == "" {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestWorstCaseFitsBurstExactly(t *testing.T) {
	// weight 3 × 7 items + fixed 2 = 23; minimum 9 is smaller.
	ok := `{"operations":{"a":{"weight":3}},"fixed_cost":2,"minimum_cost":9,"limits":{"max_items":7,"unit_rate":1,"unit_burst":23}}`
	if _, err := Parse([]byte(ok)); err != nil {
		t.Fatalf("quote equal to burst refused: %v", err)
	}
	tight := `{"operations":{"a":{"weight":3}},"fixed_cost":2,"minimum_cost":9,"limits":{"max_items":7,"unit_rate":1,"unit_burst":22}}`
	if _, err := Parse([]byte(tight)); err == nil {
		t.Fatal("quote above burst accepted")
	}
	// The minimum counts when it is the larger.
	minimum := `{"operations":{"a":{"weight":0}},"minimum_cost":30,"limits":{"max_items":7,"unit_rate":1,"unit_burst":29}}`
	if _, err := Parse([]byte(minimum)); err == nil {
		t.Fatal("minimum above burst accepted")
	}
	// A free class is fine when a minimum makes every request cost.
	free := `{"operations":{"a":{"weight":0}},"minimum_cost":1,"limits":{"max_items":7}}`
	if _, err := Parse([]byte(free)); err != nil {
		t.Fatalf("free class with a minimum refused: %v", err)
	}
}
