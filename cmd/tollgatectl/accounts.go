package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

var accountColumns = []column{
	{"ID", "id"}, {"PARENT", "parent"}, {"SCOPE", "scope"}, {"STATUS", "status"},
	{"CAN SPEND", "funds.can_spend"}, {"IN LEASES", "funds.in_leases"}, {"SPENT", "funds.spent"}, {"OWED", "funds.owed"},
	{"BUDGET", "budget.allowance"}, {"PERIOD", "budget.period"}, {"PERIOD END", "period_end"},
}

// accountFields are what "accounts show" prints, in the words of
// docs/API.md's account view.
var accountFields = []column{
	{"id", "id"}, {"parent", "parent"}, {"scope", "scope"}, {"status", "status"}, {"capacity", "capacity"},
	{"unmetered", "unmetered"}, {"budget", "budget.allowance"}, {"period", "budget.period"},
	{"period start", "period_start"}, {"period end", "period_end"},
	{"can spend", "funds.can_spend"}, {"held unspent in this node's leases", "funds.held_unspent"},
	{"in leases (all nodes)", "funds.in_leases"}, {"spent", "funds.spent"}, {"owed", "funds.owed"},
	{"allowance left", "funds.allowance_left"}, {"top-ups left", "funds.top_up_left"}, {"lost", "funds.lost"},
	{"expired", "funds.expired"}, {"received", "funds.received"}, {"policy generation", "policy_generation"},
}

// listFlags are the paging flags every list command takes.
type listFlags struct {
	limit  int
	cursor string
	all    bool
}

func (l *listFlags) register(cmd *cobra.Command) {
	cmd.Flags().IntVar(&l.limit, "limit", 0, "items per page (1-1000; the API's default 100)")
	cmd.Flags().StringVar(&l.cursor, "cursor", "", "continue after this page (next_cursor of the last one)")
	cmd.Flags().BoolVar(&l.all, "all", false, "follow next_cursor through every page")
}

func accountPath(id string, rest ...string) string {
	return "/v1/accounts/" + url.PathEscape(id) + strings.Join(rest, "")
}

func (a *app) accountsCommand() *cobra.Command {
	cmd := group("accounts", "Create, list, show and change accounts", "account")
	cmd.AddCommand(a.accountCreate(), a.accountList(), a.accountTree(), a.accountShow(), a.accountStatus(), a.accountPolicy())
	return cmd
}

func (a *app) accountCreate() *cobra.Command {
	var parent, capacity string
	var unmetered bool
	cmd := &cobra.Command{
		Use:   "create ID",
		Short: "Create an account (an org; with --parent a workspace or an agent)",
		Example: `  tollgatectl accounts create acme
  tollgatectl accounts create ws-1 --parent acme
  tollgatectl accounts create agent-7 --parent ws-1 --unmetered`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{"id": args[0]}
			if parent != "" {
				body["parent"] = parent
			}
			if capacity != "" {
				body["capacity"] = capacity
			}
			if unmetered {
				body["unmetered"] = true
			}
			raw, err := a.c.do(cmd.Context(), http.MethodPost, "/v1/accounts", nil, body)
			if err != nil {
				return err
			}
			return a.printOne(raw, accountFields)
		},
	}
	cmd.Flags().StringVar(&parent, "parent", "", "the parent account")
	cmd.RegisterFlagCompletionFunc("parent", a.completeAccountFlag)
	cmd.Flags().StringVar(&capacity, "capacity", "", "assured (default) or best_effort")
	cmd.Flags().BoolVar(&unmetered, "unmetered", false, "hold no money: funded by the metered accounts above")
	return cmd
}

func (a *app) accountList() *cobra.Command {
	var lf listFlags
	var parent, status string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List accounts in id order, a page at a time",
		Example: `  tollgatectl accounts list --all
  tollgatectl accounts list --parent acme --status suspended`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			if parent != "" {
				q.Set("parent", parent)
			}
			if status != "" {
				q.Set("status", status)
			}
			p, err := a.c.list(cmd.Context(), "/v1/accounts", q, lf.limit, lf.cursor, lf.all)
			if err != nil {
				return err
			}
			return a.printPage(p, accountColumns, lf.all)
		},
	}
	lf.register(cmd)
	cmd.Flags().StringVar(&parent, "parent", "", "only this account's children")
	cmd.RegisterFlagCompletionFunc("parent", a.completeAccountFlag)
	cmd.Flags().StringVar(&status, "status", "", "only accounts in this status: active, suspended or closed")
	return cmd
}

func (a *app) accountShow() *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show an account: standing, budget, and where its money is",
		Example: `  tollgatectl accounts show acme
  tollgatectl accounts show acme --json | jq .funds.can_spend`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeAccounts,
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := a.c.do(cmd.Context(), http.MethodGet, accountPath(args[0]), nil, nil)
			if err != nil {
				return err
			}
			return a.printOne(raw, accountFields)
		},
	}
}

