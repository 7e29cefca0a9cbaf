package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

var eventColumns = []column{
	{"ID", "id"}, {"TIME", "time"}, {"SUBJECT", "subject"}, {"KIND", "data.kind"}, {"UNITS", "data.units"},
	{"LEASE", "data.lease_id"},
}

func (a *app) eventsCommand() *cobra.Command {
	var lf listFlags
	var follow bool
	var every time.Duration
	cmd := &cobra.Command{
		Use:   "events",
		Short: "List the node's billed events, oldest first (CloudEvents); --follow keeps reading",
		Long: `List the node's billed events, oldest first, as the billing system export
(GET /v1/events) serves them: every usage record the node made durable, as
CloudEvents. --follow keeps reading from the last cursor until interrupted,
printing events as they come: with --json one CloudEvent per line, ready for
a CloudEvents ingest (OpenMeter's /api/v1/events). Each page's cursor is
printed to standard error, so an interrupted follower can go on with --cursor.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !follow {
				p, err := a.c.list(cmd.Context(), "/v1/events", nil, lf.limit, lf.cursor, lf.all)
				if err != nil {
					return err
				}
				return a.printPage(p, eventColumns, lf.all)
			}
			if every <= 0 {
				return usageError{fmt.Errorf("--interval %v: want a positive duration", every)}
			}
			return a.followEvents(cmd.Context(), lf, every)
		},
	}
	lf.register(cmd)
	cmd.Flags().BoolVar(&follow, "follow", false, "keep reading new events until interrupted")
	cmd.Flags().DurationVar(&every, "interval", time.Second, "with --follow, how long to wait after a page that brought nothing new")
	return cmd
}

// followEvents prints every event from lf.cursor on, page by page, until
// ctx ends (which is a clean exit: the last cursor was printed).
func (a *app) followEvents(ctx context.Context, lf listFlags, every time.Duration) error {
	cursor, heading := lf.cursor, !a.json
	for {
		p, err := a.c.list(ctx, "/v1/events", nil, lf.limit, cursor, false)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if err := a.printEvents(p, heading); err != nil {
			return err
		}
		heading = heading && len(p.Items) == 0
		if p.NextCursor != nil && *p.NextCursor != cursor {
			cursor = *p.NextCursor
			fmt.Fprintf(a.errOut, "cursor: %s\n", cursor)
		}
		if len(p.Items) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

// printEvents writes a page's events: JSON lines, or table rows (with the
// heading before the first).
func (a *app) printEvents(p page, heading bool) error {
	var b strings.Builder
	if heading && len(p.Items) > 0 {
		for i, c := range eventColumns {
			b.WriteString(sep(i) + c.head)
		}
		b.WriteByte('\n')
	}
	for _, raw := range p.Items {
		if a.json {
			b.Write(raw)
			b.WriteByte('\n')
			continue
		}
		r, err := decodeRecord(raw)
		if err != nil {
			return err
		}
		for i, c := range eventColumns {
			b.WriteString(sep(i) + r.str(c.field))
		}
		b.WriteByte('\n')
	}
	_, err := a.out.Write([]byte(b.String()))
	return err
}

// sep separates the columns of a followed stream's rows (pages come one
// by one, so they are not aligned as a whole).
func sep(i int) string {
	if i == 0 {
		return ""
	}
	return "  "
}
