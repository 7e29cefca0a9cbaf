package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The schema is a sequence of migrations, migrations/NNNN_name.sql, applied
// in order and never edited once released: a change is a new file. Each
// runs in its own transaction together with its row in schema_migrations.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLock is the pg_advisory_lock key under which nodes migrate, one
// at a time: the others wait, then find nothing left to do.
const migrationLock = 0x746f6c6c67617465 // "tollgate"

// ErrSchemaTooNew reports a database migrated by a newer build: this one
// would not know its tables, so it refuses to touch it.
var ErrSchemaTooNew = errors.New("pgstore: the database's schema is newer than this build knows; upgrade tollgated")

type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order, checking
// that versions run 1, 2, 3… without gaps or repeats.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries { // ReadDir sorts by name, and names lead with zero-padded versions
		v, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		version, err := strconv.Atoi(v)
		if !ok || err != nil || version != len(out)+1 {
			return nil, fmt.Errorf("pgstore: migration %s: want %04d_name.sql", e.Name(), len(out)+1)
		}
		b, err := migrationFiles.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: version, name: name, sql: string(b)})
	}
	return out, nil
}

// SchemaVersion is the newest schema this build knows.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil {
		panic(err) // the embedded files are part of the build: tested
	}
	return len(ms)
}

// Migrate brings the database at url to SchemaVersion, as Open does, and
// closes its connections: for installers and for test templates.
func Migrate(ctx context.Context, url string) error {
	s, err := Open(ctx, url, Options{MaxConns: 1})
	if err != nil {
		return err
	}
	return s.Close()
}

// migrate brings the database to SchemaVersion under the migration lock,
// or refuses a newer one.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	return migrateTo(ctx, pool, ms)
}

// migrateTo applies those of ms the database lacks (tests pass a prefix of
// migrations(), to make a database as an older build left it).
func migrateTo(ctx context.Context, pool *pgxpool.Pool, ms []migration) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	defer conn.Release()
	// A session lock, held across the migrations' own transactions.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrationLock)); err != nil {
		return fmt.Errorf("pgstore: waiting for the migration lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrationLock))
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	var current int
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&current); err != nil {
		return fmt.Errorf("pgstore: reading the schema version: %w", err)
	}
	if current > len(ms) {
		return fmt.Errorf("%w (database at version %d, this build at %d)", ErrSchemaTooNew, current, len(ms))
	}
	for _, m := range ms[current:] {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("pgstore: migration %04d_%s: %w", m.version, m.name, err)
		}
	}
	return nil
}