func (a *app) accountStatus() *cobra.Command {
	return &cobra.Command{
		Use:     "status ID active|suspended|closed",
		Short:   "Set an account's status (closed is final)",
		Example: `  tollgatectl accounts status acme suspended`,
		Args:    cobra.ExactArgs(2),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) == 1 {
				return []cobra.Completion{"active", "suspended", "closed"}, cobra.ShellCompDirectiveNoFileComp
			}
			return a.completeAccounts(cmd, args, prefix)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := a.c.do(cmd.Context(), http.MethodPost, accountPath(args[0], "/status"), nil, map[string]any{"status": args[1]})
			if err != nil {
				return err
			}
			return a.printOne(raw, accountFields)
		},
	}
}

func (a *app) accountPolicy() *cobra.Command {
	cmd := group("policy", "Get or set an account's policy document")
	get := &cobra.Command{
		Use:               "get ID",
		Short:             "Print the account's policy (with --json, also its generation and revision)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeAccounts,
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := a.c.do(cmd.Context(), http.MethodGet, accountPath(args[0], "/policy"), nil, nil)
			if err != nil {
				return err
			}
			return a.printPolicy(raw)
		},
	}
	var file string
	set := &cobra.Command{
		Use:   "set ID --file policy.json",
		Short: "Replace the account's policy with a document from a file (- for standard input)",
		Example: `  tollgatectl accounts policy set acme --file policy.json
  echo '{"permissions":["chat"],"operations":{"requests":{"weight":1}}}' | tollgatectl accounts policy set acme -f -`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeAccounts,
		RunE: func(cmd *cobra.Command, args []string) error {
			doc, err := readDocument(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			raw, err := a.c.do(cmd.Context(), http.MethodPut, accountPath(args[0], "/policy"), nil, doc)
			if err != nil {
				return err
			}
			return a.printPolicy(raw)
		},
	}
	set.Flags().StringVarP(&file, "file", "f", "", "the policy document (JSON; - for standard input)")
	set.MarkFlagRequired("file")
	cmd.AddCommand(get, set)
	return cmd
}

// readDocument reads a JSON document from file ("-": in).
func readDocument(file string, in io.Reader) (json.RawMessage, error) {
	var b []byte
	var err error
	if file == "-" {
		b, err = io.ReadAll(io.LimitReader(in, 1<<20))
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, err
	}
	if !json.Valid(b) {
		return nil, usageError{fmt.Errorf("%s is not a JSON document", file)}
	}
	return json.RawMessage(b), nil
}

// printPolicy prints a policy answer: the whole answer with --json, else
// a line on its revision and the document itself.
func (a *app) printPolicy(raw []byte) error {
	if a.json {
		return a.printJSON(raw)
	}
	var p struct {
		Account    string          `json:"account"`
		Generation json.Number     `json:"generation"`
		Revision   string          `json:"revision"`
		Default    bool            `json:"default"`
		Policy     json.RawMessage `json:"policy"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return err
	}
	what := "policy"
	if p.Default {
		what = "default policy (none of its own)"
	}
	fmt.Fprintf(a.errOut, "%s of %s, generation %s, revision %s\n", what, p.Account, p.Generation, p.Revision)
	return a.printJSON(p.Policy)
}

// accountTree prints every account (or the subtree of one) as a tree,
// with spend against budget, period end and funds; with --json, the
// accounts as the API answers them, each with its "children" nested.
func (a *app) accountTree() *cobra.Command {
	return &cobra.Command{
		Use:   "tree [ROOT]",
		Short: "Show the account tree: standing, spend against budget, period end, funds",
		Example: `  tollgatectl accounts tree
  tollgatectl accounts tree acme --json   # the subtree of acme, children nested`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeAccounts,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.c.list(cmd.Context(), "/v1/accounts", nil, 1000, "", true)
			if err != nil {
				return err
			}
			f, err := forestOf(p)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				if _, ok := f.byID[args[0]]; !ok {
					return &problem{Status: 404, Code: "unknown-account", Detail: fmt.Sprintf("no account %q", args[0])}
				}
				f.roots = []string{args[0]}
			}
			if a.json {
				return a.printTreeJSON(f)
			}
			return a.printTree(f)
		},
	}
}

// forest is the accounts by id, each account's children (sorted) and the
// roots (sorted).
type forest struct {
	byID  map[string]json.RawMessage
	kids  map[string][]string
	roots []string
}

func forestOf(p page) (forest, error) {
	f := forest{byID: map[string]json.RawMessage{}, kids: map[string][]string{}}
	for _, it := range p.Items {
		r, err := decodeRecord(it)
		if err != nil {
			return f, err
		}
		id := r.str("id")
		f.byID[id] = it
		if parent := r.str("parent"); parent != "-" {
			f.kids[parent] = append(f.kids[parent], id)
		} else {
			f.roots = append(f.roots, id)
		}
	}
	for _, k := range f.kids {
		slices.Sort(k)
	}
	slices.Sort(f.roots)
	return f, nil
}

