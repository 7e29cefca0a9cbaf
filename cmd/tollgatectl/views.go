package main

import (
	"context"
	"net/url"

	"github.com/spf13/cobra"
)

var usageColumns = []column{
	{"ID", "id"}, {"OCCURRED", "occurred_at"}, {"UNITS", "units"}, {"SOURCE", "source"}, {"LEASE", "lease_id"},
}

var leaseColumns = []column{
	{"ID", "id"}, {"ACCOUNT", "account"}, {"STATE", "state"}, {"GRANTED", "granted"}, {"USED", "used"},
	{"CREDITED", "credited"}, {"GRANTED AT", "granted_at"}, {"EXPIRES", "expires_at"},
}

var auditColumns = []column{
	{"SEQ", "seq"}, {"AT", "at"}, {"ACTOR", "actor"}, {"ACTION", "action"}, {"TARGET", "target"},
}

// usageSource pages an account's billed usage events. The admin API's
// usage view (newest first, as far back as the ledger keeps) is the one
// source today; the billed-event export stream plugs in here as another,
// behind the same flags, when it exists.
type usageSource interface {
	usage(ctx context.Context, account string, lf listFlags) (page, error)
}

// adminUsage is usageSource over GET /v1/accounts/{id}/usage.
type adminUsage struct{ c *client }

func (s adminUsage) usage(ctx context.Context, account string, lf listFlags) (page, error) {
	return s.c.list(ctx, accountPath(account, "/usage"), nil, lf.limit, lf.cursor, lf.all)
}

func (a *app) usageCommand() *cobra.Command {
	var lf listFlags
	cmd := &cobra.Command{
		Use:   "usage ACCOUNT",
		Short: "List an account's billed usage events, newest first",
		Long: `List an account's billed usage events, newest first, as far back as the
ledger keeps them (tollgated --usage-history). Each event's id is the
request_id the data plane answered (and X-Tollgate-Request-Id).`,
		Example: `  tollgatectl usage acme --limit 5
  tollgatectl usage acme --all --json`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeAccounts,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := adminUsage{a.c}.usage(cmd.Context(), args[0], lf)
			if err != nil {
				return err
			}
			return a.printPage(p, usageColumns, lf.all)
		},
	}
	lf.register(cmd)
	return cmd
}

func (a *app) leasesCommand() *cobra.Command {
	var lf listFlags
	var active string
	cmd := &cobra.Command{
		Use:     "leases",
		Short:   "List node leases: funding the nodes hold from account balances",
		Example: `  tollgatectl leases --active true`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			if active != "" {
				q.Set("active", active)
			}
			p, err := a.c.list(cmd.Context(), "/v1/leases", q, lf.limit, lf.cursor, lf.all)
			if err != nil {
				return err
			}
			return a.printPage(p, leaseColumns, lf.all)
		},
	}
	lf.register(cmd)
	cmd.Flags().StringVar(&active, "active", "", "true: only active leases; false: only ended ones")
	return cmd
}

func (a *app) auditCommand() *cobra.Command {
	var lf listFlags
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List the audit log, oldest first: every admin change and refused request, who made it, before and after",
		Example: `  tollgatectl audit --all
  tollgatectl audit --json --limit 10`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := a.c.list(cmd.Context(), "/v1/audit", nil, lf.limit, lf.cursor, lf.all)
			if err != nil {
				return err
			}
			return a.printPage(p, auditColumns, lf.all)
		},
	}
	lf.register(cmd)
	return cmd
}
