package main

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
)

var platformTokenColumns = []column{{"ID", "id"}, {"CREATED", "created_at"}, {"REVOKED", "revoked"}}
var adminTokenColumns = []column{{"ID", "id"}, {"NAME", "name"}, {"ROLE", "role"}, {"CREATED", "created_at"}, {"REVOKED", "revoked"}}

// tokenCommands are create, list and revoke for one kind of token at path.
func (a *app) tokenCommands(path, what string, cols []column, createBody func() any, createFlags func(*cobra.Command)) []*cobra.Command {
	create := &cobra.Command{
		Use:   "create",
		Short: "Create " + article(what) + " " + what + "; it is printed this once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := a.c.do(cmd.Context(), http.MethodPost, path, nil, createBody())
			if err != nil {
				return err
			}
			return a.printOne(raw, append([]column{{"token (shown once)", "token"}}, cols...))
		},
	}
	if createFlags != nil {
		createFlags(create)
	}
	var lf listFlags
	list := &cobra.Command{
		Use:   "list",
		Short: "List " + what + "s, oldest first (never a secret)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := a.c.list(cmd.Context(), path, nil, lf.limit, lf.cursor, lf.all)
			if err != nil {
				return err
			}
			return a.printPage(p, cols, lf.all)
		},
	}
	lf.register(list)
	revoke := &cobra.Command{
		Use:               "revoke ID",
		Short:             "Revoke a " + what,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeTokens(path),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := a.c.do(cmd.Context(), http.MethodDelete, path+"/"+url.PathEscape(args[0]), nil, nil)
			if err != nil {
				return err
			}
			return a.printOne(raw, cols)
		},
	}
	return []*cobra.Command{create, list, revoke}
}

func (a *app) platformTokensCommand() *cobra.Command {
	cmd := group("platform-tokens", "Tokens for agent runtimes calling /v1/admission and /v1/usage", "platform-token")
	cmd.AddCommand(a.tokenCommands("/v1/platform-tokens", "platform token", platformTokenColumns,
		func() any { return map[string]any{} }, nil)...)
	return cmd
}

// adminRoles are the roles an admin token may have, most powerful first
// (docs/API.md, "Roles").
var adminRoles = []string{"admin", "operator", "viewer", "metrics"}

func (a *app) adminTokensCommand() *cobra.Command {
	cmd := group("admin-tokens", "Named admin tokens with a role (the last live admin cannot be revoked)", "admin-token")
	var name, role string
	cmds := a.tokenCommands("/v1/admin-tokens", "admin token", adminTokenColumns,
		func() any { return map[string]any{"name": name, "role": role} },
		func(c *cobra.Command) {
			c.Flags().StringVar(&name, "name", "", "who or what uses the token (required)")
			c.MarkFlagRequired("name")
			c.Flags().StringVar(&role, "role", "admin", "what the token may do: "+strings.Join(adminRoles, ", ")+
				" (operator: accounts, budgets, deposits, keys; viewer: reads; metrics: /metrics only)")
			c.RegisterFlagCompletionFunc("role", cobra.FixedCompletions(adminRoles, cobra.ShellCompDirectiveNoFileComp))
			c.Example = `  tollgatectl admin-tokens create --name "ops on-call" --role operator
  tollgatectl admin-tokens create --name grafana --role viewer
  tollgatectl admin-tokens create --name prometheus --role metrics --json | jq -r .token > scrape-token`
		})
	cmd.AddCommand(cmds...)
	return cmd
}

// whoamiCommand shows the admin token in use: its id, name, role and
// permissions (GET /v1/whoami).
func (a *app) whoamiCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show the admin token in use: its id, name, role and what it may do",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := a.c.do(cmd.Context(), http.MethodGet, "/v1/whoami", nil, nil)
			if err != nil {
				return err
			}
			return a.printOne(raw, []column{{"id", "id"}, {"name", "name"}, {"role", "role"}, {"permissions", "permissions"}})
		},
	}
}

// article is "an" before a vowel sound, else "a".
func article(noun string) string {
	if noun != "" && strings.ContainsRune("aeiou", rune(noun[0])) {
		return "an"
	}
	return "a"
}
