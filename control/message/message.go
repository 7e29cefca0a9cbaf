// Package message is the contract between the control plane and its
// shards: the fixed-size messages each side pushes into the other's ring.
// Both sides import it and nothing else of each other's, so the plane's
// state machines (control/plane and its parts) never see a shard's
// transport, parser or engine, and a shard never sees the plane's state.
// It is the project's equivalent of raft's raftpb.
package message

import (
	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/credential"
)

// InKind says what an Inbound message asks a shard to do.
type InKind uint8

const (
	InInstall        InKind = iota + 1 // install Snap (new account or newer generation)
	InBind                             // Principal (with Digest) acts for Account
	InUnbind                           // revoke Principal
	InGrant                            // lease funding for Account: Token, Units, Until, LowWater
	InEvidence                         // attach Evidence cell to Account
	InForward                          // run Op on a reservation this shard owns, reply to From
	InReply                            // the answer to an operation this shard forwarded
	InReclaimLease                     // give back Account's unspent units of lease Token (0: the current one), keeping it current, and of idle retired leases
	InReady                            // initial state delivered: /readyz may say ready
	InShare                            // set Account's Share of its limits; the shard acknowledges Seq
	InBindPlatform                     // the platform token with Digest may call seed-000 routes
	InUnbindPlatform                   // revoke the platform token Principal
	InPostPaidDone                     // the post-paid Batch of Ticket is billed (or Failed)
	InRetireLease                      // lease Token of Account is being handed back: stop using it, return its units (the rest once its reservations settle)
	InExtendLease                      // lease Token of Account is usable until Until
	InFundingNews                      // Account's funding evidence moved: run its requests waiting for funding again
)

// Inbound is one message from the control plane to a shard. Messages are
// fixed-size values carried by a ring; pointers in them refer to immutable
// data (snapshots), to cells the control plane owns, or to a post-paid
// batch, which only the side holding the message touches.
type Inbound struct {
	Kind      InKind
	Op        Op
	From      uint16 // shard that forwarded the operation
	Status    uint16 // InReply: the answer's outcome (ReplyUnknownReservation, or the owner's own)
	Reason    core.DenyReason
	Principal core.Principal
	Digest    credential.Digest
	Account   core.AccountID
	Snap      *core.Snapshot
	Evidence  *core.EvidenceCell
	Token     uint64
	Units     core.CostUnits
	Until     int64
	LowWater  core.CostUnits
	Res       uint64 // reservation handle (core.Reservation.ID)
	Ticket    uint64 // the forwarding shard's deferred-request ticket
	Share     core.Share
	Seq       uint64
	Batch     *PostPaidBatch
}

// Op is a reservation operation that may be forwarded between shards.
type Op uint8

const (
	OpCommit Op = iota + 1
	OpFinish
	OpCancel
)

// OutKind says what an Outbound message tells the control plane.
type OutKind uint8

const (
	OutUsage    OutKind = iota + 1 // Usage is billed; Seq numbers it for the DurableMark
	OutRefill                      // Account wants more funding (Units left, Needed)
	OutReturn                      // Account's lease Token returns Units unspent
	OutForward                     // forward Op on Res to shard To
	OutReply                       // answer to a forwarded Op, for shard To
	OutStarved                     // Account's share refused a request here
	OutShareAck                    // Account's share Seq applied, with InFlight reservations held
	OutPostPaid                    // bill post-paid Batch, then answer Ticket
	OutCommit                      // Usage (Units = its quote) was committed: journal it; Seq numbers it like usage
	OutKeyUsed                     // the key of Principal authenticated here lately (coarse: see Config.KeyUseReport)
)

// Outbound is one message from a shard to the control plane.
type Outbound struct {
	Kind      OutKind
	Op        Op
	From      uint16
	To        uint16
	Status    uint16
	Reason    core.DenyReason
	Account   core.AccountID
	Usage     core.UsageEvent
	Token     uint64
	Units     core.CostUnits
	Needed    core.CostUnits
	Res       uint64
	Ticket    uint64
	Principal core.Principal
	Seq       uint64
	InFlight  uint32
	Batch     *PostPaidBatch
}

// ReplyUnknownReservation is the InReply status (a shard's outcome code)
// for a reservation no shard owns, for the control plane to answer a
// forward it cannot route.
const ReplyUnknownReservation uint16 = 2

// MaxEventIDLen bounds a post-paid event's id as its reporter sent it.
const MaxEventIDLen = 128

// PostPaid is one reported event. ID is derived from the client's id, so
// the same id reported twice is one event; EventID is the client's id as
// sent, which the billed-event stream shows.
type PostPaid struct {
	ID         [16]byte
	EventID    string
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
