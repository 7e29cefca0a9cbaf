// Package shard is one CPU's slice of tollgated: it owns the admission
// state of the accounts it serves (a core.Engine), verifies customer keys
// with a bounded per-shard cache, answers the data-plane HTTP API, and talks
// to the control plane only through two SPSC rings. Everything in a Shard
// runs on its own pinned thread: no locks, no allocation per request.
package shard

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"io"
	mrand "math/rand/v2"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/tollgated/tollgated/clock"
	"github.com/tollgated/tollgated/control/message"
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
	"github.com/tollgated/tollgated/ring"
)

// Config sets a shard's fixed limits.
type Config struct {
	ID              uint16
	Secret          []byte // server secret for key digests, ≥ 32 bytes
	MaxReservations int    // reservations in flight on this shard
	CredentialCache int    // verified keys remembered
	CredentialTTL   int64  // ns a verified key is trusted before re-verifying
	// KeyUseReport is how often (ns) the shard reports the keys that
	// authenticated on it, for their last use (30 s).
	KeyUseReport int64
	// UsageHeadroom is ring capacity kept free of usage reservations, for
	// refill and forwarding messages.
	UsageHeadroom int
	// AckDurable holds answers that report billed usage until the control
	// plane says the usage is durable (its DurableMark); AckQueue bounds how many
	// wait at once (default DefaultAckQueue).
	AckDurable bool
	AckQueue   int
	// FundingWait is how long (ns) a request refused for want of funding
	// on this shard waits for it before it is answered (see fundwait.go):
	// 0 means DefaultFundingWait, NoFundingWait none. FundingWaiters bounds
	// how many wait at once (default DefaultFundingWaiters).
	FundingWait    int64
	FundingWaiters int
	// Syncing, shared with the control plane, spares HandOver a ring
	// while a spool sync is in flight; nil rings whenever the plane naps.
	Syncing *SpoolSyncing
	// Storage, shared with the spool's health, refuses requests that would
	// bill while the spool cannot take records (storage.go); nil never
	// refuses.
	Storage *Storage
	// PanicLog receives the one log line a shard writes when it recovers
	// from a panic in a decoder (recover.go); nil means standard error.
	PanicLog io.Writer
	// AuthzKeyHeader names the header /v1/authz reads the customer's key
	// from, whole; "" (or Authorization) reads Authorization: Bearer.
	AuthzKeyHeader string
	// Clock is the time Request.Now is read on (the node's clock.Clock);
	// latency is measured on it too. nil: the wall clock.
	Clock *clock.Clock
}

// MaxWorkLines bounds the lines of one workload.
const MaxWorkLines = 64

