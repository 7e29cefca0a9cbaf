package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNodeLive refuses a claim on a node id another live process holds.
var ErrNodeLive = errors.New("pgstore: another live process holds this node id")

// A node's claim on its id is a PostgreSQL advisory lock at connection level, held by a
// connection of its own (application_name tollgated-claim) for as long as
// the node runs. PostgreSQL drops a connection's locks when it
// closes, so a node killed with SIGKILL leaves its id free at once for its
// restart, while a second process started under a live node's id — on a
// copy of its data directory, or on an empty one — is refused.
const (
	claimApp = "tollgated-claim"
	// claimPing is how often a held claim checks its connection: after a
	// restart of the database the claim is taken again within about this
	// long of the database answering, before a second process could.
	claimPing = time.Second
)

// Claim is a held claim on a node id; Release ends it.
type Claim struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// claimKey is the advisory lock key of node: 64 bits of a hash of it, in
// the single-key space the migrations' lock also uses (a collision between
// two node ids, or with that key, is a 2^-64 chance).
func claimKey(node string) int64 {
	h := sha256.Sum256([]byte("tollgated node claim\x00" + node))
	return int64(binary.BigEndian.Uint64(h[:8]))
}

// Claim takes node's claim, or fails with ErrNodeLive when another connection
// holds it. The claim is kept until Release: when its connection fails (the
// database restarts, a network cut), it is taken again on a new connection
// as soon as the database answers. If another connection took it meanwhile,
// two processes now hold one node id, and lost is called, once, with
// ErrNodeLive: the caller must stop serving.
func (s *Store) Claim(ctx context.Context, node string, lost func(error)) (*Claim, error) {
	conn, err := s.takeClaim(ctx, node)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &Claim{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		s.holdClaim(ctx, conn, node, lost)
	}()
	return c, nil
}

// Release gives the claim up and waits until its connection is closed.
func (c *Claim) Release() {
	c.cancel()
	<-c.done
}

// takeClaim opens a connection and takes node's lock on it.
func (s *Store) takeClaim(ctx context.Context, node string) (*pgx.Conn, error) {
	cfg := s.b.connCfg.Copy()
	cfg.RuntimeParams["application_name"] = claimApp
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: claiming node %q: %w", node, err)
	}
	var held bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", claimKey(node)).Scan(&held); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("pgstore: claiming node %q: %w", node, err)
	}
	if !held {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w: node %q", ErrNodeLive, node)
	}
	return conn, nil
}

// holdClaim keeps the claim until ctx ends: it pings its connection every
// claimPing and, when the connection fails, takes the claim again on a new
// one, retrying with back-off while the database is away.
func (s *Store) holdClaim(ctx context.Context, conn *pgx.Conn, node string, lost func(error)) {
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	backoff := listenBackoffMin
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(claimPing):
		}
		if conn != nil {
			if err := conn.Ping(ctx); err == nil || ctx.Err() != nil {
				continue
			}
			conn.Close(context.Background())
			conn = nil
		}
		next, err := s.takeClaim(ctx, node)
		switch {
		case err == nil:
			conn, backoff = next, listenBackoffMin
		case errors.Is(err, ErrNodeLive):
			if lost != nil {
				lost(err)
			}
			return
		default: // the database is away: try again
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, listenBackoffMax)
		}
	}
}