// printTree draws the forest as a table, children under their parent.
func (a *app) printTree(f forest) error {
	tw := tabwriter.NewWriter(a.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ACCOUNT\tSTATUS\tSPENT / BUDGET\tPERIOD END\tCAN SPEND\tIN LEASES\tSPENT\tOWED")
	var walk func(id, indent, branch string) error
	walk = func(id, indent, branch string) error {
		r, err := decodeRecord(f.byID[id])
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s%s (%s)\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", indent+branch, id, r.str("scope"), r.str("status"),
			spendAgainstBudget(r), r.str("period_end"), r.str("funds.can_spend"), r.str("funds.in_leases"),
			r.str("funds.spent"), r.str("funds.owed"))
		next := indent
		switch branch {
		case "├─ ":
			next += "│  "
		case "└─ ":
			next += "   "
		}
		for i, k := range f.kids[id] {
			b := "├─ "
			if i == len(f.kids[id])-1 {
				b = "└─ "
			}
			if err := walk(k, next, b); err != nil {
				return err
			}
		}
		return nil
	}
	for _, id := range f.roots {
		if err := walk(id, "", ""); err != nil {
			return err
		}
	}
	return tw.Flush()
}

// printTreeJSON prints {"items":[…]}: the roots, each account as the API
// answers it (its fields in the API's order) with a "children" array of its
// own children, nested.
func (a *app) printTreeJSON(f forest) error {
	var node func(id string) ([]byte, error)
	node = func(id string) ([]byte, error) {
		obj := bytes.TrimSpace(f.byID[id])
		if len(obj) < 2 || obj[len(obj)-1] != '}' {
			return nil, fmt.Errorf("the API answered account %s as something that is not a JSON object", id)
		}
		b := append(bytes.Clone(obj[:len(obj)-1]), `,"children":[`...)
		for i, k := range f.kids[id] {
			c, err := node(k)
			if err != nil {
				return nil, err
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, c...)
		}
		return append(b, "]}"...), nil
	}
	b := []byte(`{"items":[`)
	for i, id := range f.roots {
		n, err := node(id)
		if err != nil {
			return err
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, n...)
	}
	return a.printJSON(append(b, "]}"...))
}

// spendAgainstBudget is "spent/allowance per period" for an account with a
// budget: the period's allowance less what is left of it and less what
// this node's leases hold of it unspent. A lease takes its units from the
// allowance first and gives back what it did not spend, so counting the
// units it holds as spent would show a whole lease spent after one small
// request. Units another node holds do count (this node cannot see them).
func spendAgainstBudget(r record) string {
	allowance, err1 := strconv.ParseInt(r.str("budget.allowance"), 10, 64)
	left, err2 := strconv.ParseInt(r.str("funds.allowance_left"), 10, 64)
	period := r.str("budget.period")
	if err1 != nil || err2 != nil || allowance == 0 {
		return "-"
	}
	held, err := strconv.ParseInt(r.str("funds.held_unspent"), 10, 64)
	if err != nil {
		held = 0 // null: the node does not say
	}
	spent := min(max(allowance-left-held, 0), allowance)
	return fmt.Sprintf("%d / %d per %s", spent, allowance, period)
}

func (a *app) budgetsCommand() *cobra.Command {
	cmd := group("budgets", "Set an account's budget", "budget")
	var allowance uint64
	var period string
	set := &cobra.Command{
		Use:   "set ID --allowance N --period day|week|month|none",
		Short: "Set the budget: an allowance per period (a new budget starts the current period)",
		Example: `  tollgatectl budgets set acme --allowance 100000 --period day
  tollgatectl budgets set acme --allowance 0 --period none   # top-ups only`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeAccounts,
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := a.c.do(cmd.Context(), http.MethodPut, accountPath(args[0], "/budget"), nil,
				map[string]any{"allowance": allowance, "period": period})
			if err != nil {
				return err
			}
			return a.printOne(raw, accountFields)
		},
	}
	set.Flags().Uint64Var(&allowance, "allowance", 0, "units per period (0 with --period none)")
	set.Flags().StringVar(&period, "period", "", "day, week, month, or none (top-ups only)")
	set.MarkFlagRequired("allowance")
	set.MarkFlagRequired("period")
	cmd.AddCommand(set)
	return cmd
}

func (a *app) depositsCommand() *cobra.Command {
	cmd := group("deposits", "Top up an account", "deposit")
	var units uint64
	var key string
	create := &cobra.Command{
		Use:               "create ID --units N --idempotency-key K",
		Short:             "Deposit units once per idempotency key (repeating the same deposit changes nothing)",
		Example:           `  tollgatectl deposits create acme --units 50000 --idempotency-key invoice-2026-0042`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeAccounts,
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := a.c.do(cmd.Context(), http.MethodPost, accountPath(args[0], "/deposits"), nil,
				map[string]any{"units": units, "idempotency_key": key})
			if err != nil {
				return err
			}
			return a.printOne(raw, accountFields)
		},
	}
	create.Flags().Uint64Var(&units, "units", 0, "units to deposit (at least 1)")
	create.Flags().StringVar(&key, "idempotency-key", "", "names this deposit (an invoice number, say): the same key deposits once")
	create.MarkFlagRequired("units")
	create.MarkFlagRequired("idempotency-key")
	cmd.AddCommand(create)
	return cmd
}
