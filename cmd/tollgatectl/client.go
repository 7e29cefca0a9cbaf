package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// client calls the admin API.
type client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// maxAnswer bounds an answer read into memory: the largest list page (1000
// items) is far below it.
const maxAnswer = 64 << 20

// problem is an admin API error answer (application/problem+json): the
// stable code is what scripts branch on.
type problem struct {
	Status     int    `json:"status"`
	Code       string `json:"code"`
	Title      string `json:"title"`
	Detail     string `json:"detail"`
	Field      string `json:"field"`
	Permission string `json:"permission"` // what a 403 forbidden lacked
}

func (p *problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", p.Status, p.Code)
	if p.Title != "" {
		fmt.Fprintf(&b, " (%s)", p.Title)
	}
	if p.Detail != "" {
		fmt.Fprintf(&b, ": %s", p.Detail)
	}
	if p.Field != "" {
		fmt.Fprintf(&b, " [field %s]", p.Field)
	}
	if p.Permission != "" {
		fmt.Fprintf(&b, "\n(the token lacks the permission %s: use a token whose role has it; tollgatectl whoami shows this one's)", p.Permission)
	}
	return b.String()
}

func newClient(rawURL, token string, timeout time.Duration) (*client, error) {
	u, err := url.Parse(strings.TrimRight(rawURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("admin URL %q: want http://host:port (--url or TOLLGATE_ADMIN_URL)", rawURL)
	}
	// The admin API never redirects; following one would carry the token
	// elsewhere.
	hc := &http.Client{Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &client{base: u, token: token, http: hc}, nil
}

// do sends body (JSON-encoded unless nil or already raw bytes) and returns
// the answer's body, or a *problem for an error answer.
func (c *client) do(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	if c.token == "" {
		return nil, fmt.Errorf("no admin token: set TOLLGATE_ADMIN_TOKEN or give --token (or --token-file)")
	}
	u := *c.base
	u.Path += path
	u.RawQuery = query.Encode()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case json.RawMessage:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		return nil, answerError(resp, raw)
	}
	return raw, nil
}

// answerError turns an error answer into a *problem; an answer that is not
// a problem (a proxy's page, say) is reported with its status and start.
func answerError(resp *http.Response, raw []byte) error {
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	p := &problem{}
	if ct == "application/problem+json" && json.Unmarshal(raw, p) == nil && p.Code != "" {
		if p.Status == 0 {
			p.Status = resp.StatusCode
		}
		return p
	}
	text := strings.TrimSpace(string(raw))
	if len(text) > 200 {
		text = text[:200] + "…"
	}
	return &problem{Status: resp.StatusCode, Code: "unexpected-answer", Detail: fmt.Sprintf("%s answered %q", resp.Request.URL.Redacted(), text)}
}

// health calls GET /healthz, the one route that takes no token.
func (c *client) health(ctx context.Context) ([]byte, error) {
	u := *c.base
	u.Path += "/healthz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, answerError(resp, raw)
	}
	return raw, nil
}

// get decodes a GET answer into out.
func (c *client) get(ctx context.Context, path string, query url.Values, out any) error {
	raw, err := c.do(ctx, http.MethodGet, path, query, nil)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// page is one page of a list.
type page struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor *string           `json:"next_cursor"`
}

// list fetches path's items: one page from cursor, or every page when all.
func (c *client) list(ctx context.Context, path string, query url.Values, limit int, cursor string, all bool) (page, error) {
	if query == nil {
		query = url.Values{}
	}
	if limit > 0 {
		query.Set("limit", fmt.Sprint(limit))
	}
	var out page
	for {
		if cursor != "" {
			query.Set("cursor", cursor)
		}
		var p page
		if err := c.get(ctx, path, query, &p); err != nil {
			return out, err
		}
		out.Items = append(out.Items, p.Items...)
		out.NextCursor = p.NextCursor
		// The audit log's cursor is never null (new records may come):
		// an empty page is its end, and its cursor where to resume.
		if !all || p.NextCursor == nil || len(p.Items) == 0 {
			return out, nil
		}
		cursor = *p.NextCursor
	}
}
