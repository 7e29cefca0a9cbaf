package main

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/spf13/cobra"
)

var keyColumns = []column{
	{"ID", "id"}, {"NAME", "name"}, {"CREATED", "created_at"}, {"EXPIRES", "expires_at"},
	{"LAST USED", "last_used"}, {"REVOKED", "revoked"},
}

// newKeyFields are a created key's: the secret is shown this once.
var newKeyFields = slices.Concat([]column{{"key (shown once)", "key"}, {"account", "account"}}, keyColumns)

func (a *app) keysCommand() *cobra.Command {
	cmd := group("keys", "Create, list, revoke and rotate an account's API keys", "key")
	cmd.AddCommand(a.keyCreate(), a.keyList(), a.keyRevoke(), a.keyRotate())
	return cmd
}

// expiry reads an --expires-at flag: an RFC 3339 time, or a duration from
// now ("720h").
func expiry(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t.UTC().Format(time.RFC3339), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return time.Now().Add(d).UTC().Format(time.RFC3339), nil
	}
	return "", usageError{fmt.Errorf("--expires-at %q: want an RFC 3339 time (2026-12-31T00:00:00Z) or a duration (720h)", v)}
}

func (a *app) keyCreate() *cobra.Command {
	var name, expires string
	cmd := &cobra.Command{
		Use:   "create ACCOUNT",
		Short: "Create an API key; its secret is printed this once",
		Example: `  tollgatectl keys create acme --name "ci runner" --expires-at 720h
  KEY=$(tollgatectl keys create acme --json | jq -r .key)`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeAccounts,
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{}
			if name != "" {
				body["name"] = name
			}
			at, err := expiry(expires)
			if err != nil {
				return err
			}
			if at != "" {
				body["expires_at"] = at
			}
			raw, err := a.c.do(cmd.Context(), http.MethodPost, accountPath(args[0], "/keys"), nil, body)
			if err != nil {
				return err
			}
			return a.printOne(raw, newKeyFields)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a label for the key")
	cmd.Flags().StringVar(&expires, "expires-at", "", "when the key stops: an RFC 3339 time or a duration from now")
	return cmd
}

func (a *app) keyList() *cobra.Command {
	var lf listFlags
	cmd := &cobra.Command{
		Use:               "list ACCOUNT",
		Short:             "List an account's keys, oldest first (never a secret)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeAccounts,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.c.list(cmd.Context(), accountPath(args[0], "/keys"), nil, lf.limit, lf.cursor, lf.all)
			if err != nil {
				return err
			}
			return a.printPage(p, keyColumns, lf.all)
		},
	}
	lf.register(cmd)
	return cmd
}

func (a *app) keyRevoke() *cobra.Command {
	return &cobra.Command{
		Use:               "revoke ACCOUNT KEY_ID",
		Short:             "Revoke a key: every shard stops it at once",
		Example:           `  tollgatectl keys revoke acme key_5f0c…`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.completeAccountThenKey,
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := a.c.do(cmd.Context(), http.MethodDelete, accountPath(args[0], "/keys/", url.PathEscape(args[1])), nil, nil)
			if err != nil {
				return err
			}
			return a.printOne(raw, keyColumns)
		},
	}
}

func (a *app) keyRotate() *cobra.Command {
	var name, expires string
	var grace time.Duration
	cmd := &cobra.Command{
		Use:               "rotate ACCOUNT KEY_ID",
		Short:             "Make a new key; the old one keeps working for --grace, then stops",
		Example:           `  tollgatectl keys rotate acme key_5f0c… --grace 24h`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.completeAccountThenKey,
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{}
			if cmd.Flags().Changed("grace") {
				if grace < 0 || grace%time.Second != 0 {
					return usageError{fmt.Errorf("--grace %v: want whole seconds, 0 or more", grace)}
				}
				body["grace_seconds"] = int64(grace / time.Second)
			}
			if name != "" {
				body["name"] = name
			}
			at, err := expiry(expires)
			if err != nil {
				return err
			}
			if at != "" {
				body["expires_at"] = at
			}
			raw, err := a.c.do(cmd.Context(), http.MethodPost, accountPath(args[0], "/keys/", url.PathEscape(args[1]), "/rotate"), nil, body)
			if err != nil {
				return err
			}
			return a.printOne(raw, slices.Concat(newKeyFields, []column{{"old key", "rotated.id"}, {"old key stops", "rotated.expires_at"}}))
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", 24*time.Hour, "how long the old key keeps working (0: stop it now; at most 720h)")
	cmd.Flags().StringVar(&name, "name", "", "the new key's label (default: the old key's)")
	cmd.Flags().StringVar(&expires, "expires-at", "", "when the new key stops: an RFC 3339 time or a duration from now (default: never; the old key's expiry is not carried over)")
	return cmd
}
