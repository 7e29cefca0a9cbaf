package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tollgated/tollgated/spool"
)

// TestEventArchiveFlags: the billed-event archive's bounds default to
// 1 GiB and 7 days, are read from flags and the environment like every
// other, and are refused out of range with the flag's name.
func TestEventArchiveFlags(t *testing.T) {
	c, err := parseConfig(nil, noEnv, &bytes.Buffer{})
	if err != nil || c.events != (eventArchive{maxBytes: 1 << 30, maxAge: 7 * 24 * time.Hour, segmentBytes: spool.DefaultSegmentBytes}) {
		t.Fatalf("defaults %+v, %v", c.events, err)
	}
	env := map[string]string{"TOLLGATED_EVENT_ARCHIVE_AGE": "36h", "TOLLGATED_EVENT_ARCHIVE_BYTES": "5000000"}
	c, err = parseConfig([]string{"--spool-segment-bytes", "65536"}, func(k string) string { return env[k] }, &bytes.Buffer{})
	if err != nil || c.events != (eventArchive{maxBytes: 5_000_000, maxAge: 36 * time.Hour, segmentBytes: 65536}) {
		t.Fatalf("from flags and the environment: %+v, %v", c.events, err)
	}
	for _, bad := range [][]string{
		{"--event-archive-bytes", "100"}, {"--event-archive-bytes", "-1"}, {"--event-archive-age", "30s"},
		{"--event-archive-age", "100000h"}, {"--spool-segment-bytes", "1024"}, {"--event-archive-age", "7d"},
	} {
		_, err := parseConfig(bad, noEnv, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), bad[0]) && !strings.Contains(err.Error(), strings.TrimPrefix(bad[0], "--")) {
			t.Errorf("%v: %v, want an error naming the flag", bad, err)
		}
	}
}