// Shard is one shard's state. Only its own thread calls its methods.
type Shard struct {
	cfg     Config
	polling bool // inside Poll: Serve must not be called
	engine  *core.Engine
	hasher  *credential.Hasher
	cache   *credential.Cache
	keys    map[core.Principal]credential.Digest
	// platform holds the platform tokens (seed 000 callers): a separate set,
	// so a customer key can never call platform routes, nor a token admit.
	platform map[core.Principal]credential.Digest
	// grantSeq is the sequence of the last grant applied per account; refill
	// requests carry it so the control plane ignores ones it already answered.
	grantSeq map[core.AccountID]uint64
	// starvedAt is when each account's starved share was last reported.
	starvedAt map[core.AccountID]int64
	// keysReportAt is when the next report of used keys is due.
	keysReportAt int64

	inbox  *ring.Doorbell[message.Inbound]  // control plane → shard
	outbox *ring.Doorbell[message.Outbound] // shard → control plane

	usageReserved int
	usageSeq      uint64 // sequence of the last usage event (or commit) sent
	mark          *DurableMark
	answerHeaders bool   // the answer being written carries parkedHeaders (authz)
	markSeen      uint64 // the mark as last applied
	waker         Waker
	pendingOut    []message.Outbound // messages waiting for ring room (outbox.go)
	acks          ackQueue
	fillAck       func(*fasthttp.Response)
	postPaid      *message.PostPaidBatch // the batch being answered
	fillPostPaid  func(*fasthttp.Response)

	parser  fastjson.Parser
	authz   authzRequest // the original request of the forward-auth call being served
	work    [MaxWorkLines]core.WorkItem
	refills []core.RefillRequest
	retired []core.LeaseReturn
	// reclaims are the plane's asks for unspent units (message.InReclaimLease)
	// that one Poll applied, handed back once its waiters have run.
	reclaims []message.Inbound
	rng      *mrand.ChaCha8
	out      []byte // response body scratch
	hdr      []byte // header value scratch
	ready    bool
	inbuf    [64]message.Inbound

	// resCipher and resWire encode reservation ids (ops.go).
	resCipher cipher.Block
	resWire   [2 + aes.BlockSize]byte

	waits      fundingWaits
	waiting    *fundingWaiter // the waiter being run again
	waitKept   bool           // it is to keep waiting
	waitReq    Request        // the request it is run again as
	waitResp   fasthttp.Response
	fillWaiter func(*fasthttp.Response)

	complete  Completer
	fillReply func(*fasthttp.Response)
	reply     opOutcome
	replyOp   message.Op

	waited, waitsFull, waitsExpired, waitsAbandoned uint64
	pending                                         func(ticket uint64) bool
	pub                                             publishedStats

	// Decoding (decode.go): where a decoder reads, the refused field's
	// path and a number's text, scratch reused by every request; panics
	// recovered in decoders, and the hook tests use to cause one.
	field           []byte
	at              fieldAt
	num             []byte
	internalErrors  uint64
	testDecodeFault func()
	// platformStats counts the platform routes' answers (stats.go).
	platformStats PlatformStats
	// lat times every answer, per route (latency.go).
	lat latencyRecorder
}

// New returns a shard that receives from in and sends to out.
func New(cfg Config, in *ring.Doorbell[message.Inbound], out *ring.Doorbell[message.Outbound]) (*Shard, error) {
	h, err := credential.NewHasher(cfg.Secret)
	if err != nil {
		return nil, err
	}
	if cfg.CredentialCache <= 0 {
		cfg.CredentialCache = 4096
	}
	if cfg.CredentialTTL <= 0 {
		cfg.CredentialTTL = 60e9
	}
	if cfg.KeyUseReport <= 0 {
		cfg.KeyUseReport = 30e9
	}
	if cfg.UsageHeadroom <= 0 {
		cfg.UsageHeadroom = 64
	}
	if cfg.AckQueue <= 0 {
		cfg.AckQueue = DefaultAckQueue
	}
	if cfg.FundingWait == 0 {
		cfg.FundingWait = DefaultFundingWait
	}
	if cfg.FundingWaiters <= 0 {
		cfg.FundingWaiters = DefaultFundingWaiters
	}
	var seed [32]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, err
	}
	s := &Shard{
		cfg:       cfg,
		engine:    core.NewEngine(core.Config{MaxReservations: cfg.MaxReservations}),
		hasher:    h,
		cache:     credential.NewCache(cfg.CredentialCache),
		keys:      make(map[core.Principal]credential.Digest),
		platform:  make(map[core.Principal]credential.Digest),
		grantSeq:  make(map[core.AccountID]uint64),
		starvedAt: make(map[core.AccountID]int64),
		inbox:     in,
		outbox:    out,
		rng:       mrand.NewChaCha8(seed),
		out:       make([]byte, 0, 512),
		hdr:       make([]byte, 0, 32),
		field:     make([]byte, 0, 128),
		lat:       latencyRecorder{clock: cfg.Clock.Now},
		num:       make([]byte, 0, 32),
		mark:      new(DurableMark),
	}
	s.waker.s = s
	s.resCipher = reservationKey()
	if cfg.AckDurable {
		s.acks = newAckQueue(cfg.AckQueue)
	}
	s.waits = newFundingWaits(cfg.FundingWaiters)
	s.waitReq = Request{Resp: &s.waitResp, Defer: s.waitTicket}
	s.fillWaiter = s.writeWaiter
	s.fillAck = s.writeAck // bound once: completing allocates nothing
	s.fillPostPaid = s.writePostPaid
	return s, nil
}
