package core

import "testing"

// TestShippedSlotsNeverMove pins every reason's number, label, code and retry
// advice. Changing a line here breaks dashboards and clients: append instead.
func TestShippedSlotsNeverMove(t *testing.T) {
	want := []struct {
		slot  DenyReason
		label string
		code  string
		retry Retry
	}{
		{1, "unknown_principal", "unknown-principal", RetryNever},
		{2, "account_suspended", "account-suspended", RetryNever},
		{3, "account_closed", "account-closed", RetryNever},
		{4, "snapshot_expired", "policy-stale", RetryTransient},
		{5, "missing_permission", "missing-permission", RetryNever},
		{6, "request_too_large", "request-too-large", RetryNever},
		{7, "unpriced_operation", "unpriced-operation", RetryNever},
		{8, "empty_workload", "empty-workload", RetryNever},
		{9, "cost_overflow", "cost-overflow", RetryNever},
		{10, "unpriceable_under_limits", "unpriceable-under-limits", RetryNever},
		{11, "request_rate_limited", "request-rate-limited", RetryTransient},
		{12, "rate_limited", "rate-limited", RetryTransient},
		{13, "concurrency_limited", "concurrency-limited", RetryAfterInFlight},
		{14, "lease_unavailable", "lease-unavailable", RetryTransient},
		{15, "lease_expired", "lease-expired", RetryTransient},
		{16, "lease_exhausted", "lease-exhausted", RetryTransient},
		{17, "overage_cap_exhausted", "overage-cap-exhausted", RetryTransient},
		{18, "accounting_backpressure", "accounting-busy", RetryTransient},
		{19, "capacity_unavailable", "capacity-unavailable", RetryTransient},
		{20, "funding_expired_at_start", "funding-expired-at-start", RetryTransient},
		{21, "balance_exhausted", "balance-exhausted", RetryNever},
		{22, "balance_insufficient", "balance-insufficient", RetryNever},
		{23, "storage_full", "storage-full", RetryTransient},
		{24, "storage_failed", "storage-failed", RetryTransient},
	}
	if len(want) != NumDenyReasons-1 {
		t.Fatalf("%d reasons shipped, table pins %d: add the new one here", NumDenyReasons-1, len(want))
	}
	labels, codes := map[string]bool{}, map[string]bool{}
	for _, w := range want {
		r := w.slot
		if r.Label() != w.label || r.Code() != w.code || r.Retry() != w.retry {
			t.Errorf("slot %d = (%s, %s, %s), want (%s, %s, %s)", r, r.Label(), r.Code(), r.Retry(), w.label, w.code, w.retry)
		}
		if labels[w.label] || codes[w.code] {
			t.Errorf("slot %d reuses a label or code", r)
		}
		labels[w.label], codes[w.code] = true, true
	}
}

func TestZeroDenialIsAdmission(t *testing.T) {
	if (Denial{}).Denied() {
		t.Fatal("zero Denial reads as a refusal")
	}
	if !deny(DenyRateLimited).Denied() {
		t.Fatal("refusal reads as admission")
	}
}
