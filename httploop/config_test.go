//go:build linux

package httploop

import (
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxHeaderBytes != 8<<10 || c.MaxBodyBytes != 1<<20 || c.Tick != 100*time.Millisecond ||
		c.ReadBufferSize < c.MaxHeaderBytes || c.IdleTimeout == 0 || c.DeferTimeout == 0 {
		t.Fatalf("defaults %+v", c)
	}
	c, err = Config{MaxHeaderBytes: 64 << 10, ReadBufferSize: 4 << 10}.withDefaults()
	if err != nil || c.ReadBufferSize != 64<<10 {
		t.Fatalf("read buffer %d not raised to the header limit (%v)", c.ReadBufferSize, err)
	}
}

func TestConfigRejects(t *testing.T) {
	for name, c := range map[string]Config{
		"negative size":     {MaxBodyBytes: -1},
		"negative duration": {IdleTimeout: -time.Second},
		"tiny tick":         {Tick: time.Microsecond},
		"too many conns":    {MaxConns: maxSlots + 1},
		"OnWake alone":      {OnWake: func() {}},
	} {
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
