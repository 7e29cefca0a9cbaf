package loadtest

import (
	"context"
	"net"
	"testing"
	"time"
)

func TestDeadTargetFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	res := mustRun(t, context.Background(), Options{URL: url, Connections: 2, Duration: 300 * time.Millisecond})
	if !res.Failed || res.TransportErrorsByClass[errConnect] == 0 || res.Throughput != nil {
		t.Fatalf("dead target: failed %v, errors %v", res.Failed, res.TransportErrorsByClass)
	}
}

func TestSlowServerTimesOut(t *testing.T) {
	f := newFakeServer(t)
	f.delayFor = func(n int64) time.Duration { return 5 * time.Second }
	f.serve()
	start := time.Now()
	res := mustRun(t, context.Background(), Options{
		URL: f.url, Connections: 2, Pipeline: 2,
		Duration: 300 * time.Millisecond, Timeout: 200 * time.Millisecond,
	})
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("run took %v; it must stop by itself", el)
	}
	if !res.Failed || res.TransportErrorsByClass[errTimeout] == 0 {
		t.Fatalf("failed %v, errors %v", res.Failed, res.TransportErrorsByClass)
	}
}
