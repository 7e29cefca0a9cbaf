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
	jumped := c.Jumped()
	woke := make(chan int64)
	go func() { <-jumped; woke <- c.Now() }()
	c.Advance(time.Hour)
	if at := <-woke; at-start < int64(time.Hour) {
		t.Fatalf("the sleeper woke to a clock %v later, not an hour", time.Duration(at-start))
	}
	if c.Jumped() == jumped {
		t.Fatal("the next jump would find Jumped already closed")
	}
	if c.Offset() != time.Hour || c.Time().Sub(time.Now()) < 59*time.Minute {
		t.Fatalf("offset %v, Time %v ahead", c.Offset(), c.Time().Sub(time.Now()))
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
