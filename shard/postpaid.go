package shard

import (
	"crypto/sha256"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/tollgated/tollgated/core"
)

// Seed 000's post-paid usage: POST /v1/usage with a platform token reports
// work that already ran, {"events":[{"id","agent_id","units","occurred_at"}]}.
// The shard validates the batch and hands it to the control plane, which
// spools it (durable), ingests it into the ledger (idempotent by id,
// debiting the agent and its ancestors), and only then answers with the
// counts. This route allocates: it is a batch API, not the admission path.

// MaxPostPaidEvents bounds one batch.
const MaxPostPaidEvents = 1000

// maxEventIDLen bounds a client's event id.
const maxEventIDLen = 128

var pathUsage = []byte("/v1/usage")

// PostPaid is one reported event. ID is derived from the client's id, so
// the same id reported twice is one event.
type PostPaid struct {
	ID         [16]byte
	Account    core.AccountID
	Units      core.CostUnits
	OccurredAt int64
}

// PostPaidBatch travels shard → plane → shard. The plane fills the counts
// (or Failed) before handing it back; the ring's ordering makes that safe.
type PostPaidBatch struct {
	Events                        []PostPaid
	Accepted, Duplicate, Rejected int
	Failed                        bool // not ingested: the events are durable and will be
}

// PostPaidID is the event id a client's id maps to.
func PostPaidID(clientID []byte) [16]byte {
	h := sha256.New()
	h.Write([]byte("tollgated post-paid usage\x00"))
	h.Write(clientID)
	var id [16]byte
	copy(id[:], h.Sum(nil))
	return id
}

func (s *Shard) servePostPaid(r *Request) {
	if !s.platformCall(r, r.Req.Header.IsPost(), "Use POST") {
		return
	}
	batch, problem := s.decodePostPaid(r.Req.Body())
	if problem != "" {
		s.writeProblem(r.Resp, fasthttp.StatusBadRequest, "invalid-body", problem)
		return
	}
	if r.Defer == nil {
		s.writeProblem(r.Resp, fasthttp.StatusServiceUnavailable, "usage-unavailable", "This transport cannot wait for durable usage")
		return
	}
	ticket := r.Defer()
	if !s.outbox.Push(Outbound{Kind: OutPostPaid, From: s.cfg.ID, Ticket: ticket, Batch: batch}) {
		s.fail(ticket, core.DenyAccountingBackpressure)
	}
}

// decodePostPaid validates a batch. Events for agents this node does not
// know are counted rejected here; malformed events fail the whole batch,
// so a client never learns half an answer.
func (s *Shard) decodePostPaid(body []byte) (*PostPaidBatch, string) {
	var p fastjson.Parser
	v, err := p.ParseBytes(body)
	if err != nil || v.Type() != fastjson.TypeObject {
		return nil, "body must be a JSON object"
	}
	evs, err := v.Get("events").Array()
	if err != nil {
		return nil, "events must be an array"
	}
	if len(evs) == 0 || len(evs) > MaxPostPaidEvents {
		return nil, "events must hold 1 to " + strconv.Itoa(MaxPostPaidEvents) + " events"
	}
	b := &PostPaidBatch{Events: make([]PostPaid, 0, len(evs))}
	for i, e := range evs {
		pp, known, problem := decodeEvent(e)
		if problem != "" {
			return nil, "events[" + strconv.Itoa(i) + "]: " + problem
		}
		if _, _, ok := s.engine.Standing([]byte(pp.Account)); !ok || !known {
			b.Rejected++
			continue
		}
		b.Events = append(b.Events, pp)
	}
	return b, ""
}

func decodeEvent(e *fastjson.Value) (pp PostPaid, known bool, problem string) {
	if e.Type() != fastjson.TypeObject {
		return pp, false, "must be an object"
	}
	id, err := e.Get("id").StringBytes()
	if err != nil || len(id) == 0 || len(id) > maxEventIDLen {
		return pp, false, "id must be a string of 1 to 128 bytes"
	}
	agent, err := e.Get("agent_id").StringBytes()
	if err != nil {
		return pp, false, "agent_id must be a string"
	}
	units, err := e.Get("units").Uint64()
	if err != nil || units == 0 || units > uint64(core.MaxCostUnits) {
		return pp, false, "units must be a positive integer"
	}
	at, err := e.Get("occurred_at").StringBytes()
	if err != nil {
		return pp, false, "occurred_at must be an RFC 3339 string"
	}
	t, err := time.Parse(time.RFC3339Nano, string(at))
	if err != nil {
		return pp, false, "occurred_at must be an RFC 3339 string"
	}
	pp = PostPaid{ID: PostPaidID(id), Account: core.AccountID(agent), Units: core.CostUnits(units), OccurredAt: t.UnixNano()}
	return pp, pp.Account.Validate() == nil, ""
}

// postPaidDone answers a batch the control plane has finished with.
func (s *Shard) postPaidDone(ticket uint64, b *PostPaidBatch) {
	s.postPaid = b
	s.complete(ticket, s.fillPostPaid)
	s.postPaid = nil
}

func (s *Shard) writePostPaid(resp *fasthttp.Response) {
	b := s.postPaid
	if b.Failed {
		s.writeProblem(resp, fasthttp.StatusServiceUnavailable, "ledger-unavailable",
			"Usage is durable but not yet billed; retry the batch (it is idempotent)")
		resp.Header.Set("Retry-After", "1")
		return
	}
	out := append(s.out[:0], `{"accepted":`...)
	out = strconv.AppendInt(out, int64(b.Accepted), 10)
	out = append(out, `,"duplicate":`...)
	out = strconv.AppendInt(out, int64(b.Duplicate), 10)
	out = append(out, `,"rejected":`...)
	out = strconv.AppendInt(out, int64(b.Rejected), 10)
	out = append(out, '}')
	s.writeJSON(resp, fasthttp.StatusOK, out)
}
