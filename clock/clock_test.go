package clock

import (
	"testing"
	"time"
)

func TestANilClockIsTheWallClock(t *testing.T) {
	var c *Clock
	before := time.Now().UnixNano()
	now := c.Now()
	if now < before || now > time.Now().UnixNano() {
		t.Fatalf("nil clock read %d, not between the wall clock's readings", now)
	}
	if c.Jumped() != nil || c.Offset() != 0 {
		t.Fatal("a nil clock jumps")
	}
}

func TestAdvanceMovesEveryReadingAndWakesSleepers(t *testing.T) {
	c := New()
	start := c.Now()
	woke := make(chan bool)
	go func() { woke <- c.Sleep(start+int64(time.Hour), nil) }()
	jumped := c.Jumped()
	c.Advance(time.Hour)
	select {
	case <-jumped:
	default:
		t.Fatal("Advance left Jumped open")
	}
	if !<-woke {
		t.Fatal("the sleeper did not report the time came")
	}
	if got := c.Now() - start; got < int64(time.Hour) {
		t.Fatalf("an hour later the clock moved %v", time.Duration(got))
	}
	if c.Offset() != time.Hour || c.Time().Sub(time.Now()) < 59*time.Minute {
		t.Fatalf("offset %v, Time %v ahead", c.Offset(), c.Time().Sub(time.Now()))
	}
}

func TestSleepEndsOnStop(t *testing.T) {
	c := New()
	stop := make(chan struct{})
	close(stop)
	if c.Sleep(c.Now()+int64(time.Hour), stop) {
		t.Fatal("Sleep reported the time came when stopped")
	}
	if !c.Sleep(c.Now()-1, stop) {
		t.Fatal("a deadline already past is not reached")
	}
}

func TestAdvanceRefusesToGoBack(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Advance(-1) did not panic")
		}
	}()
	New().Advance(-1)
}
