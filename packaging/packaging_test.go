// Package packaging holds the files that install tollgated: the container
// image's Dockerfile, the systemd unit and its environment file, and the
// Kubernetes manifests. Its tests check them without the tools that use
// them (docker cannot build on the test machines; no cluster is at hand):
// the Dockerfile's instructions, systemd-analyze verify on the unit when
// it is installed, and the manifests' structure.
package packaging_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tollgated/tollgated/internal/daemontest"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct{ op, args string }

func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []instruction
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cur.WriteString(line)
		op, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(op), strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

// TestDockerfileBuildsAStaticNonRootImage checks the Dockerfile's shape,
// since docker cannot build here: a build stage compiling without cgo, a
// final stage from another base that copies the binaries from it, runs as
// a non-root user, keeps the data directory in a volume, and checks its
// health on the admin API's /healthz.
func TestDockerfileBuildsAStaticNonRootImage(t *testing.T) {
	ins := parseDockerfile(t, "Dockerfile")
	var stages [][]instruction
	for _, in := range ins {
		if in.op == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			t.Fatalf("%s before any FROM", in.op)
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a run stage", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]
	buildName := strings.Fields(build[0].args)
	if len(buildName) != 3 || !strings.EqualFold(buildName[1], "AS") || !strings.HasPrefix(buildName[0], "golang:1.26") {
		t.Fatalf("build stage %q: want FROM golang:1.26… AS name", build[0].args)
	}
	find := func(stage []instruction, op string) []string {
		var args []string
		for _, in := range stage {
			if in.op == op {
				args = append(args, in.args)
			}
		}
		return args
	}
	runs := strings.Join(find(build, "RUN"), "\n")
	for _, want := range []string{"CGO_ENABLED=0 go build", "./cmd/tollgated", "./cmd/tollgatectl"} {
		if !strings.Contains(runs, want) {
			t.Errorf("the build stage does not run %q", want)
		}
	}
	if strings.Contains(final[0].args, "golang") {
		t.Errorf("the final stage is based on the toolchain: %q", final[0].args)
	}
	if copies := strings.Join(find(final, "COPY"), "\n"); !strings.Contains(copies, "--from="+buildName[2]+" /out/tollgated") {
		t.Errorf("the final stage does not copy the binary from the build stage: %q", copies)
	}
	users := find(final, "USER")
	if len(users) != 1 || strings.HasPrefix(users[0], "root") || strings.HasPrefix(users[0], "0") {
		t.Errorf("USER %q: want one non-root user", users)
	}
	env := strings.Join(find(final, "ENV"), " ")
	volumes := strings.Join(find(final, "VOLUME"), " ")
	if !strings.Contains(env, "TOLLGATED_DATA_DIR=/var/lib/tollgated") || !strings.Contains(volumes, "/var/lib/tollgated") {
		t.Errorf("the data directory is not a volume: ENV %q VOLUME %q", env, volumes)
	}
	health := find(final, "HEALTHCHECK")
	if len(health) != 1 || !strings.Contains(health[0], "tollgatectl") || !strings.Contains(health[0], `"health"`) || !strings.Contains(health[0], ":9091") {
		t.Errorf("HEALTHCHECK %q: want tollgatectl health against the admin API", health)
	}
	if ep := find(final, "ENTRYPOINT"); len(ep) != 1 || !strings.Contains(ep[0], "/usr/local/bin/tollgated") {
		t.Errorf("ENTRYPOINT %q", ep)
	}
	if exp := strings.Join(find(final, "EXPOSE"), " "); !strings.Contains(exp, "8080") || !strings.Contains(exp, "9091") {
		t.Errorf("EXPOSE %q", exp)
	}
}

// unitSettings reads a systemd unit's "Key=value" lines (the last of each
// key, and every value of repeatable ones, by key).
func unitSettings(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: not a setting: %q", path, line)
		}
		out[k] = append(out[k], v)
	}
	return out
}

