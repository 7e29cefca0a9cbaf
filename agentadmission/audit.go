package agentadmission

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"
)

// EventDenied is the audit event recorded for every deny response.
const EventDenied = "task_admission_denied"

// Event is one audit record. Empty correlation, task and tenancy ids are
// left out of the JSON rather than written as "".
type Event struct {
	Event         string     `json:"event"`
	TS            time.Time  `json:"ts"`
	CorrelationID string     `json:"correlation_id,omitempty"`
	TaskID        string     `json:"task_id,omitempty"`
	EntityID      string     `json:"entity_id"`
	EntityType    string     `json:"entity_type"`
	OrgID         string     `json:"org_id,omitempty"`
	WorkspaceID   string     `json:"workspace_id,omitempty"`
	Fields        DenyFields `json:"fields"`
}

// DenyFields are the event-specific fields of a task_admission_denied event.
type DenyFields struct {
	Reason  string     `json:"reason"`
	Scope   string     `json:"scope"`
	Window  string     `json:"window"`
	ResetAt *time.Time `json:"reset_at"`
	// Cached tells "the platform just denied" from "serving a deny stored
	// up to 5 s ago", which is what matters when chasing propagation lag.
	Cached bool `json:"cached"`
}

// AuditSink receives audit events. Record runs on the request path, so a
// sink that ships events somewhere slow should queue them. A returned error
// is logged as a warning; the deny stands either way.
type AuditSink interface {
	Record(ctx context.Context, e Event) error
}

// JSONSink writes each event as one line of JSON to a writer.
type JSONSink struct {
	mu sync.Mutex // keeps concurrent lines whole
	w  io.Writer
}

// NewJSONSink returns a sink writing to w.
func NewJSONSink(w io.Writer) *JSONSink {
	return &JSONSink{w: w}
}

// Record writes e and a newline in a single Write.
func (s *JSONSink) Record(_ context.Context, e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err = s.w.Write(b)
	return err
}
