package pgstore

// The change log: how every node of a fleet learns what another changed.
//
// Each transaction that changes an account's configuration (creation,
// status, policy, budget or a rollover, a deposit), a key (added, revoked,
// rotated or expired), a platform token or an admin token appends one row
// per change to the changes table and, in the same statement, NOTIFYs
// NotifyChannel with the newest id. Ids come from a counter row that the
// transaction holds locked until it commits, so they are committed in
// order, without gaps: a reader that has seen id n has seen every change
// up to n, and reading the log after the last id it saw (ChangesAfter) is
// a complete catch-up — after a reconnection, a restart or a lost
// notification alike. Follow combines the two.
//
// Money moved by leases and usage is not logged: it is the data plane's
// traffic, and every grant returns the funding evidence with it; what
// usage moves is announced without a log (funds.go). Nor is a key's last
// use (MarkKeysUsed), reported by the data plane in batches.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgated/tollgated/core"
	"github.com/tollgated/tollgated/ledger"
)

// NotifyChannel is the channel changes are announced on; the payload is
// the newest change id, in decimal.
const NotifyChannel = "tollgated_changes"

// ChangeKind says what a change changed.
type ChangeKind string

const (
	ChangeAccount       ChangeKind = "account"        // created
	ChangeStatus        ChangeKind = "status"         // active, suspended, closed
	ChangePolicy        ChangeKind = "policy"         // a new policy document
	ChangeBudget        ChangeKind = "budget"         // a new budget, or a period rolled over
	ChangeDeposit       ChangeKind = "deposit"        // a top-up
	ChangeKey           ChangeKind = "key"            // added, revoked, or its expiry moved (rotation) or reached
	ChangePlatformToken ChangeKind = "platform_token" // added or revoked
	ChangeAdminToken    ChangeKind = "admin_token"    // added (the bootstrap one included) or revoked
)

// Change is one entry of the change log.
type Change struct {
	ID      uint64
	Kind    ChangeKind
	Account core.AccountID // the account changed, or the key's account; "" for tokens
	Key     string         // the key's id, for ChangeKey
	Token   string         // the platform or admin token's id, for ChangePlatformToken and ChangeAdminToken
	At      time.Time      // the changing transaction's start, by the database's clock
	// Heard (set by Follow) says the follower had heard of the change —
	// its notification, or the newest id read at a (re)connection — when
	// it read it; false: its periodic poll found it unannounced (a lost
	// notification, or a rare read between a commit and its notification).
	Heard bool
}

type change struct {
	kind                ChangeKind
	account, key, token string
}

// change appends an entry to the transaction's change log.
func (x *pgTx) change(kind ChangeKind, account core.AccountID, key, token string) {
	x.changes = append(x.changes, change{kind: kind, account: string(account), key: key, token: token})
}

// logChangesSQL takes len($2) ids from the changes counter (whose row lock,
// held to commit, orders the ids by commit), writes the entries and
// announces the newest id.
const logChangesSQL = `WITH head AS (
		UPDATE counters SET value = value + $1 WHERE name = 'changes' RETURNING value),
	logged AS (
		INSERT INTO changes (id, kind, account, key_id, token_id)
		SELECT head.value - $1 + c.n, c.kind, nullif(c.account, ''), nullif(c.key_id, ''), nullif(c.token_id, '')
		FROM head, unnest($2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS c(kind, account, key_id, token_id, n)
		RETURNING id)
	SELECT pg_notify('` + NotifyChannel + `', max(id)::text) FROM logged`

// flushChanges queues the change log entries, if any.
func (x *pgTx) flushChanges(b *pgx.Batch) {
	if len(x.changes) == 0 {
		return
	}
	kinds, accounts, keys, tokens := make([]string, len(x.changes)), make([]string, len(x.changes)), make([]string, len(x.changes)), make([]string, len(x.changes))
	for i, c := range x.changes {
		kinds[i], accounts[i], keys[i], tokens[i] = string(c.kind), c.account, c.key, c.token
	}
	b.Queue(logChangesSQL, int64(len(x.changes)), kinds, accounts, keys, tokens)
}

// LastChange returns the id of the newest committed change (0: none yet).
func (s *Store) LastChange(ctx context.Context) (uint64, error) {
	return lastChange(ctx, s.pool)
}

func lastChange(ctx context.Context, q querier) (uint64, error) {
	var v int64
	if err := q.QueryRow(ctx, "SELECT value FROM counters WHERE name = 'changes'").Scan(&v); err != nil {
		return 0, fmt.Errorf("pgstore: reading the change log head: %w", err)
	}
	return uint64(v), nil
}