// TestSystemdUnitIsHardened: the unit runs as a dynamic user with its
// state directory, in systemd's sandbox, with no capability, and takes its
// secrets as credentials named by the example environment file.
func TestSystemdUnitIsHardened(t *testing.T) {
	u := unitSettings(t, "systemd/tollgated.service")
	for key, want := range map[string]string{
		"DynamicUser": "yes", "StateDirectory": "tollgated", "ProtectSystem": "strict", "NoNewPrivileges": "yes",
		"PrivateTmp": "yes", "ProtectHome": "yes", "PrivateDevices": "yes", "CapabilityBoundingSet": "",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX", "ProtectKernelTunables": "yes",
		"ProtectControlGroups": "yes", "RestrictNamespaces": "yes", "MemoryDenyWriteExecute": "yes",
		"SystemCallArchitectures": "native", "KillSignal": "SIGTERM", "Environment": "TOLLGATED_DATA_DIR=/var/lib/tollgated",
		"EnvironmentFile": "/etc/tollgated/tollgated.env",
	} {
		if got := u[key]; len(got) == 0 || got[len(got)-1] != want {
			t.Errorf("%s=%q, want %q", key, got, want)
		}
	}
	creds := strings.Join(u["LoadCredential"], " ")
	env := unitSettings(t, "systemd/tollgated.env")
	for name, variable := range map[string]string{"admin-token": "TOLLGATED_ADMIN_TOKEN_FILE", "secret": "TOLLGATED_SECRET_FILE"} {
		if !strings.Contains(creds, name+":/etc/tollgated/") {
			t.Errorf("no credential %s in %q", name, creds)
		}
		if got := env[variable]; len(got) != 1 || got[0] != "/run/credentials/tollgated.service/"+name {
			t.Errorf("%s=%q in the environment file", variable, got)
		}
	}
	for k := range env {
		if strings.HasPrefix(k, "TOLLGATED_") && (strings.Contains(k, "TOKEN") || strings.Contains(k, "SECRET")) && !strings.HasSuffix(k, "_FILE") {
			t.Errorf("the environment file sets the secret %s as a value", k)
		}
	}
}

// TestSystemdAnalyzeVerifiesTheUnit runs systemd-analyze verify on the
// unit, its ExecStart pointed at a freshly built tollgated; any complaint
// fails the test (verify exits 0 on some of them). Skipped where
// systemd-analyze is not installed.
func TestSystemdAnalyzeVerifiesTheUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian: apt-get install systemd); the unit's settings are checked by TestSystemdUnitIsHardened")
	}
	bin := filepath.Join(daemontest.Build(t), "tollgated")
	unit, err := os.ReadFile("systemd/tollgated.service")
	if err != nil {
		t.Fatal(err)
	}
	unit = bytes.Replace(unit, []byte("ExecStart=/usr/local/bin/tollgated"), []byte("ExecStart="+bin), 1)
	path := filepath.Join(t.TempDir(), "tollgated.service")
	if err := os.WriteFile(path, unit, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// manifests decodes every YAML document of path.
func manifests(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
}

// at walks a decoded document along keys (strings) and indexes (ints).
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not a mapping at %q", path, k)
			}
			if v, ok = m[k]; !ok {
				t.Fatalf("%v: no key %q", path, k)
			}
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("%v: no item %d", path, k)
			}
			v = l[k]
		}
	}
	return v
}

