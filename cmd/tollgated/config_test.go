package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSecretsFromFiles: the server secret and the admin token can come
// from files (flags or TOLLGATED_*_FILE), so they need not be on the
// command line; a file and a value at once is refused.
func TestSecretsFromFiles(t *testing.T) {
	dir := t.TempDir()
	secret := strings.Repeat("ab", 32)
	secretPath, tokenPath := filepath.Join(dir, "secret"), filepath.Join(dir, "token")
	os.WriteFile(secretPath, []byte("  "+secret+"\n"), 0o600)
	os.WriteFile(tokenPath, []byte("tga_from-a-file-0123456789\n"), 0o600)

	c, err := parseConfig([]string{"--secret-file", secretPath, "--admin-token-file", tokenPath}, noEnv, &bytes.Buffer{})
	if err != nil || c.secretHex != secret || c.adminToken != "tga_from-a-file-0123456789" || c.secretFile != secretPath {
		t.Fatalf("config %+v, %v", c, err)
	}
	env := map[string]string{"TOLLGATED_SECRET_FILE": secretPath, "TOLLGATED_ADMIN_TOKEN_FILE": tokenPath}
	c, err = parseConfig(nil, func(k string) string { return env[k] }, &bytes.Buffer{})
	if err != nil || c.secretHex != secret || c.adminToken != "tga_from-a-file-0123456789" {
		t.Fatalf("from the environment: %+v, %v", c, err)
	}

	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abcd\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	for _, args := range [][]string{
		{"--secret-file", secretPath, "--secret", secret},
		{"--admin-token-file", tokenPath, "--admin-token", "tga_another-one-0123456"},
		{"--secret-file", filepath.Join(dir, "missing")},
		{"--secret-file", short},
		{"--admin-token-file", empty},
	} {
		if _, err := parseConfig(args, noEnv, &bytes.Buffer{}); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

func TestHelpSaysSecretFlagsShowInPs(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--help"}, noEnv, &out, &bytes.Buffer{}, nil); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	help := out.String()
	for _, want := range []string{"-secret-file", "-admin-token-file", "shows in ps", "tollgated spool verify|quarantine"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	if n := strings.Count(help, "shows in ps"); n != 2 {
		t.Errorf("%d flags say they show in ps, want --secret and --admin-token", n)
	}
}

func TestUnknownEnvNamesEveryTypoOnce(t *testing.T) {
	c, err := parseConfig(nil, noEnv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	environ := []string{"PATH=/bin", "TOLLGATED_LISTEN=x", "TOLLGATED_LISTNE=y", "TOLLGATED_SECRET_FILE=z",
		"TOLLGATED_ADMIN_TOKEN=t", "TOLLGATED_HELP=1", "TOLLGATED_LISTNE=again", "TOLLGATED_=", "tollgated_listen=lower"}
	got := unknownEnv(environ, c.knownEnv)
	if want := []string{"TOLLGATED_", "TOLLGATED_HELP", "TOLLGATED_LISTNE"}; !slices.Equal(got, want) {
		t.Fatalf("unknown %v, want %v", got, want)
	}
}
