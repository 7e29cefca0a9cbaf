package shard

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
)

// A reservation id on the wire is its owner shard in the clear (4 hex
// digits: any shard can forward an operation to the owner) and 32 hex
// digits of one AES block under a key drawn from crypto/rand once per
// process: the engine's handle (slot and generation, 8 bytes), the shard
// again (2 bytes) and 6 zero bytes. The handle alone is a counter — the
// next reservation's id differs from the last one's in a bit or two — so a
// client that saw one could guess another's; encrypted, consecutive ids
// look unrelated, and an id that was not issued decrypts to a block whose
// 64 redundant bits (the shard and the zeros) match with probability
// 2^-64. Ids do not outlive the process; nor do reservations (a restart
// bills or releases every open one from its commit journal).
const reservationLen = 36

// reservationKey is the process's reservation-id key, drawn once.
var reservationKey = sync.OnceValue(func() cipher.Block {
	var key [32]byte
	rand.Read(key[:]) // never fails (crypto/rand)
	b, err := aes.NewCipher(key[:])
	if err != nil {
		panic("shard: reservation-id cipher: " + err.Error())
	}
	return b
})

// appendReservation appends r's wire id. It allocates nothing: the block
// is ciphered in the shard's own buffer (a stack array passed to the
// cipher's interface method would escape to the heap).
func (s *Shard) appendReservation(b []byte, r core.Reservation) []byte {
	return appendReservationID(b, &s.resWire, s.resCipher, s.cfg.ID, r.ID())
}

// appendReservationID appends the wire id of engine handle id on shard,
// ciphered by c in w.
func appendReservationID(b []byte, w *[2 + aes.BlockSize]byte, c cipher.Block, shard uint16, id uint64) []byte {
	binary.BigEndian.PutUint16(w[0:2], shard)
	binary.BigEndian.PutUint64(w[2:10], id)
	binary.BigEndian.PutUint16(w[10:12], shard)
	clear(w[12:])
	c.Encrypt(w[2:], w[2:])
	return hex.AppendEncode(b, w[:])
}

// parseReservation reads a wire id: its owner shard and the engine handle,
// ok only for an id this process issued (or one chance in 2^64).
func (s *Shard) parseReservation(text []byte) (shard uint16, id uint64, ok bool) {
	if len(text) != reservationLen {
		return 0, 0, false
	}
	for _, c := range text {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return 0, 0, false
		}
	}
	w := &s.resWire
	if _, err := hex.Decode(w[:], text); err != nil {
		return 0, 0, false
	}
	shard = binary.BigEndian.Uint16(w[0:2])
	s.resCipher.Decrypt(w[2:], w[2:])
	redundant := uint64(binary.BigEndian.Uint16(w[10:12])^shard)<<48 | uint64(w[12])<<40 | uint64(w[13])<<32 |
		uint64(binary.BigEndian.Uint32(w[14:18]))
	if redundant != 0 {
		return 0, 0, false
	}
	return shard, binary.BigEndian.Uint64(w[2:10]), true
}

// Fields of a commit or cancel body, and of a finish body.
var (
	reservationFields = [...]string{"reservation"}
	finishFields      = [...]string{"reservation", "units"}
)

// decodeReservation reads {"reservation":"…"} (and "units" for finish; see
// decode.go for the rules every field follows). units is MaxCostUnits when
// finish names none, meaning "bill the quote": no integer a client can
// send reaches it.
func (s *Shard) decodeReservation(body []byte, op message.Op) (owner uint16, id uint64, units core.CostUnits, p fieldProblem) {
	defer s.recoverDecode(&p)
	s.faultIn()
	o, p := s.object(body, maxReservationBody)
	if p.refused() {
		return 0, 0, 0, p
	}
	names := reservationFields[:]
	if op == message.OpFinish {
		names = finishFields[:]
	}
	var f [len(finishFields)]*fastjson.Value
	if p = s.fields(o, names, f[:len(names)]); p.refused() {
		return 0, 0, 0, p
	}
	rb, p := s.text(f[0], "reservation", reservationLen, detailReservation)
	if p.refused() {
		return 0, 0, 0, p
	}
	units = core.MaxCostUnits
	if f[1] != nil {
		n, p := s.integer(f[1], "units", 0, maxInt, detailUnits)
		if p.refused() {
			return 0, 0, 0, p
		}
		units = core.CostUnits(n)
	}
	// Read after every field's type is checked, so that a body's first
	// mistake is named whatever the id says.
	owner, id, ok := s.parseReservation(rb)
	if !ok {
		s.refuseField("reservation")
		return 0, 0, 0, invalid(detailReservation)
	}
	return owner, id, units, p
}

// opOutcome is the result of a reservation operation, small enough to
// travel back through a ring when the operation was forwarded.
type opOutcome struct {
	status uint16
	code   outcomeCode
	reason core.DenyReason
	billed core.CostUnits
}

type outcomeCode uint8

