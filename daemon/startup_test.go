//go:build linux

package daemon

import (
	"os"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestExposureWarnings(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9091": true, "[::1]:9091": true, "localhost:9091": true, "127.9.9.9:1": true,
		":9091": false, "0.0.0.0:9091": false, "[::]:9091": false, "10.1.2.3:9091": false, "nonsense": false,
	} {
		if got := loopbackOnly(addr); got != want {
			t.Errorf("loopbackOnly(%q) = %v", addr, got)
		}
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	warnAboutExposure(Config{Admin: "0.0.0.0:9091", DataDir: dir}, zerolog.New(&out))
	logs := out.String()
	if !strings.Contains(logs, "admin API listens beyond loopback") || !strings.Contains(logs, "writable by group or others") ||
		!strings.Contains(logs, `"mode":"0777"`) {
		t.Fatalf("warnings:\n%s", logs)
	}
	os.Chmod(dir, 0o700)
	var quiet syncBuffer
	warnAboutExposure(Config{Admin: "127.0.0.1:9091", DataDir: dir}, zerolog.New(&quiet))
	if quiet.String() != "" {
		t.Fatalf("warnings for a safe set-up: %s", quiet.String())
	}
}
