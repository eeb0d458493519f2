// Package store keeps the daemon's state in one SQLite file,
// <DataDir>/state.db: sandboxes, API keys and an append-only event log.
// Every fact the daemon needs after a restart lives here.
//
// The file is opened twice through modernc.org/sqlite (pure Go): one
// connection for writes, so writers queue in Go instead of spinning on
// SQLITE_BUSY, and a small pool for reads, which WAL mode lets run next to
// the writer. Write transactions begin IMMEDIATE, so a read-modify-write
// never fails on a lock upgrade, and busy_timeout covers a second process
// on the same file. synchronous=NORMAL in WAL mode keeps a commit well
// under a millisecond; a power cut can lose the last commits but never
// corrupts the file.
//
// One Store, in the daemon, is the file's only writer: the tenants and
// each tenant's usage are kept in memory next to their rows, loaded at
// Open and changed by the Store's own writes (tenants.go, usage.go), so
// a quota check reads nothing. Open the file from another process only
// to read it.
//
// Times are stored as unix milliseconds, so they come back truncated to
// the millisecond and in UTC.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/agentbox/agentbox/errdefs"
)

// busyTimeoutMs is how long a statement waits for another process's lock.
const busyTimeoutMs = 10000

// readConns is the size of the read pool.
const readConns = 4

// Store is the daemon's state. Its methods are safe for concurrent use.
type Store struct {
	path string
	w    *sql.DB // one connection: all writes
	r    *sql.DB // a few read-only connections

	stmts statements

	// usage is every tenant's usage, moved by each sandbox write (usage.go).
	usage usage
	// tenants are the tenant records (tenants.go).
	tenants tenantCache
	// keysVersion is what KeysVersion returns (keys.go).
	keysVersion atomic.Uint64
	// observer is told of sandbox writes (observe.go).
	observer atomic.Pointer[SandboxObserver]
}

// Open opens (creating if needed, mode 0600) the SQLite file at path and
// brings its schema up to date.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" || strings.ContainsRune(path, '?') {
		return nil, errdefs.Invalid("state database path %q must be a file name without '?'", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating state directory: %w", err)
	}
	// Create the file ourselves so that it (and the -wal and -shm files,
	// which SQLite gives the same mode) is never readable by others.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening state database: %w", err)
	}
	f.Close()

	common := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)", busyTimeoutMs)
	w, err := sql.Open("sqlite", path+"?"+common+
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("opening state database: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	s := &Store{path: path, w: w}
	if err := s.migrate(ctx); err != nil {
		w.Close()
		return nil, err
	}

	r, err := sql.Open("sqlite", path+"?"+common+"&_query_only=1")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("opening state database: %w", err)
	}
	r.SetMaxOpenConns(readConns)
	r.SetMaxIdleConns(readConns)
	r.SetConnMaxLifetime(0)
	r.SetConnMaxIdleTime(0)
	s.r = r
	if err := s.prepare(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.usage.load(ctx, s); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.tenants.load(ctx, s); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Path is the database file's path.
func (s *Store) Path() string { return s.path }

// Close closes the database. Calls after Close fail.
func (s *Store) Close() error {
	defer s.changed() // a cached key must not outlive the store
	s.stmts.close()
	var errs []error
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	errs = append(errs, s.w.Close())
	return errors.Join(errs...)
}

// writeTx runs fn in one IMMEDIATE transaction on the write connection.
func (s *Store) writeTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	defer s.changed()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return dbErr("beginning transaction", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return dbErr("committing", err)
	}
	return nil
}

// dbErr wraps a database error with context and, where it is one, the
// matching error class.
func dbErr(what string, err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE:
			return fmt.Errorf("%s: %w", what, errdefs.New(errdefs.ErrAlreadyExists, "%v", err))
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return fmt.Errorf("%s: %w", what, errdefs.NotFound("%v", err))
		case sqlite3.SQLITE_FULL:
			return fmt.Errorf("%s: %w", what, errdefs.Exhausted("state database: disk full: %v", err))
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w: %w", what, errdefs.ErrInternal, err)
}

func toMS(t time.Time) int64 { return t.UnixMilli() }

func fromMS(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

func toNullMS(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
}

func fromNullMS(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := fromMS(n.Int64)
	return &t
}

// now is the current time as the store keeps it (ms, UTC).
func now() time.Time { return fromMS(time.Now().UnixMilli()) }
