package node

import (
	"net/http"
	"testing"
	"time"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/httploop"
)

// An idle shard parks a durable answer and goes to sleep; the plane's
// durable mark must wake it, not its next tick. The shard's ticks are set
// a minute apart, beyond the client's patience: every answer arrives only
// because the mark woke the shard.
func TestIdleShardIsWokenByItsDurableMark(t *testing.T) {
	tn := bindNodeLoop(t, 1, true, httploop.Config{Tick: time.Minute, IdleTick: time.Minute})
	if err := tn.Open(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	tn.provision(t, "acme", "key-acme", core.Limits{MaxItems: 100, HoldTimeout: 10e9}, 1_000_000)
	c := &http.Client{Timeout: 5 * time.Second}
	post(t, c, tn.url+"/v1/check", "key-acme", oneRequest) // funded
	for range 10 {
		time.Sleep(20 * time.Millisecond) // the shard goes to sleep
		if st, body := post(t, c, tn.url+"/v1/check", "key-acme", oneRequest); st != 200 {
			t.Fatalf("check = %d %v", st, body)
		}
	}
}
