// Package ledgertest is the conformance suite every ledger.Store backend
// passes: Run it from the backend's tests with a function that opens the
// backend on a directory.
//
// Each test starts from an empty store and checks exact numbers — every
// money term of every account it touches, every lease field, every ingest
// verdict — so a backend that differs from the rules in package ledger in
// any unit fails. Every test ends with Store.Check. Tests run in parallel,
// each on its own directory; some restart the store (close, then open the
// same directory again) to check that acknowledged changes are durable.
//
// What the suite requires beyond the ledger.Store comments: Accounts,
// Leases, Keys, PlatformTokens and AdminTokens list in id order; Close may be called
// once per opened store (Run never uses a store after closing it).
package ledgertest

import (
	"testing"

	"github.com/tollgated/tollgated/ledger"
)

// cases is the suite, in the order it reads best.
var cases = []struct {
	name string
	run  func(h *harness)
}{
	{"Hierarchy", testHierarchy},
	{"StatusAndPolicy", testStatusAndPolicy},
	{"Budgets", testBudgets},
	{"Rollover", testRollover},
	{"RolloverIsLazyAtGrant", testRolloverIsLazyAtGrant},
	{"ConcurrentRolloverOnce", testConcurrentRolloverOnce},
	{"Deposits", testDeposits},
	{"GrantPolicy", testGrantPolicy},
	{"FundingChain", testFundingChain},
	{"Refusals", testRefusals},
	{"Release", testRelease},
	{"Extend", testExtend},
	{"Debt", testDebt},
	{"Settle", testSettle},
	{"Reclaim", testReclaim},
	{"ReclaimKeepsEachLeasesGrace", testReclaimKeepsEachLeasesGrace},
	{"ReleaseRestoresAForfeitedLease", testReleaseRestoresAForfeitedLease},
	{"Incarnations", testIncarnations},
	{"ConcurrentGrants", testConcurrentGrants},
	{"IngestLeaseUsage", testIngestLeaseUsage},
	{"LateUsage", testLateUsage},
	{"OverageAndPostPaid", testOverageAndPostPaid},
	{"IngestIsAllOrNothing", testIngestIsAllOrNothing},
	{"Keys", testKeys},
	{"PlatformTokens", testPlatformTokens},
	{"AdminDigestAndAudit", testAdminDigestAndAudit},
	{"SecretFingerprint", testSecretFingerprint},
	{"RestartKeepsEverything", testRestartKeepsEverything},
	{"ForgetEvents", testForgetEvents},
	{"Children", testChildren},
	{"ListAccounts", testListAccounts},
	{"ListLeases", testListLeases},
	{"ListUsage", testListUsage},
	{"KeyExpiry", testKeyExpiry},
	{"KeyRotation", testKeyRotation},
	{"KeyLastUsed", testKeyLastUsed},
	{"AdminTokens", testAdminTokens},
	{"AdminTokenRoles", testAdminTokenRoles},
	{"RandomSequences", testRandomSequences},
}

// Run runs the conformance suite against the backend open opens. open is
// called with a fresh directory per test, and again with the same
// directory after the suite closed the previous store, to simulate a
// restart.
func Run(t *testing.T, open func(t *testing.T, dir string) ledger.Store) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, open)
			c.run(h)
			h.check()
		})
	}
}
