package node

import (
	"net/http"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
)

// An idle shard parks a durable answer and goes to sleep; the plane's
// durable mark must wake it, not its next tick (100 ms).
func TestIdleShardIsWokenByItsDurableMark(t *testing.T) {
	tn := bindNodeAck(t, 1, true)
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
