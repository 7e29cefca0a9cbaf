package spool

import (
	"errors"
	"testing"
	"time"
)

func TestOptionsDefaults(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.SegmentBytes != DefaultSegmentBytes || o.FlushInterval != DefaultFlushInterval ||
		o.MaxBatchBytes != DefaultMaxBatchBytes || o.MaxPendingBytes != DefaultMaxPendingBytes ||
		o.GrowBytes != DefaultGrowBytes {
		t.Fatalf("defaults: %+v", o)
	}
	o, err = Options{FlushInterval: -1}.withDefaults()
	if err != nil || o.FlushInterval != 0 {
		t.Fatalf("negative FlushInterval: %v, %v", o.FlushInterval, err)
	}
	o, err = Options{GrowBytes: -5}.withDefaults()
	if err != nil || o.GrowBytes != -1 {
		t.Fatalf("negative GrowBytes: %v, %v", o.GrowBytes, err)
	}
}

func TestOptionsLimits(t *testing.T) {
	bad := []Options{
		{SegmentBytes: -1},
		{SegmentBytes: MaxSegmentBytes + 1},
		{FlushInterval: MaxFlushInterval + time.Nanosecond},
		{MaxPendingBytes: maxRecord - 1},
		{MaxPendingBytes: MaxPendingLimit + 1},
		{MaxBatchBytes: -1},
		{MaxPendingBytes: 1 << 20, MaxBatchBytes: 2 << 20},
		{GrowBytes: MaxGrowBytes + 1},
	}
	for _, o := range bad {
		if _, err := o.withDefaults(); !errors.Is(err, ErrOptions) {
			t.Errorf("%+v: err = %v, want ErrOptions", o, err)
		}
		if _, err := Open(t.TempDir(), o); !errors.Is(err, ErrOptions) {
			t.Errorf("Open(%+v): err = %v, want ErrOptions", o, err)
		}
	}
}
