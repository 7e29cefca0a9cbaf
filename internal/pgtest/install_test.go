package pgtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeAPT is an apt-get that records its arguments and, on install,
// provides the binaries (or not), failing until an update when told to.
const fakeAPT = `#!/usr/bin/env bash
echo "$*" >> "$FAKE_APT_LOG"
case "$1" in
update) touch "$FAKE_APT_STATE/updated" ;;
install)
	if [[ -n ${FAKE_APT_NEEDS_UPDATE:-} && ! -e $FAKE_APT_STATE/updated ]]; then exit 100; fi
	if [[ -n ${FAKE_APT_PROVIDES:-} ]]; then
		mkdir -p "$TOLLGATED_POSTGRES_ROOT/15/bin"
		printf '#!/bin/sh\n' > "$TOLLGATED_POSTGRES_ROOT/15/bin/initdb"
		printf '#!/bin/sh\n' > "$TOLLGATED_POSTGRES_ROOT/15/bin/postgres"
		chmod +x "$TOLLGATED_POSTGRES_ROOT/15/bin/initdb" "$TOLLGATED_POSTGRES_ROOT/15/bin/postgres"
	fi ;;
esac
`

// TestInstallScript runs scripts/postgres.sh against a fake apt-get: it
// does nothing when the binaries are there, installs the package when they
// are not (updating the package lists only if the install fails), and
// fails loudly when the package brings no binaries.
func TestInstallScript(t *testing.T) {
	script, err := filepath.Abs("../../scripts/postgres.sh")
	if err != nil {
		t.Fatal(err)
	}
	const install = "install -y -q --no-install-recommends postgresql"
	for _, c := range []struct {
		name            string
		present, update bool
		provides        bool
		calls           []string
		fails           bool
	}{
		{name: "already installed", present: true},
		{name: "missing", provides: true, calls: []string{install}},
		{name: "stale package lists", provides: true, update: true, calls: []string{install, "update -q", install}},
		{name: "package without binaries", calls: []string{install}, fails: true},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			dir := t.TempDir()
			bin, root, state := filepath.Join(dir, "bin"), filepath.Join(dir, "root"), filepath.Join(dir, "state")
			for _, d := range []string{bin, root, state} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for name, body := range map[string]string{"apt-get": fakeAPT, "sudo": "#!/bin/sh\nexec \"$@\"\n"} {
				if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if c.present {
				os.MkdirAll(filepath.Join(root, "15", "bin"), 0o755)
				for _, b := range []string{"initdb", "postgres"} {
					os.WriteFile(filepath.Join(root, "15", "bin", b), []byte("#!/bin/sh\n"), 0o755)
				}
			}
			log := filepath.Join(dir, "apt.log")
			cmd := exec.Command("bash", script)
			cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "TOLLGATED_POSTGRES_ROOT="+root,
				"FAKE_APT_LOG="+log, "FAKE_APT_STATE="+state)
			if c.update {
				cmd.Env = append(cmd.Env, "FAKE_APT_NEEDS_UPDATE=1")
			}
			if c.provides {
				cmd.Env = append(cmd.Env, "FAKE_APT_PROVIDES=1")
			}
			out, err := cmd.CombinedOutput()
			if (err != nil) != c.fails {
				t.Fatalf("exit: %v (want failure: %v)\n%s", err, c.fails, out)
			}
			if !c.fails && len(out) > 0 {
				t.Fatalf("not quiet: %s", out)
			}
			if c.fails && !strings.Contains(string(out), "no initdb and postgres") {
				t.Fatalf("failure does not say why: %s", out)
			}
			b, _ := os.ReadFile(log)
			var calls []string
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if l != "" {
					calls = append(calls, l)
				}
			}
			if strings.Join(calls, "|") != strings.Join(c.calls, "|") {
				t.Fatalf("apt-get calls %q, want %q", calls, c.calls)
			}
		})
	}
}