const (
	outcomeOK outcomeCode = iota
	outcomeDenied
	outcomeUnknown
	outcomeAlreadyCommitted
	outcomeNotCommitted
	outcomeCancelled
	outcomeAboveQuote
)

var outcomeProblems = [...]struct {
	status      int
	code, title string
}{
	outcomeUnknown:          {fasthttp.StatusNotFound, "unknown-reservation", "No such reservation, or it has ended"},
	outcomeAlreadyCommitted: {fasthttp.StatusConflict, "already-committed", "Reservation already committed; finish it"},
	outcomeNotCommitted:     {fasthttp.StatusConflict, "not-committed", "Reservation is not committed"},
	outcomeCancelled:        {fasthttp.StatusConflict, "cancelled", "Reservation was cancelled"},
	outcomeAboveQuote:       {fasthttp.StatusUnprocessableEntity, "billed-above-quote", "Billed units exceed the quote"},
}

// runOp applies op to a reservation this shard owns, for principal p. A
// reservation p may not end (mayEnd) is reported unknown: its existence is
// not the caller's to learn.
func (s *Shard) runOp(op message.Op, r core.Reservation, p core.Principal, units core.CostUnits, now int64) opOutcome {
	if !s.mayEnd(r, p) {
		return opOutcome{code: outcomeUnknown}
	}
	var err error
	var billed core.CostUnits
	switch op {
	case message.OpCommit:
		if !s.reserveUsage() {
			s.engine.CountDenial(core.DenyAccountingBackpressure)
			return opOutcome{code: outcomeDenied, reason: core.DenyAccountingBackpressure}
		}
		if err = s.engine.AcquireCapacity(r); err == nil {
			err = s.engine.Commit(r, s.requestID(now), now)
		}
		if ev, ok := s.engine.Committed(r, now); err == nil && ok {
			s.sendReserved(message.OutCommit, &ev) // the journal entry: billed at its quote if this node dies before it ends
		} else {
			s.Release()
		}
	case message.OpFinish:
		if units == core.MaxCostUnits {
			units = s.engine.Quote(r)
		}
		billed, err = s.engine.Finish(r, units, now)
	case message.OpCancel:
		err = s.engine.Cancel(r, now)
	}
	if reason := core.ReasonOf(err); reason != core.DenyNone {
		return opOutcome{code: outcomeDenied, reason: reason}
	}
	switch {
	case err == nil:
		return opOutcome{code: outcomeOK, billed: billed}
	case errors.Is(err, core.ErrAlreadyCommitted):
		return opOutcome{code: outcomeAlreadyCommitted}
	case errors.Is(err, core.ErrNotCommitted), errors.Is(err, core.ErrNotReady):
		return opOutcome{code: outcomeNotCommitted}
	case errors.Is(err, core.ErrCancelled):
		return opOutcome{code: outcomeCancelled}
	case errors.Is(err, core.ErrBilledAboveQuote):
		return opOutcome{code: outcomeAboveQuote}
	}
	return opOutcome{code: outcomeUnknown}
}

// answerOp writes an operation's outcome.
func (s *Shard) answerOp(resp *fasthttp.Response, op message.Op, o opOutcome) {
	switch o.code {
	case outcomeOK:
		b := s.out[:0]
		switch op {
		case message.OpCommit:
			b = append(b, `{"committed":true}`...)
		case message.OpFinish:
			b = append(b, `{"billed":`...)
			b = strconv.AppendUint(b, uint64(o.billed), 10)
			b = append(b, '}')
		case message.OpCancel:
			b = append(b, `{"cancelled":true}`...)
		}
		s.writeJSON(resp, fasthttp.StatusOK, b)
	case outcomeDenied:
		s.writeDenial(resp, core.Denial{Reason: o.reason})
	default:
		p := outcomeProblems[o.code]
		s.writeProblem(resp, p.status, p.code, p.title)
	}
}

func (s *Shard) writeJSON(resp *fasthttp.Response, status int, body []byte) {
	s.out = body
	resp.SetStatusCode(status)
	resp.Header.SetContentTypeBytes(applicationJSON)
	resp.SetBody(body)
}

// requestID names a billed request: the microsecond it was committed,
// modulo 2^48 (the shift drops the top bits: it wraps every 8.9 years),
// and the shard (high 64 bits), then 64 random bits from the shard's own
// generator — no syscall, no lock, no allocation. Ids that grow with time
// keep the ledger's event index append-mostly: ingest touches the right
// edge of its B+tree instead of a random page per event.
func (s *Shard) requestID(now int64) core.RequestID {
	return core.RequestID{Hi: uint64(now/1e3)<<16 | uint64(s.cfg.ID), Lo: s.rng.Uint64()}
}

// The plane answers a forward it cannot route with outcomeUnknown (these
// fail to compile otherwise).
const (
	_ = uint(message.ReplyUnknownReservation - uint16(outcomeUnknown))
	_ = uint(uint16(outcomeUnknown) - message.ReplyUnknownReservation)
)
