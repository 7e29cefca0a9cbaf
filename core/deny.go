package core

// DenyReason says why a request was refused. Its values are dense counter
// slots: a shipped reason never changes its number, new reasons append.
// Zero is not a reason; it means "admitted".
type DenyReason uint8

// The stable list. TestShippedSlotsNeverMove pins every number and label.
const (
	DenyNone                   DenyReason = iota
	DenyUnknownPrincipal                  // 1: no snapshot for the credential
	DenyAccountSuspended                  // 2
	DenyAccountClosed                     // 3
	DenySnapshotExpired                   // 4: policy older than its valid-until
	DenyMissingPermission                 // 5: route or operation class not granted
	DenyRequestTooLarge                   // 6: more items than max items per request
	DenyUnpricedOperation                 // 7: operation class not in the cost table
	DenyEmptyWorkload                     // 8: no items, or only zero counts
	DenyCostOverflow                      // 9: the quote does not fit CostUnits
	DenyUnpriceableUnderLimits            // 10: the quote exceeds the whole weighted burst
	DenyRequestRateLimited                // 11: request-count bucket empty
	DenyRateLimited                       // 12: cost-weighted bucket empty
	DenyConcurrencyLimited                // 13: account or principal ceiling reached
	DenyLeaseUnavailable                  // 14: no lease funds this account here yet
	DenyLeaseExpired                      // 15: the lease's usable window has passed
	DenyLeaseExhausted                    // 16: the lease holds fewer units than the quote
	DenyOverageCapExhausted               // 17: elastic overage cap reached
	DenyAccountingBackpressure            // 18: no usage slot could be reserved
	DenyCapacityUnavailable               // 19: execution capacity gate full
	DenyFundingExpiredAtStart             // 20: funding lapsed between admit and commit
	DenyBalanceExhausted                  // 21: the ledger has no funding left
	DenyBalanceInsufficient               // 22: the ledger has less than the quote
	DenyStorageFull                       // 23: the node's usage spool has no room on its filesystem
	DenyStorageFailed                     // 24: the node's usage spool failed a write or sync
	numDenyReasons
)

// NumDenyReasons is the number of counter slots, including the unused zero.
const NumDenyReasons = int(numDenyReasons)

// Retry is the advice a refusal carries about retrying the same request.
type Retry uint8

const (
	RetryNever         Retry = iota // nothing will change without outside action
	RetryTransient                  // retry later; RetryAfter says when if known
	RetryAfterInFlight              // retry once one of your in-flight requests ends
)

var retryLabels = [...]string{"never", "transient", "after_in_flight"}

func (r Retry) String() string { return retryLabels[r] }

type reasonInfo struct {
	label string // snake_case: metric label and seed-000 style
	code  string // kebab-case: problem+json code
	retry Retry
}

var reasons = [numDenyReasons]reasonInfo{
	DenyNone:                   {"none", "none", RetryNever},
	DenyUnknownPrincipal:       {"unknown_principal", "unknown-principal", RetryNever},
	DenyAccountSuspended:       {"account_suspended", "account-suspended", RetryNever},
	DenyAccountClosed:          {"account_closed", "account-closed", RetryNever},
	DenySnapshotExpired:        {"snapshot_expired", "policy-stale", RetryTransient},
	DenyMissingPermission:      {"missing_permission", "missing-permission", RetryNever},
	DenyRequestTooLarge:        {"request_too_large", "request-too-large", RetryNever},
	DenyUnpricedOperation:      {"unpriced_operation", "unpriced-operation", RetryNever},
	DenyEmptyWorkload:          {"empty_workload", "empty-workload", RetryNever},
	DenyCostOverflow:           {"cost_overflow", "cost-overflow", RetryNever},
	DenyUnpriceableUnderLimits: {"unpriceable_under_limits", "unpriceable-under-limits", RetryNever},
	DenyRequestRateLimited:     {"request_rate_limited", "request-rate-limited", RetryTransient},
	DenyRateLimited:            {"rate_limited", "rate-limited", RetryTransient},
	DenyConcurrencyLimited:     {"concurrency_limited", "concurrency-limited", RetryAfterInFlight},
	DenyLeaseUnavailable:       {"lease_unavailable", "lease-unavailable", RetryTransient},
	DenyLeaseExpired:           {"lease_expired", "lease-expired", RetryTransient},
	DenyLeaseExhausted:         {"lease_exhausted", "lease-exhausted", RetryTransient},
	DenyOverageCapExhausted:    {"overage_cap_exhausted", "overage-cap-exhausted", RetryTransient},
	DenyAccountingBackpressure: {"accounting_backpressure", "accounting-busy", RetryTransient},
	DenyCapacityUnavailable:    {"capacity_unavailable", "capacity-unavailable", RetryTransient},
	DenyFundingExpiredAtStart:  {"funding_expired_at_start", "funding-expired-at-start", RetryTransient},
	DenyBalanceExhausted:       {"balance_exhausted", "balance-exhausted", RetryNever},
	DenyBalanceInsufficient:    {"balance_insufficient", "balance-insufficient", RetryNever},
	DenyStorageFull:            {"storage_full", "storage-full", RetryTransient},
	DenyStorageFailed:          {"storage_failed", "storage-failed", RetryTransient},
}

// Label is the reason's stable snake_case name.
func (r DenyReason) Label() string { return reasons[r].label }

// Code is the reason's stable problem+json code.
func (r DenyReason) Code() string { return reasons[r].code }

// Retry is the reason's retry advice.
func (r DenyReason) Retry() Retry { return reasons[r].retry }

func (r DenyReason) String() string { return r.Label() }

// Scope names which level of an account hierarchy refused funding.
type Scope uint8

const (
	ScopeNone Scope = iota
	ScopeAgent
	ScopeWorkspace
	ScopeOrg
)

var scopeLabels = [...]string{"", "agent", "workspace", "org"}

func (s Scope) String() string { return scopeLabels[s] }

// Denial is the outcome of a refused stage. The zero Denial means "not
// refused". It is a plain value so a refusal allocates nothing.
type Denial struct {
	Reason DenyReason
	// Scope names the account level that refused funding, when known.
	Scope Scope
	// RetryAfter is how long until retrying can succeed, in nanoseconds, when
	// the engine knows it (rate and concurrency refusals); 0 when unknown.
	RetryAfter int64
	// Remaining is the evidenced upper bound on the account's funding for
	// DenyBalanceInsufficient, and the lease's units for DenyLeaseExhausted.
	Remaining CostUnits
	// ResetAt is, for a funding refusal (402), when rollovers alone can
	// fund the request again (Unix ns; FundingEvidence.ResetFor), 0 when
	// no reset will.
	ResetAt int64
}

// Denied reports whether d is a refusal.
func (d Denial) Denied() bool { return d.Reason != DenyNone }

func deny(r DenyReason) Denial { return Denial{Reason: r} }

// Denied reports whether r is a refusal (anything but DenyNone).
func (r DenyReason) Denied() bool { return r != DenyNone }