// checkStatefulSet checks what both manifests' StatefulSets need: a data
// volume per pod mounted at the data directory, the three probes, the
// secrets as files, a stable node id from the pod's name, a non-root pod.
func checkStatefulSet(t *testing.T, docs []map[string]any) (env map[string]any) {
	t.Helper()
	kinds := map[string]map[string]any{}
	for _, d := range docs {
		if d["apiVersion"] == nil || d["kind"] == nil || at(t, d, "metadata", "name") == "" {
			t.Fatalf("a document without apiVersion, kind or name: %v", d)
		}
		kinds[d["kind"].(string)] = d
	}
	for _, k := range []string{"StatefulSet", "Service"} {
		if kinds[k] == nil {
			t.Fatalf("no %s", k)
		}
	}
	ss := kinds["StatefulSet"]
	if at(t, ss, "apiVersion") != "apps/v1" || at(t, ss, "spec", "serviceName") == "" {
		t.Fatal("StatefulSet: apiVersion or serviceName")
	}
	c := at(t, ss, "spec", "template", "spec", "containers", 0)
	for probe, want := range map[string][2]string{
		"livenessProbe": {"/livez", "data"}, "readinessProbe": {"/readyz", "data"}, "startupProbe": {"/healthz", "admin"},
	} {
		if at(t, c, probe, "httpGet", "path") != want[0] || at(t, c, probe, "httpGet", "port") != want[1] {
			t.Errorf("%s: want %s on %s", probe, want[0], want[1])
		}
	}
	if at(t, ss, "spec", "volumeClaimTemplates", 0, "metadata", "name") != "data" {
		t.Error("no data volume claim template")
	}
	mounts := map[string]string{}
	for _, m := range at(t, c, "volumeMounts").([]any) {
		mounts[at(t, m, "name").(string)] = at(t, m, "mountPath").(string)
	}
	env = map[string]any{}
	for _, e := range at(t, c, "env").([]any) {
		m := e.(map[string]any)
		if v, ok := m["value"]; ok {
			env[m["name"].(string)] = v
		} else {
			env[m["name"].(string)] = m["valueFrom"]
		}
	}
	if mounts["data"] != env["TOLLGATED_DATA_DIR"] {
		t.Errorf("data volume at %q, data directory %q", mounts["data"], env["TOLLGATED_DATA_DIR"])
	}
	for _, v := range []string{"TOLLGATED_ADMIN_TOKEN_FILE", "TOLLGATED_SECRET_FILE"} {
		if p, _ := env[v].(string); !strings.HasPrefix(p, mounts["secrets"]+"/") {
			t.Errorf("%s=%v is not in the secrets volume (%s)", v, env[v], mounts["secrets"])
		}
	}
	if at(t, env["TOLLGATED_NODE_ID"], "fieldRef", "fieldPath") != "metadata.name" {
		t.Error("the node id is not the pod's name")
	}
	if at(t, ss, "spec", "template", "spec", "securityContext", "runAsNonRoot") != true ||
		at(t, c, "securityContext", "allowPrivilegeEscalation") != false {
		t.Error("the pod may run as root or escalate")
	}
	ports := []string{}
	for _, d := range docs {
		if d["kind"] == "Service" {
			for _, p := range at(t, d, "spec", "ports").([]any) {
				ports = append(ports, at(t, p, "name").(string))
			}
		}
	}
	if !slices.Contains(ports, "data") || !slices.Contains(ports, "admin") {
		t.Errorf("services expose %v, want data and admin", ports)
	}
	return env
}

