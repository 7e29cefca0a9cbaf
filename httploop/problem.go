//go:build linux

package httploop

import (
	"strconv"

	"github.com/valyala/fasthttp"
)

// problem is an answer the loop gives by itself, as application/problem+json
// (RFC 9457) with the project's stable code. The body is rendered once, at
// package initialisation, so answering costs no formatting.
type problem struct {
	status int
	body   []byte
	close  bool // the connection cannot be trusted to carry another request
}

func newProblem(status int, code string, close bool) *problem {
	title := fasthttp.StatusMessage(status)
	b := []byte(`{"type":"about:blank","title":`)
	b = strconv.AppendQuote(b, title)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"code":`...)
	b = strconv.AppendQuote(b, code)
	b = append(b, '}')
	return &problem{status: status, body: b, close: close}
}

// The problems the loop answers itself. Framing failures close the
// connection: after them the position of the next request in the byte
// stream is unknown. A deferred answer that timed out leaves the stream
// intact, so that connection stays open.
var (
	problemMalformed      = newProblem(fasthttp.StatusBadRequest, "malformed-request", true)
	problemTimeout        = newProblem(fasthttp.StatusRequestTimeout, "request-timeout", true)
	problemLengthRequired = newProblem(fasthttp.StatusLengthRequired, "length-required", true)
	problemBodyTooLarge   = newProblem(fasthttp.StatusRequestEntityTooLarge, "body-too-large", true)
	problemHeaderTooLarge = newProblem(fasthttp.StatusRequestHeaderFieldsTooLarge, "header-too-large", true)
	problemDeferTimeout   = newProblem(fasthttp.StatusGatewayTimeout, "answer-timeout", false)
)

// FillAnswerTimeout writes the answer the loop gives a postponed request
// that waited longer than Config.DeferTimeout (504, answer-timeout), for a
// transport beside the loop that postpones answers the same way.
func FillAnswerTimeout(resp *fasthttp.Response) { problemDeferTimeout.fill(resp) }

// problemFor maps a framing verdict to its answer.
func problemFor(v verdict) *problem {
	switch v {
	case headerTooLarge:
		return problemHeaderTooLarge
	case bodyTooLarge:
		return problemBodyTooLarge
	case lengthRequired:
		return problemLengthRequired
	}
	return problemMalformed
}

const contentTypeProblem = "application/problem+json"

// fill writes the problem into resp.
func (p *problem) fill(resp *fasthttp.Response) {
	resp.SetStatusCode(p.status)
	resp.Header.SetContentType(contentTypeProblem)
	resp.SetBodyRaw(p.body)
}
