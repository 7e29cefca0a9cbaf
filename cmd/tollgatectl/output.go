package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// record is one decoded JSON object, numbers kept exact.
type record map[string]any

func decodeRecord(raw []byte) (record, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var r record
	if err := d.Decode(&r); err != nil {
		return nil, fmt.Errorf("the API answered something that is not a JSON object: %w", err)
	}
	return r, nil
}

// str formats field path (dotted, into nested objects) for a table: "-"
// for null or absent.
func (r record) str(path string) string {
	var v any = map[string]any(r)
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return "-"
		}
		if v, ok = m[k]; !ok {
			return "-"
		}
	}
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		if x == "" {
			return `""`
		}
		return humanTime(x)
	case json.Number:
		return x.String()
	case bool:
		if x {
			return "yes"
		}
		return "no"
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

// humanTime shows a time the API gives with nanoseconds
// ("2026-12-03T10:00:00.000000123Z") as RFC 3339 to the second, in UTC, for
// a table; anything else is returned as it is. --json keeps the API's.
func humanTime(s string) string {
	if len(s) < len("2006-01-02T15:04:05Z") || s[4] != '-' || s[10] != 'T' {
		return s
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.UTC().Format(time.RFC3339)
}

// printJSON writes raw indented, for scripts and people alike.
func (a *app) printJSON(raw []byte) error {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err := a.out.Write(b.Bytes())
	return err
}

// column is one column of a table: its heading and the record field it
// shows.
type column struct{ head, field string }

// printTable writes records under cols, aligned.
func (a *app) printTable(cols []column, rows []record) {
	tw := tabwriter.NewWriter(a.out, 0, 0, 2, ' ', 0)
	heads := make([]string, len(cols))
	for i, c := range cols {
		heads[i] = c.head
	}
	fmt.Fprintln(tw, strings.Join(heads, "\t"))
	for _, r := range rows {
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = r.str(c.field)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	tw.Flush()
}

// printFields writes one record as "name: value" lines (a table's
// headings, in lower case).
func (a *app) printFields(r record, cols []column) {
	tw := tabwriter.NewWriter(a.out, 0, 0, 2, ' ', 0)
	for _, c := range cols {
		fmt.Fprintf(tw, "%s:\t%s\n", strings.ToLower(c.head), r.str(c.field))
	}
	tw.Flush()
}

// printPage writes a list page: JSON as the API shapes it, or a table and,
// when there is more and the page was not all that was asked for (--all),
// the cursor that continues it.
func (a *app) printPage(p page, cols []column, all bool) error {
	if a.json {
		if p.Items == nil {
			p.Items = []json.RawMessage{}
		}
		raw, err := json.Marshal(p)
		if err != nil {
			return err
		}
		return a.printJSON(raw)
	}
	rows := make([]record, 0, len(p.Items))
	for _, it := range p.Items {
		r, err := decodeRecord(it)
		if err != nil {
			return err
		}
		rows = append(rows, r)
	}
	a.printTable(cols, rows)
	if p.NextCursor != nil && len(p.Items) > 0 && !all {
		fmt.Fprintf(a.errOut, "more: --cursor %s (or --all)\n", *p.NextCursor)
	}
	return nil
}

// printOne writes an object answer: JSON, or its fields.
func (a *app) printOne(raw []byte, cols []column) error {
	if a.json {
		return a.printJSON(raw)
	}
	r, err := decodeRecord(raw)
	if err != nil {
		return err
	}
	a.printFields(r, cols)
	return nil
}