// ChangesAfter returns up to limit changes with ids above after, in id
// order.
func (s *Store) ChangesAfter(ctx context.Context, after uint64, limit int) ([]Change, error) {
	if limit <= 0 || after > 1<<63-1 {
		return nil, fmt.Errorf("%w: changes after %d, limit %d", ledger.ErrInvalid, after, limit)
	}
	return collect(ctx, s.pool, func(row pgx.Row) (c Change, err error) {
		var id int64
		var kind, account string
		err = row.Scan(&id, &kind, &account, &c.Key, &c.Token, &c.At)
		c.ID, c.Kind, c.Account = uint64(id), ChangeKind(kind), core.AccountID(account)
		return c, err
	}, `SELECT id, kind, coalesce(account, ''), coalesce(key_id, ''), coalesce(token_id, ''), at
		FROM changes WHERE id > $1 ORDER BY id LIMIT $2`, int64(after), limit)
}

// Listening: how long a quiet connection waits before it is pinged (a
// half-open TCP connection would otherwise wait forever), and the bounds
// of the back-off between reconnections.
const (
	listenPing       = 15 * time.Second
	listenBackoffMin = 50 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// errListener wraps an error of Listen's callback, which ends Listen.
type errListener struct{ err error }

func (e errListener) Error() string { return e.err.Error() }

// Listen calls fn with the newest change id each time a change is
// announced, and once after every (re)connection with the newest id at
// that moment, which covers what was announced while it was not
// listening. Calls are sequential, from the calling goroutine. Listen uses
// a connection of its own, outside the pool, and reconnects after any
// failure, backing off from 50 ms to 5 s. It returns when ctx ends (with
// ctx's error) or fn returns an error (with that error).
func (s *Store) Listen(ctx context.Context, fn func(last uint64) error) error {
	return s.listenLoop(ctx, NotifyChannel, "tollgated-listen",
		func(ctx context.Context, conn *pgx.Conn) error {
			last, err := lastChange(ctx, conn)
			if err != nil {
				return err
			}
			if err := fn(last); err != nil {
				return errListener{err}
			}
			return nil
		},
		func(payload string) error {
			id, err := strconv.ParseUint(payload, 10, 64)
			if err != nil {
				return nil // not ours: someone else NOTIFYs on the channel
			}
			return fn(id)
		})
}

// listenLoop listens on channel, on a connection named app (its
// application_name), until ctx ends or a callback fails:
// connected runs after each (re)connection (an errListener it returns ends
// the loop, any other error reconnects), notified with each notification's
// payload (any error ends the loop).
func (s *Store) listenLoop(ctx context.Context, channel, app string, connected func(context.Context, *pgx.Conn) error, notified func(payload string) error) error {
	backoff := listenBackoffMin
	for {
		started := time.Now()
		err := s.listen(ctx, channel, app, connected, notified)
		var stop errListener
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &stop):
			return stop.err
		}
		if time.Since(started) > listenBackoffMax {
			backoff = listenBackoffMin // it was up for a while: this is a new failure
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, listenBackoffMax)
	}
}

// listen is one connection's life: LISTEN, run connected, then pass every
// notification to notified until the connection fails.
func (s *Store) listen(ctx context.Context, channel, app string, connected func(context.Context, *pgx.Conn) error, notified func(payload string) error) error {
	cfg := s.b.connCfg.Copy()
	cfg.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		return err
	}
	if err := connected(ctx, conn); err != nil {
		return err
	}
	for {
		wait, cancel := context.WithTimeout(ctx, listenPing)
		n, err := conn.WaitForNotification(wait)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			if err := conn.Ping(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if err := notified(n.Payload); err != nil {
			return errListener{err}
		}
	}
}

// Follow calls fn with every change after the id after, in id order, each
// once, as changes commit: it reads the log (ChangesAfter) whenever Listen
// says there is more, and every followPoll in case a read failed. It
// returns when ctx ends or fn returns an error.
func (s *Store) Follow(ctx context.Context, after uint64, fn func(Change) error) error {
	ctx, cancel := context.WithCancel(ctx)
	wake := make(chan struct{}, 1)
	listening := make(chan struct{})
	var heard atomic.Uint64 // the newest id Listen announced; only its goroutine writes
	go func() {
		defer close(listening)
		s.Listen(ctx, func(id uint64) error {
			if id > heard.Load() {
				heard.Store(id)
			}
			select {
			case wake <- struct{}{}:
			default: // a wake-up is already pending: it reads everything
			}
			return nil
		})
	}()
	defer func() { cancel(); <-listening }()
	mark := after
	for {
		for {
			cs, err := s.ChangesAfter(ctx, mark, followBatch)
			if err != nil {
				break // the database is away: the next wake-up or poll reads again
			}
			for _, c := range cs {
				c.Heard = c.ID <= heard.Load()
				if err := fn(c); err != nil {
					return err
				}
				mark = c.ID
			}
			if len(cs) < followBatch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		case <-time.After(followPoll):
		}
	}
}

// Follow reads the log in batches of followBatch, and polls it every
// followPoll besides the notifications.
const (
	followBatch = 1000
	followPoll  = 2 * time.Second
)
