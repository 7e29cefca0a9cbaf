package admin

import (
	"cmp"
	"encoding/base64"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Every list answers {"items":[…],"next_cursor":"…"|null}, at most limit
// items (1 to MaxListLimit, DefaultListLimit unless asked), and takes the
// next page with ?cursor=<next_cursor>. A cursor is opaque: the listing's
// name and the ledger's own cursor, base64url, so a cursor of one listing
// is refused by another instead of being misread.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
	// maxCursorLen bounds a cursor on the way in (an account id is at most
	// 64 bytes; every ledger cursor is shorter than this).
	maxCursorLen = 512
)

// listing names, carried inside cursors.
const (
	listAccounts       = "accounts"
	listLeases         = "leases"
	listUsage          = "usage"
	listKeys           = "keys"
	listPlatformTokens = "platform-tokens"
	listAdminTokens    = "admin-tokens"
	listAudit          = "audit"
	listEvents         = "events"
)

// page is one list request's paging: the ledger's cursor to continue after
// ("" for the first page) and the limit.
type page struct {
	after string
	limit int
}

// listResponse is every list's answer.
type listResponse[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

// newList answers items, with the listing's next cursor unless the ledger
// said there is no next page ("").
func newList[T any](listing string, items []T, next string) listResponse[T] {
	if items == nil {
		items = []T{}
	}
	resp := listResponse[T]{Items: items}
	if next != "" {
		c := encodeCursor(listing, next)
		resp.NextCursor = &c
	}
	return resp
}

func encodeCursor(listing, after string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(listing + ":" + after))
}

// query is a request's query parameters, checked: each known, each at most
// once, valid UTF-8.
type query url.Values

// readQuery parses the query and refuses parameters outside allowed.
func readQuery(r *http.Request, allowed ...string) (query, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, problemf(codeInvalidQuery, "the query string is malformed: %v", err)
	}
	for _, name := range slices.Sorted(maps.Keys(v)) {
		switch vals := v[name]; {
		case !slices.Contains(allowed, name):
			return nil, codeProblem(codeInvalidQuery, name, "unknown parameter; this route takes %s", strings.Join(allowed, ", "))
		case len(vals) > 1:
			return nil, codeProblem(codeDuplicateField, name, "is given %d times; each parameter once", len(vals))
		case !utf8.ValidString(vals[0]):
			return nil, codeProblem(codeInvalidQuery, name, "is not valid UTF-8")
		}
	}
	return query(v), nil
}

// get returns name's value and whether it was given (even empty).
func (q query) get(name string) (string, bool) {
	v, ok := q[name]
	if !ok {
		return "", false
	}
	return v[0], true
}

// page reads limit and cursor for listing.
func (q query) page(listing string) (page, error) {
	p := page{limit: DefaultListLimit}
	if v, ok := q.get("limit"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			return p, codeProblem(codeInvalidQuery, "limit", "must be an integer from 1 to %d, not %q", MaxListLimit, v)
		}
		p.limit = n
	}
	if v, ok := q.get("cursor"); ok {
		after, ok := decodeCursor(listing, v)
		if !ok {
			return p, codeProblem(codeInvalidQuery, "cursor", "is not a cursor of this listing: pass next_cursor back as it came")
		}
		p.after = after
	}
	return p, nil
}

func decodeCursor(listing, c string) (string, bool) {
	if c == "" || len(c) > maxCursorLen {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", false
	}
	after, ok := strings.CutPrefix(string(b), listing+":")
	return after, ok && after != "" && utf8.ValidString(after)
}

// boolean reads a true/false parameter.
func (q query) boolean(name string) (bool, error) {
	v, ok := q.get(name)
	if !ok {
		return false, nil
	}
	switch v {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, codeProblem(codeInvalidQuery, name, "must be true or false, not %q", v)
}

// pageOf pages a whole listing the ledger returns at once (keys, tokens:
// small sets), in created-then-id order; the cursor is the last item's
// creation time and id.
func pageOf[T any](all []T, p page, created func(*T) int64, id func(*T) string) ([]T, string, error) {
	slices.SortFunc(all, func(a, b T) int {
		return cmp.Or(cmp.Compare(created(&a), created(&b)), cmp.Compare(id(&a), id(&b)))
	})
	start := 0
	if p.after != "" {
		at, afterID, ok := strings.Cut(p.after, "/")
		t, err := strconv.ParseInt(at, 10, 64)
		if !ok || err != nil {
			return nil, "", codeProblem(codeInvalidQuery, "cursor", "is not a cursor of this listing")
		}
		start, _ = slices.BinarySearchFunc(all, struct{}{}, func(x T, _ struct{}) int {
			return cmp.Or(cmp.Compare(created(&x), t), cmp.Compare(id(&x), afterID))
		})
		if start < len(all) && created(&all[start]) == t && id(&all[start]) == afterID {
			start++
		}
	}
	end := min(start+p.limit, len(all))
	next := ""
	if end < len(all) {
		last := &all[end-1]
		next = strconv.FormatInt(created(last), 10) + "/" + id(last)
	}
	return all[start:end], next, nil
}
