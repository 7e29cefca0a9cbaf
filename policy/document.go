// Package policy is the policy document operators PUT through the admin API
// and its compiler into the engine's core.Snapshot.
//
// The document is JSON with snake_case fields. Parse is strict (unknown or
// duplicate fields, wrong types, out-of-range values are errors that name the
// field) because a policy decides what customers are charged: a typo must
// not silently become "no limit". Canonical re-encodes a parsed document
// byte-stably, so the same policy PUT twice stores the same bytes and the
// ledger sees a no-op instead of a new generation.
package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/tollgated/tollgated/core"
)

const (
	// MaxDocumentSize bounds a policy document, before and after decoding.
	MaxDocumentSize = 64 << 10
	// MaxNameLen bounds permission and operation class names.
	MaxNameLen = 64
	// MaxPermissions is how many permission bits a snapshot has.
	MaxPermissions = 64
	// MaxUnits is the largest amount a document may state. Amounts are
	// core.CostUnits (uint64) inside, but the wire and the ledger's SQL
	// backends are signed 64-bit, so anything above 2^63-1 is refused here
	// rather than wrapped somewhere else.
	MaxUnits = core.CostUnits(math.MaxInt64)
	// DefaultHoldTimeoutMS is the hold timeout of a document that states none.
	DefaultHoldTimeoutMS = 30_000
	// MaxHoldTimeoutMS is core.MaxHoldTimeout in milliseconds (24 h).
	MaxHoldTimeoutMS = core.MaxHoldTimeout / 1e6
)

// Enforcement modes.
const (
	ModeStrict  = "strict"
	ModeElastic = "elastic"
)

// Document is a policy as operators write it.
type Document struct {
	// Permissions names permission bits: bit i is Permissions[i]. The
	// account is granted every permission it names.
	Permissions []string `json:"permissions"`
	// Operations prices operation classes by name. They are compiled in
	// sorted name order, so a class's OpIndex is deterministic.
	Operations  map[string]Operation `json:"operations"`
	FixedCost   core.CostUnits       `json:"fixed_cost"`
	MinimumCost core.CostUnits       `json:"minimum_cost"`
	Limits      Limits               `json:"limits"`
	// Mode is ModeStrict or ModeElastic; empty parses as strict.
	Mode string `json:"mode"`
	// OverageCap is elastic mode's per-engine overage budget; it must be
	// positive in elastic mode and zero in strict mode.
	OverageCap core.CostUnits `json:"overage_cap"`
	// DenyThreshold is for the seed-000 admission answer: an agent whose
	// remaining funding is below it is denied. The engine never reads it.
	DenyThreshold core.CostUnits `json:"deny_threshold"`
	// Routes prices requests a gateway forwards to /v1/authz; nil when the
	// account takes none (omitted, so documents without routes keep the
	// canonical bytes, and so the revision, they always had).
	Routes *Routes `json:"routes,omitempty"`
}

// Operation prices one operation class.
type Operation struct {
	Weight core.CostUnits `json:"weight"`
	// Permission, if set, names a permission (from Document.Permissions)
	// that using this class requires in addition to the route's.
	Permission string `json:"permission,omitempty"`
}

// Limits are core.Limits as written: zero means "no limit of that kind",
// except MaxItems, which is required, and HoldTimeoutMS, which defaults to
// DefaultHoldTimeoutMS.
type Limits struct {
	MaxItems               uint64 `json:"max_items"`
	RequestRate            uint32 `json:"request_rate"`
	RequestBurst           uint32 `json:"request_burst"`
	UnitRate               uint32 `json:"unit_rate"`
	UnitBurst              uint32 `json:"unit_burst"`
	MaxConcurrent          uint32 `json:"max_concurrent"`
	PrincipalMaxConcurrent uint32 `json:"principal_max_concurrent"`
	HoldTimeoutMS          int64  `json:"hold_timeout_ms"`
}

var (
	// ErrTooLarge reports a document over MaxDocumentSize.
	ErrTooLarge = errors.New("policy: document larger than 64 KiB")
	// ErrMalformed wraps JSON that is not a single object.
	ErrMalformed = errors.New("policy: malformed JSON")
	// ErrInvalid is what every *FieldError Is: well-formed JSON with a
	// field that is unknown, duplicated, mistyped or out of range.
	ErrInvalid = errors.New("policy: invalid document")
)

// FieldError names the field of a document that is wrong. Field is a dotted
// JSON path ("limits.unit_burst", "operations.input_tokens.weight",
// "permissions[3]"); it is empty only for the final whole-document check.
type FieldError struct {
	Field   string
	Problem string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return "policy: " + e.Problem
	}
	return "policy: " + e.Field + ": " + e.Problem
}

// Unwrap makes every FieldError match ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Parse decodes and validates a policy document. The result is normalised
// (defaults filled in) so that Canonical of it is stable. Its errors are
// ErrTooLarge, ErrMalformed (wrapped) or a *FieldError.
func Parse(doc []byte) (*Document, error) {
	if len(doc) > MaxDocumentSize {
		return nil, ErrTooLarge
	}
	if t := bytes.TrimLeft(doc, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, fmt.Errorf("%w: a policy is one JSON object", ErrMalformed)
	}
	// Duplicate keys are checked first: encoding/json keeps the last one
	// silently, which for a weight or a limit would hide a mistake.
	if err := checkDuplicateKeys(doc); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	var d Document
	if err := dec.Decode(&d); err != nil {
		return nil, decodeError(doc, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the policy object", ErrMalformed)
	}
	d.normalise()
	if err := d.validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

// Canonical is d's stable encoding: fixed field order, operations sorted by
// name, defaults explicit. Parse(Canonical(d)) is d for any parsed d.
func Canonical(d *Document) []byte {
	c := *d
	if d.Routes != nil {
		// normalise writes into the routes; the caller's stay as they are.
		r := *d.Routes
		r.Rules = slices.Clone(r.Rules)
		c.Routes = &r
	}
	c.normalise()
	b, err := json.Marshal(&c)
	if err != nil {
		// Strings, integers and a string-keyed map always marshal.
		panic("policy: canonical encoding failed: " + err.Error())
	}
	return b
}

// normalise fills in what an omitted field means, so that a document that
// states a default and one that omits it encode identically.
func (d *Document) normalise() {
	if d.Permissions == nil {
		d.Permissions = []string{}
	}
	if d.Mode == "" {
		d.Mode = ModeStrict
	}
	if d.Limits.HoldTimeoutMS == 0 {
		d.Limits.HoldTimeoutMS = DefaultHoldTimeoutMS
	}
	if d.Routes != nil {
		d.Routes.normalise()
	}
}
