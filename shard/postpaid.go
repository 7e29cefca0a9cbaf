package shard

import (
	"crypto/sha256"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/tollgated/tollgated/control/message"
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

var pathUsage = []byte("/v1/usage")

// PostPaidID is the event id a client's id maps to.
func PostPaidID(clientID []byte) [16]byte {
	h := sha256.New()
	h.Write([]byte("tollgated post-paid usage\x00"))
	h.Write(clientID)
	var id [16]byte
	copy(id[:], h.Sum(nil))
	return id
}

// Fields of a usage body and of one event.
var (
	usageFields = [...]string{"events"}
	eventFields = [...]string{"id", "agent_id", "units", "occurred_at"}
)

const (
	detailEvents     = "must be an array of 1 to 1000 events"
	detailEventID    = "must be a string of 1 to 128 bytes"
	detailAgent      = "must be a string of 1 to 64 bytes"
	detailEventUnits = "must be an integer from 1 to 9223372036854775807"
	detailOccurredAt = "must be an RFC 3339 time from 1970 to 2261"
	// maxTimeLen bounds occurred_at: RFC 3339 with nanoseconds and an
	// offset is 35 bytes.
	maxTimeLen = 64
)

// occurredAt bounds: times a nanosecond count since 1970 holds.
var (
	minOccurredAt = time.Unix(0, 0)
	maxOccurredAt = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)
)

func (s *Shard) servePostPaid(r *Request) {
	if !s.platformCall(r, routeUsage, r.Req.Header.IsPost(), "Use POST") {
		return
	}
	batch, p := s.decodePostPaid(r.Req.Body())
	if p.refused() {
		s.platformStats.BadRequests[routeUsage]++
		s.writeFieldProblem(r.Resp, p)
		return
	}
	if s.refuseForStorage(r) {
		s.countPostPaid(batch, true)
		return
	}
	if r.Defer == nil {
		s.countPostPaid(batch, true)
		s.writeProblem(r.Resp, fasthttp.StatusServiceUnavailable, "usage-unavailable", "This transport cannot wait for durable usage")
		return
	}
	ticket := r.Defer()
	if !s.outbox.Push(message.Outbound{Kind: message.OutPostPaid, From: s.cfg.ID, Ticket: ticket, Batch: batch}) {
		s.countPostPaid(batch, true)
		s.fail(ticket, core.DenyAccountingBackpressure)
	}
}

// decodePostPaid validates a batch (see decode.go for the rules every
// field follows). Events for agents this node does not know are counted
// rejected here; a malformed event fails the whole batch, so a client
// never learns half an answer. This route allocates (a batch is up to a
// megabyte of events), so it parses with a parser of its own rather than
// have the shard's keep what the largest batch needed.
func (s *Shard) decodePostPaid(body []byte) (b *message.PostPaidBatch, p fieldProblem) {
	defer s.recoverDecode(&p)
	s.faultIn()
	s.atTop()
	var parser fastjson.Parser
	v, err := parser.ParseBytes(body)
	if err != nil || v.Type() != fastjson.TypeObject {
		return nil, invalid(detailObject)
	}
	o, _ := v.Object()
	var f [len(usageFields)]*fastjson.Value
	if p = s.fields(o, usageFields[:], f[:]); p.refused() {
		return nil, p
	}
	evs, p := s.array(f[0], "events", 1, MaxPostPaidEvents, detailEvents)
	if p.refused() {
		return nil, p
	}
	b = &message.PostPaidBatch{Events: make([]message.PostPaid, 0, len(evs))}
	for i, e := range evs {
		pp, p := s.decodeEvent(e, i)
		if p.refused() {
			return nil, p
		}
		if _, _, ok := s.engine.Standing([]byte(pp.Account)); !ok {
			b.Rejected++
			continue
		}
		b.Events = append(b.Events, pp)
	}
	return b, p
}

// decodeEvent reads event i, {"id","agent_id","units","occurred_at"}. An
// agent_id that names no account is well formed here; the caller rejects
// it.
func (s *Shard) decodeEvent(e *fastjson.Value, i int) (message.PostPaid, fieldProblem) {
	s.atElement("events", i)
	if e.Type() != fastjson.TypeObject {
		s.refuseField("")
		return message.PostPaid{}, invalid(detailLineObject)
	}
	o, _ := e.Object()
	var f [len(eventFields)]*fastjson.Value
	if p := s.fields(o, eventFields[:], f[:]); p.refused() {
		return message.PostPaid{}, p
	}
	id, p := s.text(f[0], "id", message.MaxEventIDLen, detailEventID)
	if p.refused() {
		return message.PostPaid{}, p
	}
	agent, p := s.text(f[1], "agent_id", core.MaxAccountIDLen, detailAgent)
	if p.refused() {
		return message.PostPaid{}, p
	}
	units, p := s.integer(f[2], "units", 1, maxInt, detailEventUnits)
	if p.refused() {
		return message.PostPaid{}, p
	}
	at, p := s.text(f[3], "occurred_at", maxTimeLen, detailOccurredAt)
	if p.refused() {
		return message.PostPaid{}, p
	}
	t, err := time.Parse(time.RFC3339Nano, string(at))
	if err != nil || t.Before(minOccurredAt) || !t.Before(maxOccurredAt) {
		s.refuseField("occurred_at")
		return message.PostPaid{}, invalid(detailOccurredAt)
	}
	return message.PostPaid{ID: PostPaidID(id), EventID: string(id), Account: core.AccountID(agent), Units: core.CostUnits(units),
		OccurredAt: t.UnixNano()}, fieldProblem{}
}

// postPaidDone answers a batch the control plane has finished with.
func (s *Shard) postPaidDone(ticket uint64, b *message.PostPaidBatch) {
	s.countPostPaid(b, b.Failed)
	s.postPaid = b
	s.complete(ticket, s.fillPostPaid)
	s.postPaid = nil
}

// countPostPaid counts a batch's events by the result its reporter is
// told: every event of a batch that failed counts as failed (the reporter
// sends the whole batch again), so each report is counted once.
func (s *Shard) countPostPaid(b *message.PostPaidBatch, failed bool) {
	u := &s.platformStats.Usage
	if failed {
		u[UsageFailed] += uint64(len(b.Events) + b.Rejected)
		return
	}
	u[UsageAccepted] += uint64(b.Accepted)
	u[UsageDuplicate] += uint64(b.Duplicate)
	u[UsageRejected] += uint64(b.Rejected)
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
