package main

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Shell completion of ids: account ids where a command takes an account,
// then an account's key ids, and admin and platform token ids, read from
// the admin API with the same address and token as the command itself.
// Completion must never hang a shell or print an error into it: each
// lookup has completionTimeout, reads at most completionItems ids, and
// offers nothing when it fails.
const (
	completionTimeout = 3 * time.Second
	completionItems   = 1000
)

// idsFrom lists path and returns the ids that start with prefix.
func (a *app) idsFrom(cmd *cobra.Command, path string, query url.Values, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	none := cobra.ShellCompDirectiveNoFileComp
	if a.c == nil {
		if err := a.connect(cmd); err != nil {
			return nil, none
		}
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	p, err := a.c.list(ctx, path, query, completionItems, "", false)
	if err != nil {
		return nil, none
	}
	var ids []cobra.Completion
	for _, raw := range p.Items {
		var it struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(raw, &it) != nil {
			continue
		}
		id := strings.Trim(string(it.ID), `"`)
		if strings.HasPrefix(id, prefix) {
			ids = append(ids, id)
		}
	}
	return ids, none
}

// completeAccounts offers account ids for a command's first argument.
func (a *app) completeAccounts(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return a.idsFrom(cmd, "/v1/accounts", nil, prefix)
}

// completeAccountFlag offers account ids for a flag (--parent).
func (a *app) completeAccountFlag(cmd *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return a.idsFrom(cmd, "/v1/accounts", nil, prefix)
}

// completeAccountThenKey offers account ids, then the key ids of the
// account given first.
func (a *app) completeAccountThenKey(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	switch len(args) {
	case 0:
		return a.idsFrom(cmd, "/v1/accounts", nil, prefix)
	case 1:
		return a.idsFrom(cmd, accountPath(args[0], "/keys"), nil, prefix)
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}

// completeTokens offers the ids of the tokens listed at path.
func (a *app) completeTokens(path string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return a.idsFrom(cmd, path, nil, prefix)
	}
}
