package loadtest

import (
	"bytes"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// maxBodySize bounds what one response may make the generator buffer.
const maxBodySize = 1 << 20

// recvState is the reading side of one connection.
type recvState struct {
	rec    *recorder
	resp   fasthttp.Response
	parser fastjson.Parser
}

// handle accounts for the response in r.resp to the request o.next and
// advances o. It reports whether o has another request to send; if not,
// the operation is over (finished or refused).
func (r *recvState) handle(o *op, latency int64, measured bool) (more bool) {
	return r.handleAnswer(o, r.resp.StatusCode(), r.resp.Body(), latency, measured)
}

// handleAnswer is handle for a response already taken apart: its status
// and its body.
func (r *recvState) handleAnswer(o *op, status int, body []byte, latency int64, measured bool) (more bool) {
	k := o.next
	r.rec.response(k, status, latency, measured)

	if status < 200 || status > 299 {
		if measured {
			if c := r.problemCode(body); c != nil {
				r.rec.code(c)
			}
			r.rec.ops++
		}
		return false
	}

	switch k {
	case kindAdmit:
		v, err := r.parser.ParseBytes(body)
		var res []byte
		if err == nil {
			res = v.GetStringBytes("reservation")
		}
		if len(res) == 0 {
			if measured {
				r.rec.invalid++
				r.rec.ops++
			}
			return false
		}
		o.reservation = append(o.reservation[:0], res...)
		o.quote = v.GetInt64("quote")
		o.next = kindCommit
		return true
	case kindCommit:
		o.next = kindFinish
		return true
	case kindAdmission:
		if measured {
			d := []byte("(missing)")
			if v, err := r.parser.ParseBytes(body); err == nil {
				if s := v.GetStringBytes("decision"); s != nil {
					d = s
				}
			}
			r.rec.decision(d)
		}
	}
	if measured {
		r.rec.ops++
	}
	return false
}

// problemCode returns the "code" member of a problem+json (or any JSON
// object) error body, or nil.
func (r *recvState) problemCode(body []byte) []byte {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return nil
	}
	v, err := r.parser.ParseBytes(body)
	if err != nil {
		return nil
	}
	return v.GetStringBytes("code")
}