// secretsComeFromOutside: the manifest holds no Secret, so applying it
// never replaces one an operator made (with real values) by placeholders;
// the StatefulSet reads the Secret its header tells the operator to create
// with kubectl create secret, every key it reads among those the command
// sets, and the command sets no placeholder a person would have to edit.
func secretsComeFromOutside(t *testing.T, path string, docs []map[string]any) {
	t.Helper()
	for _, d := range docs {
		if d["kind"] == "Secret" {
			t.Fatalf("%s holds a Secret: applying it would overwrite the real one", path)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var header []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "#") {
			break
		}
		header = append(header, strings.TrimSpace(strings.TrimPrefix(l, "#")))
	}
	command := strings.ReplaceAll(strings.Join(header, " "), "\\ ", "")
	create := regexp.MustCompile(`kubectl -n tollgated create secret generic (\S+) (.*?)kubectl`).FindStringSubmatch(command)
	if create == nil {
		t.Fatalf("%s's header does not say how to create the Secret:\n%s", path, strings.Join(header, "\n"))
	}
	set := map[string]bool{} // the keys the command sets
	for _, m := range regexp.MustCompile(`--from-literal=([a-z-]+)=`).FindAllStringSubmatch(create[2], -1) {
		set[m[1]] = true
	}
	if strings.Contains(command, "replace-me") {
		t.Errorf("%s still tells the operator to replace placeholders", path)
	}
	if !strings.Contains(command, "apply -f "+strings.TrimPrefix(path, "./")) && !strings.Contains(command, "apply -f packaging/"+path) {
		t.Errorf("%s's header does not apply the file after creating the Secret", path)
	}
	for _, d := range docs {
		if d["kind"] != "StatefulSet" {
			continue
		}
		spec := at(t, d, "spec", "template", "spec")
		for _, v := range at(t, spec, "volumes").([]any) {
			s, ok := v.(map[string]any)["secret"].(map[string]any)
			if !ok {
				continue
			}
			if s["secretName"] != create[1] || s["optional"] == true {
				t.Errorf("volume reads Secret %v (optional %v), the header creates %s", s["secretName"], s["optional"], create[1])
			}
			items, _ := s["items"].([]any)
			for _, it := range items {
				if key := it.(map[string]any)["key"].(string); !set[key] {
					t.Errorf("the volume reads key %s, which the header's command does not set", key)
				}
			}
		}
		for _, e := range at(t, spec, "containers", 0, "env").([]any) {
			from, _ := e.(map[string]any)["valueFrom"].(map[string]any)
			if ref, ok := from["secretKeyRef"].(map[string]any); ok {
				if ref["name"] != create[1] || !set[ref["key"].(string)] {
					t.Errorf("env reads %v, which the header's command does not create", ref)
				}
			}
		}
	}
}

func TestKubernetesSingleNode(t *testing.T) {
	docs := manifests(t, "kubernetes/single-node/tollgated.yaml")
	checkStatefulSet(t, docs)
	secretsComeFromOutside(t, "kubernetes/single-node/tollgated.yaml", docs)
	for _, d := range docs {
		if d["kind"] == "StatefulSet" && at(t, d, "spec", "replicas") != 1 {
			t.Error("a single node's StatefulSet must have one replica: its ledger is its own")
		}
	}
}

func TestKubernetesFleetOnPostgreSQL(t *testing.T) {
	docs := manifests(t, "kubernetes/fleet/tollgated-fleet.yaml")
	env := checkStatefulSet(t, docs)
	secretsComeFromOutside(t, "kubernetes/fleet/tollgated-fleet.yaml", docs)
	if at(t, env["TOLLGATED_LEDGER"], "secretKeyRef", "key") != "ledger-url" {
		t.Error("the fleet's ledger URL is not read from the Secret")
	}
	for _, d := range docs {
		if d["kind"] == "StatefulSet" {
			if n, _ := at(t, d, "spec", "replicas").(int); n < 2 {
				t.Errorf("a fleet of %d", n)
			}
		}
	}
}

