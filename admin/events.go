package admin

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/tollgated/tollgated/control/record"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
	"github.com/tollgated/tollgated/spool"
)

// EventLog is where the billed-event stream is read from: the node's usage
// spool and its archive of released segments (spool.Spool). Positions are
// spool sequence numbers; Follow's errors wrap spool.ErrExpired and
// spool.ErrAhead for positions before what is kept and after what is
// durable.
type EventLog interface {
	Follow(after uint64, limit int, fn func(seq uint64, payload []byte) error) (uint64, error)
	Oldest() uint64
}

// The billed-event stream's CloudEvents attributes.
const (
	eventSpecVersion = "1.0"
	eventType        = "tollgated.usage"
	eventContentType = "application/json"
)

// cloudEvent is one billed event in CloudEvents' JSON format, the shape
// OpenMeter ingests: source is the node, subject the billed account, id the
// event's id: the request id of a data-plane event, and for a post-paid one
// the id the ledger dedupes it by, derived from the reporter's (a re-sent
// report has the same id, which consumers treat as one event). Both are 32
// hex digits of different hashes, so they cannot collide as the reporter's
// own string could; that string is data.event_id.
type cloudEvent struct {
	SpecVersion     string         `json:"specversion"`
	Type            string         `json:"type"`
	Source          string         `json:"source"`
	Subject         core.AccountID `json:"subject"`
	ID              string         `json:"id"`
	Time            *string        `json:"time"`
	DataContentType string         `json:"datacontenttype"`
	Data            eventData      `json:"data"`
}

// eventData is what a billed event says: the units, how they were funded
// (kind: lease, overage or post_paid), for data-plane events the request
// id, the policy revision the request was admitted under (when the record
// has it) and the lease, and for post-paid ones the reporter's own event id
// (when the record has it).
type eventData struct {
	Units          core.CostUnits `json:"units"`
	Kind           string         `json:"kind"`
	RequestID      string         `json:"request_id,omitempty"`
	EventID        string         `json:"event_id,omitempty"`
	PolicyRevision string         `json:"policy_revision,omitempty"`
	LeaseID        uint64         `json:"lease_id,omitempty"`
}

// eventScan bounds the records one page reads beyond its limit: commit
// journal entries share the spool with billed events and are skipped.
const eventScan = 1024

// events: GET /v1/events?limit=&cursor= — every billed event of this node,
// oldest first, as CloudEvents. The stream only grows (until its retention
// drops the oldest), so next_cursor is never null: it is where the next
// events will be, and an empty page with it means there are none yet.
func (s *Server) events(w http.ResponseWriter, r *http.Request) error {
	q, err := readQuery(r, "limit", "cursor")
	if err != nil {
		return err
	}
	p, err := q.page(listEvents)
	if err != nil {
		return err
	}
	if s.eventLog == nil {
		return problemf(codeNotFound, "this node keeps no billed-event stream")
	}
	after, err := s.eventCursor(p.after)
	if err != nil {
		return err
	}
	items := make([]cloudEvent, 0, min(p.limit, 64))
	read := func(seq uint64, payload []byte) error {
		if len(items) == p.limit {
			return errPageFull
		}
		rec, err := record.Decode(payload)
		if err != nil {
			return fmt.Errorf("admin: spool record %d: %w", seq, err)
		}
		if rec.Kind == record.Usage {
			items = append(items, s.cloudEvent(&rec))
		}
		return nil
	}
	next, err := s.eventLog.Follow(after, p.limit+eventScan, read)
	if errors.Is(err, spool.ErrExpired) && p.after == "" {
		// The retention moved the start while we looked: start again.
		items = items[:0]
		after = s.eventLog.Oldest() - 1
		next, err = s.eventLog.Follow(after, p.limit+eventScan, read)
	}
	switch {
	case errors.Is(err, errPageFull):
	case errors.Is(err, spool.ErrExpired):
		return codeProblem(codeCursorExpired, "cursor", "the events after this cursor are no longer kept (the oldest kept is at %d); start again without a cursor", s.eventLog.Oldest())
	case errors.Is(err, spool.ErrAhead):
		return codeProblem(codeCursorAhead, "cursor", "this cursor is past the end of this node's stream: it is not from this data directory")
	case err != nil:
		return err
	}
	return writeJSON(w, http.StatusOK, newList(listEvents, items, s.node+"/"+strconv.FormatUint(next, 10)))
}

// errPageFull ends a page's read once it holds its limit.
var errPageFull = errors.New("page full")

// eventCursor reads a cursor's position; without one, the stream starts
// before the oldest event kept.
func (s *Server) eventCursor(c string) (uint64, error) {
	if c == "" {
		return s.eventLog.Oldest() - 1, nil
	}
	node, at, ok := strings.Cut(c, "/")
	seq, err := strconv.ParseUint(at, 10, 64)
	switch {
	case !ok || err != nil || (len(at) > 1 && at[0] == '0'):
		return 0, codeProblem(codeInvalidQuery, "cursor", "is not a cursor of this listing")
	case node != s.node:
		return 0, codeProblem(codeInvalidQuery, "cursor", "is a cursor of node %q's stream; this is node %q", node, s.node)
	}
	return seq, nil
}

// cloudEvent is rec as the stream shows it.
func (s *Server) cloudEvent(rec *record.Record) cloudEvent {
	u := &rec.Usage
	id := hex.EncodeToString(u.ID[:])
	ev := cloudEvent{
		SpecVersion: eventSpecVersion, Type: eventType, Source: s.node, Subject: u.Account, ID: id,
		Time: timestamp(u.OccurredAt), DataContentType: eventContentType,
		Data: eventData{Units: u.Units, Kind: usageSources[ledger.UsageSource(u.Source)], LeaseID: u.LeaseID},
	}
	if u.Source == record.SourcePostPaid {
		ev.Data.EventID = rec.EventID
	} else {
		ev.Data.RequestID = id
	}
	if rec.Revision != (core.PolicyRevision{}) {
		ev.Data.PolicyRevision = hex.EncodeToString(rec.Revision[:])
	}
	return ev
}
