package agentadmission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// admissionPath is appended to the configured platform URL.
const admissionPath = "/v1/admission"

// maxAnswer caps how much of a response body is read. A real answer is a
// few hundred bytes; anything near this is not an answer.
const maxAnswer = 64 << 10

var errNoAgent = errors.New("no agent id")

// ask makes one platform call for agent and turns its answer into a
// Decision. Every way the call can go wrong comes back as an error.
func (c *Checker) ask(ctx context.Context, agent string) (Decision, error) {
	if agent == "" {
		// Asking about "" would only earn a 4xx; say so without a call.
		return Decision{}, errNoAgent
	}
	// The call serves every request waiting on this agent, not just the
	// one that happened to start it, so that request going away must not
	// cancel it. Its values (the trace) are kept.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer cancel()

	target := c.endpoint + "?agent_id=" + url.QueryEscape(agent)
	ctx, span := c.tracer.Start(ctx, "GET "+admissionPath,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(c.server...),
		trace.WithAttributes(
			attribute.String("http.request.method", http.MethodGet),
			attribute.String("url.full", target),
		))
	defer span.End()

	d, status, err := c.fetch(ctx, target)
	if status != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		if status != 0 && status != http.StatusOK {
			span.SetAttributes(attribute.String("error.type", strconv.Itoa(status)))
		}
	}
	return d, err
}

// fetch performs the GET and parses the answer. status is 0 when no
// response arrived.
func (c *Checker) fetch(ctx context.Context, target string) (d Decision, status int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return Decision{}, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	if c.cfg.OrgID != "" {
		req.Header.Set("Org-Id", c.cfg.OrgID)
	}
	if c.cfg.WorkspaceID != "" {
		req.Header.Set("Workspace-Id", c.cfg.WorkspaceID)
	}
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))

	resp, err := c.client.Do(req)
	if err != nil {
		return Decision{}, 0, unwrapURLError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Decision{}, resp.StatusCode, fmt.Errorf("platform answered %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return Decision{}, resp.StatusCode, fmt.Errorf("reading answer: %w", err)
	}
	if len(body) > maxAnswer {
		return Decision{}, resp.StatusCode, fmt.Errorf("answer larger than %d bytes", maxAnswer)
	}
	d, err = parseAnswer(body)
	return d, resp.StatusCode, err
}

// unwrapURLError drops the "Get \"<url>\": " prefix net/http puts on
// transport errors: the warn line already names the agent, and the bare
// cause ("context deadline exceeded") is what operators match on.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// serverAttrs names the platform in OpenTelemetry HTTP client terms. It
// runs once, in New: the endpoint does not change between calls.
func serverAttrs(endpoint string) []attribute.KeyValue {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil
	}
	attrs := []attribute.KeyValue{attribute.String("server.address", u.Hostname())}
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	if p, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, attribute.Int("server.port", p))
	}
	return attrs
}

// Scopes a deny may name.
var scopes = map[string]bool{"agent": true, "workspace": true, "org": true}

// parseAnswer reads the body of a 200. Keys must match exactly: a field the
// platform spelled differently is a field it did not send.
func parseAnswer(body []byte) (Decision, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return Decision{}, fmt.Errorf("bad answer: %w", err)
	}
	if m == nil {
		return Decision{}, errors.New("bad answer: not a JSON object")
	}
	decision, ok, err := stringField(m, "decision")
	if err != nil {
		return Decision{}, err
	}
	if !ok {
		return Decision{}, errors.New("bad answer: missing decision")
	}

	var d Decision
	switch decision {
	case "admit":
	case "deny":
		d.Denied = true
	default:
		return Decision{}, fmt.Errorf("bad answer: unknown decision %q", decision)
	}

	for _, f := range []struct {
		name string
		dst  *string
	}{{"reason", &d.Reason}, {"scope", &d.Scope}, {"window", &d.Window}} {
		v, ok, err := stringField(m, f.name)
		if err != nil {
			return Decision{}, err
		}
		// An admit needs nothing but its decision; a deny has to explain
		// itself, because its fields are what the caller is shown.
		if !ok && d.Denied {
			return Decision{}, fmt.Errorf("bad answer: deny without %s", f.name)
		}
		*f.dst = v
	}
	if d.Denied && !scopes[d.Scope] {
		return Decision{}, fmt.Errorf("bad answer: unknown scope %q", d.Scope)
	}

	raw, ok := m["reset_at"]
	if !ok {
		if d.Denied {
			return Decision{}, errors.New("bad answer: deny without reset_at")
		}
		return d, nil
	}
	if isNull(raw) {
		return d, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return Decision{}, errors.New("bad answer: reset_at is not a string")
	}
	// "" is not "no reset": the contract says null for that, and a
	// platform sending "" is out of contract, so it fails open.
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return Decision{}, fmt.Errorf("bad answer: reset_at %q is not RFC 3339", s)
	}
	d.ResetAt = t
	return d, nil
}

// stringField returns m[name] as a string. ok is false when the key is
// absent or null; a value of another type is an error.
func stringField(m map[string]json.RawMessage, name string) (v string, ok bool, err error) {
	raw, found := m[name]
	if !found || isNull(raw) {
		return "", false, nil
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", false, fmt.Errorf("bad answer: %s is not a string", name)
	}
	return v, true, nil
}

func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}
