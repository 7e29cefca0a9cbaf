package main

import (
	"encoding/json"
	"strconv"
	"testing"
)

// TestSpendAgainstBudgetLeavesOutUnspentLeases: units this node's leases
// hold unspent are not spent (a lease of 10000 after one 1210-unit check
// is 1210 spent, not 10000); without a budget there is nothing to show.
func TestSpendAgainstBudgetLeavesOutUnspentLeases(t *testing.T) {
	account := func(allowance, left int, held any) record {
		return record{"budget": map[string]any{"allowance": num(allowance), "period": "day"},
			"funds": map[string]any{"held_unspent": held, "allowance_left": num(left)}}
	}
	for _, tc := range []struct {
		r    record
		want string
	}{
		{account(100000, 90000, num(8790)), "1210 / 100000 per day"},
		{account(100000, 90000, nil), "10000 / 100000 per day"}, // the node does not say
		{account(100000, 100000, num(0)), "0 / 100000 per day"},
		{account(100000, 0, num(0)), "100000 / 100000 per day"},
		{account(100, 0, num(9995)), "0 / 100 per day"}, // a lease mostly of top-ups: never negative
		{account(0, 0, num(0)), "-"},
	} {
		if got := spendAgainstBudget(tc.r); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.r, got, tc.want)
		}
	}
}

// num is n as the API's JSON decodes (UseNumber).
func num(n int) json.Number { return json.Number(strconv.Itoa(n)) }
