package daemon

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/policy"
)

// demoPolicy prices the quickstart's workloads with no rate limits.
const demoPolicy = `{"permissions":["chat"],
 "operations":{"input_tokens":{"weight":1},"output_tokens":{"weight":4},"requests":{"weight":10}},
 "limits":{"max_items":1048576,"hold_timeout_ms":60000}}`

// provisionDemo makes account "demo" in the ledger, funded once with units
// (idempotently: restarts do not fund it again), with key as an API key.
// It is for trying tollgated and for benchmarks; real accounts come from
// the admin API.
func provisionDemo(ctx context.Context, store ledger.Store, h *credential.Hasher, key string, units core.CostUnits, now int64) error {
	acct, _, err := store.CreateAccount(ctx, ledger.AccountSpec{ID: "demo"}, now)
	if err != nil {
		return fmt.Errorf("demo account: %w", err)
	}
	doc, err := policy.Parse([]byte(demoPolicy))
	if err != nil {
		return err
	}
	if _, err := store.SetPolicy(ctx, acct.ID, policy.Canonical(doc)); err != nil {
		return err
	}
	if _, _, err := store.Deposit(ctx, acct.ID, units, "demo-initial", now); err != nil && !errors.Is(err, ledger.ErrConflict) {
		return err
	}
	d, err := h.Digest([]byte(key))
	if err != nil {
		return err
	}
	// The key id is derived from the key, so a restart with the same key
	// finds it, and a different key is a second key rather than a clash.
	k := ledger.Key{ID: "demo-" + hex.EncodeToString(d[:4]), Account: acct.ID, Digest: d, CreatedAt: now}
	if err := store.AddKey(ctx, k); err != nil && !errors.Is(err, ledger.ErrConflict) {
		return err
	}
	return nil
}
