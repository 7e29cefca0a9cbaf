package ledgertest_test

import (
	"cmp"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/internal/ledgertest"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/ledger/boltstore"
)

// broken wraps a working backend and gets one thing wrong, the way a
// plausible backend bug would.
type broken struct {
	ledger.Store
	bug string
	n   *int
}

func (b broken) Release(ctx context.Context, id, token uint64, unspent core.CostUnits, now int64) error {
	if b.bug == "release forfeits" {
		unspent = 0
	}
	if b.bug == "a forfeit is final" {
		all, err := b.Store.Leases(ctx, false)
		if err != nil {
			return err
		}
		for _, l := range all {
			if l.ID == id && l.State == ledger.LeaseReclaimed {
				return ledger.ErrLeaseNotActive
			}
		}
	}
	return b.Store.Release(ctx, id, token, unspent, now)
}

func (b broken) Deposit(ctx context.Context, id core.AccountID, units core.CostUnits, key string, now int64) (ledger.Account, bool, error) {
	if b.bug == "deposits not idempotent" {
		*b.n++
		key += strconv.Itoa(*b.n)
	}
	return b.Store.Deposit(ctx, id, units, key, now)
}

func (b broken) Acquire(ctx context.Context, id core.AccountID, holder string, want, need core.CostUnits, ttl, now int64) (ledger.Lease, ledger.Evidence, error) {
	if b.bug == "need ignored" {
		need = 0
	}
	return b.Store.Acquire(ctx, id, holder, want, need, ttl, now)
}

func (b broken) Ingest(ctx context.Context, events []ledger.Usage, now int64) ([]ledger.IngestResult, error) {
	res, err := b.Store.Ingest(ctx, events, now)
	if b.bug == "rejections forgotten" {
		for i := range res {
			if res[i] == ledger.Duplicate {
				res[i] = ledger.Rejected
			}
		}
	}
	return res, err
}

func (b broken) Rollover(ctx context.Context, now int64, limit int) (int, error) {
	if b.bug == "rollover ignores limit" {
		limit = 1 << 20
	}
	return b.Store.Rollover(ctx, now, limit)
}

func (b broken) ForgetEvents(ctx context.Context, before int64, limit int) (int, error) {
	if b.bug == "forgets by ingest time inclusive" {
		before++
	}
	return b.Store.ForgetEvents(ctx, before, limit)
}

func (b broken) ListAccounts(ctx context.Context, f ledger.AccountFilter, p ledger.Page) ([]ledger.Account, string, error) {
	if b.bug == "account cursor ignored" {
		p.After = ""
	}
	return b.Store.ListAccounts(ctx, f, p)
}

func (b broken) ExpireKeys(ctx context.Context, now int64, limit int) ([]ledger.Key, error) {
	if b.bug == "key expiry ignores limit" {
		limit = 1 << 20
	}
	return b.Store.ExpireKeys(ctx, now, limit)
}

func (b broken) RotateKey(ctx context.Context, account core.AccountID, oldID string, next ledger.Key, until int64) (ledger.Key, error) {
	if b.bug == "rotation extends the grace" {
		until += 1 << 40
	}
	return b.Store.RotateKey(ctx, account, oldID, next, until)
}

func (b broken) Settle(ctx context.Context, st ledger.Settlement, now int64) (ledger.SettleResult, error) {
	if b.bug == "settlement replays" {
		// Forgets the mark: every settlement applies as if new.
		st.Node += strconv.Itoa(*b.n)
		*b.n++
	}
	return b.Store.Settle(ctx, st, now)
}

func (b broken) Incarnate(ctx context.Context, node string, spool uint64, grace, now int64) (ledger.Incarnation, error) {
	if b.bug == "an empty data directory takes the incarnation over" && spool == 0 {
		all, err := b.Store.Incarnations(ctx)
		if err != nil {
			return ledger.Incarnation{}, err
		}
		for _, i := range all {
			if i.Node == node {
				spool = i.Number
			}
		}
	}
	return b.Store.Incarnate(ctx, node, spool, grace, now)
}

const bugEnv = "LEDGERTEST_BUG"

// TestBrokenBackend runs the suite against a broken backend; it is the
// child process of TestSuiteCatchesBrokenBackends.
func TestBrokenBackend(t *testing.T) {
	bug, ok := os.LookupEnv(bugEnv)
	if !ok {
		t.Skip("run by TestSuiteCatchesBrokenBackends")
	}
	ledgertest.Run(t, func(t *testing.T, dir string) ledger.Store {
		s, err := boltstore.Open(filepath.Join(dir, "ledger.db"), boltstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return broken{Store: s, bug: bug, n: new(int)}
	})
}

// TestSuiteCatchesBrokenBackends shows the suite can fail: against each
// broken backend, at least the tests that check what it gets wrong fail,
// while all of them pass against the unbroken backend ("").
func TestSuiteCatchesBrokenBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the suite in child processes")
	}
	tests := []string{"Release", "Budgets", "Deposits", "RestartKeepsEverything", "GrantPolicy", "IngestLeaseUsage", "Rollover", "ForgetEvents",
		"ListAccounts", "KeyExpiry", "KeyRotation", "Settle", "ReleaseRestoresAForfeitedLease", "Incarnations"}
	for _, c := range []struct {
		bug  string
		fail []string
	}{
		{"", nil},
		{"release forfeits", []string{"Release", "Budgets", "Rollover", "RestartKeepsEverything"}},
		{"deposits not idempotent", []string{"Deposits"}},
		{"need ignored", []string{"GrantPolicy", "Release"}},
		{"rejections forgotten", []string{"IngestLeaseUsage", "RestartKeepsEverything"}},
		{"rollover ignores limit", []string{"Rollover"}},
		{"forgets by ingest time inclusive", []string{"ForgetEvents"}},
		{"account cursor ignored", []string{"ListAccounts"}},
		{"key expiry ignores limit", []string{"KeyExpiry"}},
		{"rotation extends the grace", []string{"KeyRotation"}},
		{"settlement replays", []string{"Settle"}},
		{"a forfeit is final", []string{"ReleaseRestoresAForfeitedLease"}},
		{"an empty data directory takes the incarnation over", []string{"Incarnations"}},
	} {
		name := cmp.Or(c.bug, "unbroken")
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.v", "-test.run=^TestBrokenBackend$/^("+strings.Join(tests, "|")+")$")
			cmd.Env = append(os.Environ(), bugEnv+"="+c.bug)
			out, err := cmd.CombinedOutput()
			if (err != nil) != (len(c.fail) > 0) {
				t.Fatalf("suite against %q: err %v\n%s", c.bug, err, out)
			}
			for _, name := range tests {
				failed := strings.Contains(string(out), "--- FAIL: TestBrokenBackend/"+name+" ")
				passed := strings.Contains(string(out), "--- PASS: TestBrokenBackend/"+name+" ")
				if !failed && !passed {
					t.Errorf("%s did not run\n%s", name, out)
				}
				if c.bug == "" && failed {
					t.Errorf("%s failed against the unbroken backend\n%s", name, out)
				}
			}
			for _, name := range c.fail {
				if !strings.Contains(string(out), "--- FAIL: TestBrokenBackend/"+name+" ") {
					t.Errorf("%s passed against %q\n%s", name, c.bug, out)
				}
			}
		})
	}
}
