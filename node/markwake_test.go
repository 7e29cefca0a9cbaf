package node

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tollgated/tollgated/control"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger/boltstore"
	"github.com/tollgated/tollgated/spool"
)

// An idle shard parks a durable answer and goes to sleep; the plane's
// durable mark must wake it, not its next tick (100 ms).
func TestIdleShardIsWokenByItsDurableMark(t *testing.T) {
	dir := t.TempDir()
	store, err := boltstore.Open(filepath.Join(dir, "ledger.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tn := &testNode{store: store}
	var plane atomic.Pointer[control.Plane]
	sp, err := spool.Open(filepath.Join(dir, "spool"), spool.Options{OnDurable: func(uint64) {
		if p := plane.Load(); p != nil {
			p.Kick()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	tn.spool = sp
	exporter := control.NewExporter(sp, store, "test-node", 4096)
	n, err := Bind(Config{
		Listen: "127.0.0.1:0", CPUs: make([]int, 1), Secret: secret, MaxReservations: 4096, Durable: true,
		Plane: control.Config{Store: store, Spool: sp, Appended: sp.Stats().Appended, Holder: "test-node",
			IsFull: func(err error) bool { return errors.Is(err, spool.ErrFull) }},
		Log:        zerolog.Nop(),
		DrainUsage: func(time.Time) { sp.Sync(); exporter.Export(context.Background()) },
	})
	if err != nil {
		t.Fatal(err)
	}
	plane.Store(n.Plane())
	exporter.Floor = n.Plane().Floor
	tn.Node, tn.url = n, "http://"+n.Addr()
	tn.prov = control.NewProvisioner(n.Plane(), store)
	t.Cleanup(func() { n.Shutdown(time.Now().Add(2 * time.Second)); sp.Close(); store.Close() })
	if err := tn.Open(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	tn.provision(t, "acme", "key-acme", core.Limits{MaxItems: 100, HoldTimeout: 10e9}, 1_000_000)
	c := &http.Client{Timeout: 5 * time.Second}
	post(t, c, tn.url+"/v1/check", "key-acme", oneRequest) // funded
	var worst time.Duration
	for range 10 {
		time.Sleep(20 * time.Millisecond) // the shard goes to sleep
		start := time.Now()
		if st, body := post(t, c, tn.url+"/v1/check", "key-acme", oneRequest); st != 200 {
			t.Fatalf("check = %d %v", st, body)
		}
		worst = max(worst, time.Since(start))
	}
	t.Logf("worst durable check %v", worst)
	if worst > 60*time.Millisecond {
		t.Fatalf("a durable answer waited %v: the mark did not wake the shard", worst)
	}
}