// dockerignore reads the repository's .dockerignore: its patterns, in
// order, comments and blank lines left out.
func dockerignore(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatalf("no .dockerignore: docker build sends the whole repository, data directories and secrets included: %v", err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// ignoredByDocker reports whether docker leaves p (slash-separated,
// relative to the context) out of the build context under patterns, as its
// pattern matcher does: the last pattern that matches p or one of its
// parent directories decides, a "!" pattern bringing it back; "**" matches
// any number of directories, other segments as path.Match does.
func ignoredByDocker(patterns []string, p string) bool {
	ignored := false
	for _, raw := range patterns {
		pat, keep := strings.CutPrefix(raw, "!")
		pat = path.Clean(strings.TrimPrefix(pat, "/"))
		segs := strings.Split(p, "/")
		for n := 1; n <= len(segs); n++ {
			if matchSegments(strings.Split(pat, "/"), segs[:n]) {
				ignored = !keep
				break
			}
		}
	}
	return ignored
}

func matchSegments(pat, segs []string) bool {
	if len(pat) == 0 {
		return len(segs) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(segs); i++ {
			if matchSegments(pat[1:], segs[i:]) {
				return true
			}
		}
		return false
	}
	if len(segs) == 0 {
		return false
	}
	ok, err := path.Match(pat[0], segs[0])
	return err == nil && ok && matchSegments(pat[1:], segs[1:])
}

// TestDockerignoreSendsSourcesOnly: the image's build context leaves out
// data directories (wherever they are: the ledger, the usage spool, the
// server secret), the compose fleet's secret files, keys, and build and
// test outputs, and keeps every file the repository tracks, so the build
// (COPY . .) has all it needs.
func TestDockerignoreSendsSourcesOnly(t *testing.T) {
	patterns := dockerignore(t)
	for _, p := range []string{
		"tollgated-data/ledger.db", "tollgated-data/secret", "tollgated-data/spool/00000001.seg", "tollgated-data/node-id",
		"quickstart-data/secret", "quickstart-data/ledger.db", "cmd/tollgated/tollgated-data/ledger.db",
		"somewhere/else/ledger.db", "packaging/compose/secrets/admin-token", "packaging/compose/secrets/ledger-url",
		"tls/server.key", "tls/server.pem", ".env", "bin/tollgated", "artifacts/dashboard-live.png",
		"cmd/tollgated/tollgated.test", "cpu.prof", "tollgated", "tollgatectl", ".git/config",
	} {
		if !ignoredByDocker(patterns, p) {
			t.Errorf("%s would be sent to docker build", p)
		}
	}
	out, err := exec.Command("git", "-C", "..", "ls-files").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (the tracked files are checked where git is)", err)
	}
	files := strings.Fields(string(out))
	if len(files) < 100 || !slices.Contains(files, "go.mod") {
		t.Fatalf("git ls-files listed %d files", len(files))
	}
	for _, f := range files {
		if ignoredByDocker(patterns, f) {
			t.Errorf("%s is tracked (the build may need it) but left out of the build context", f)
		}
	}
	for _, in := range parseDockerfile(t, "Dockerfile") {
		if in.op == "COPY" && strings.HasPrefix(in.args, ". ") && !slices.Contains(patterns, "**/tollgated-data") {
			t.Error("COPY . . without leaving the data directories out")
		}
	}
}

// TestIgnoredByDockerMatchesDockersRules pins the matcher the test above
// relies on to docker's documented examples.
func TestIgnoredByDockerMatchesDockersRules(t *testing.T) {
	for _, c := range []struct {
		patterns []string
		path     string
		want     bool
	}{
		{[]string{"*/temp*"}, "somedir/temporary.txt", true},
		{[]string{"*/temp*"}, "temporary.txt", false},
		{[]string{"*/*/temp*"}, "somedir/subdir/temporary.txt", true},
		{[]string{"temp?"}, "tempa", true},
		{[]string{"**/*.go"}, "a/b/c.go", true},
		{[]string{"**/*.go"}, "c.go", true},
		{[]string{"*.md", "!README*.md"}, "README-secret.md", false},
		{[]string{"*.md", "!README*.md", "README-secret.md"}, "README-secret.md", true},
		{[]string{"bin"}, "bin/x/y", true},
		{[]string{"/tollgated"}, "cmd/tollgated/main.go", false},
	} {
		if got := ignoredByDocker(c.patterns, c.path); got != c.want {
			t.Errorf("%q on %s: %v, want %v", c.patterns, c.path, got, c.want)
		}
	}
}
