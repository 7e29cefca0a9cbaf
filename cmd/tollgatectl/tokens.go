package main

import (
	"net/http"
	"net/url"

	"github.com/spf13/cobra"
)

var platformTokenColumns = []column{{"ID", "id"}, {"CREATED", "created_at"}, {"REVOKED", "revoked"}}
var adminTokenColumns = []column{{"ID", "id"}, {"NAME", "name"}, {"CREATED", "created_at"}, {"REVOKED", "revoked"}}

// tokenCommands are create, list and revoke for one kind of token at path.
func (a *app) tokenCommands(path, what string, cols []column, createBody func() any, createFlags func(*cobra.Command)) []*cobra.Command {
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a " + what + "; it is printed this once",
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
			return a.printPage(p, cols)
		},
	}
	lf.register(list)
	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a " + what,
		Args:  cobra.ExactArgs(1),
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

func (a *app) adminTokensCommand() *cobra.Command {
	cmd := group("admin-tokens", "Named admin tokens (the last live one cannot be revoked)", "admin-token")
	var name string
	cmd.AddCommand(a.tokenCommands("/v1/admin-tokens", "admin token", adminTokenColumns,
		func() any { return map[string]any{"name": name} },
		func(c *cobra.Command) {
			c.Flags().StringVar(&name, "name", "", "who or what uses the token (required)")
			c.MarkFlagRequired("name")
		})...)
	return cmd
}
