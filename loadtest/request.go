package loadtest

import (
	"math/rand/v2"
	"strconv"
	"time"
	"unicode/utf8"
)

// DefaultCheckBody is the workload of /v1/check and /v1/admit: the example
// from ARCHITECTURE §6.
const DefaultCheckBody = `{"permission":"chat","workload":[{"op":"input_tokens","count":1200},{"op":"requests","count":1}]}`

// encoder writes the raw HTTP/1.1 bytes of each request. Requests are built
// by appending to a reused buffer instead of through fasthttp.Request: the
// shapes are fixed, and this keeps the generator allocation-free and cheap
// enough to drive a server that runs on a CPU of the same speed.
type encoder struct {
	host       string
	paths      [numKinds]string
	checkBody  []byte
	admitBody  []byte
	platform   string // "Bearer <token>" or ""
	orgID      string
	workspace  string
	usageBatch int
	usageUnits int64
	runID      string
}

// The endpoint paths, relative to the target's base path.
var kindPaths = [numKinds]string{
	kindCheck:     "/v1/check",
	kindAdmit:     "/v1/admit",
	kindCommit:    "/v1/commit",
	kindFinish:    "/v1/finish",
	kindAdmission: "/v1/admission",
	kindUsage:     "/v1/usage",
}

func newEncoder(t *Target, o *Options) *encoder {
	e := &encoder{
		host:       t.Host,
		checkBody:  []byte(o.CheckBody),
		orgID:      o.OrgID,
		workspace:  o.WorkspaceID,
		usageBatch: o.UsageBatch,
		usageUnits: o.UsageUnits,
		runID:      o.RunID,
	}
	for k, p := range kindPaths {
		e.paths[k] = t.Base + p
	}
	if o.PlatformToken != "" {
		e.platform = "Bearer " + o.PlatformToken
	}
	e.admitBody = e.checkBody
	if o.TTLms > 0 {
		e.admitBody = withTTL(e.checkBody, o.TTLms)
	}
	return e
}

// withTTL adds "ttl_ms" to a JSON object body by splicing it in before the
// closing brace; the body was validated as an object by Options.check.
func withTTL(body []byte, ttl int) []byte {
	end := len(body) - 1
	for end > 0 && body[end] != '}' {
		end--
	}
	out := append([]byte(nil), body[:end]...)
	out = append(out, `,"ttl_ms":`...)
	out = strconv.AppendInt(out, int64(ttl), 10)
	return append(out, body[end:]...)
}

// sendState is the writer side of one connection: what a request needs
// beyond the operation itself.
type sendState struct {
	rng      *rand.Rand
	picker   *Picker
	accounts []wireAccount
	conn     int
	seq      uint64 // usage event sequence on this connection
	body     []byte // scratch for bodies built per request
}

// appendRequest appends the request for o.next to dst.
func (e *encoder) appendRequest(dst []byte, o *op, s *sendState) []byte {
	acct := &s.accounts[o.account]
	switch o.next {
	case kindCheck:
		dst = e.appendHead(dst, "POST ", kindCheck, "", acct.auth)
		return appendBody(dst, e.checkBody)
	case kindAdmit:
		dst = e.appendHead(dst, "POST ", kindAdmit, "", acct.auth)
		return appendBody(dst, e.admitBody)
	case kindCommit:
		b := append(s.body[:0], `{"reservation":`...)
		b = appendJSONString(b, o.reservation)
		b = append(b, '}')
		s.body = b
		dst = e.appendHead(dst, "POST ", kindCommit, "", acct.auth)
		return appendBody(dst, b)
	case kindFinish:
		b := append(s.body[:0], `{"reservation":`...)
		b = appendJSONString(b, o.reservation)
		b = append(b, `,"units":`...)
		b = strconv.AppendInt(b, o.quote, 10)
		b = append(b, '}')
		s.body = b
		dst = e.appendHead(dst, "POST ", kindFinish, "", acct.auth)
		return appendBody(dst, b)
	case kindAdmission:
		dst = e.appendHead(dst, "GET ", kindAdmission, acct.queryID, e.platform)
		// Seed 000 omits an empty tenancy header rather than sending it empty.
		if e.orgID != "" {
			dst = appendHeader(dst, "Org-Id", e.orgID)
		}
		if e.workspace != "" {
			dst = appendHeader(dst, "Workspace-Id", e.workspace)
		}
		return append(dst, "\r\n"...)
	case kindUsage:
		s.body = e.appendUsage(s.body[:0], s)
		auth := e.platform
		if auth == "" {
			auth = acct.auth
		}
		dst = e.appendHead(dst, "POST ", kindUsage, "", auth)
		return appendBody(dst, s.body)
	}
	panic("loadtest: unknown request kind")
}

// appendUsage builds a usage batch. Event ids are unique per run (run id),
// per connection and per event, so tollgated must count every one as
// accepted and none as duplicate. Each event names an account drawn from
// the same distribution as every other request.
func (e *encoder) appendUsage(b []byte, s *sendState) []byte {
	now := time.Now().UTC()
	b = append(b, `{"events":[`...)
	for i := 0; i < e.usageBatch; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		s.seq++
		b = append(b, `{"id":"`...)
		b = append(b, e.runID...)
		b = append(b, '-')
		b = strconv.AppendInt(b, int64(s.conn), 10)
		b = append(b, '-')
		b = strconv.AppendUint(b, s.seq, 10)
		b = append(b, `","agent_id":`...)
		b = append(b, s.accounts[s.picker.Pick(s.rng)].jsonID...)
		b = append(b, `,"units":`...)
		b = strconv.AppendInt(b, e.usageUnits, 10)
		b = append(b, `,"occurred_at":"`...)
		b = now.AppendFormat(b, time.RFC3339Nano)
		b = append(b, `"}`...)
	}
	return append(b, "]}"...)
}

func (e *encoder) appendHead(dst []byte, method string, k kind, agentQuery, auth string) []byte {
	dst = append(dst, method...)
	dst = append(dst, e.paths[k]...)
	if agentQuery != "" {
		dst = append(dst, "?agent_id="...)
		dst = append(dst, agentQuery...)
	}
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, e.host...)
	dst = append(dst, "\r\n"...)
	if auth != "" {
		dst = appendHeader(dst, "Authorization", auth)
	}
	return dst
}

func appendHeader(dst []byte, name, value string) []byte {
	dst = append(dst, name...)
	dst = append(dst, ": "...)
	dst = append(dst, value...)
	return append(dst, "\r\n"...)
}

// appendBody ends the header block with a JSON content type and length,
// then appends the body.
func appendBody(dst, body []byte) []byte {
	dst = append(dst, "Content-Type: application/json\r\nContent-Length: "...)
	dst = strconv.AppendInt(dst, int64(len(body)), 10)
	dst = append(dst, "\r\n\r\n"...)
	return append(dst, body...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string literal. Reservations are
// opaque server strings, so they are escaped rather than trusted; invalid
// UTF-8 is replaced as encoding/json would.
func appendJSONString(dst, s []byte) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}
