package store

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/agentbox/agentbox/errdefs"
)

// migrations[i] takes the schema from user_version i to i+1. Append only:
// never edit a migration that has shipped.
var migrations = []string{
	// 1: sandboxes, API keys, events.
	`
CREATE TABLE sandboxes (
	id               TEXT PRIMARY KEY,
	tenant           TEXT NOT NULL,
	state            TEXT NOT NULL,
	template         TEXT NOT NULL DEFAULT '',
	template_version TEXT NOT NULL DEFAULT '',
	isolation        TEXT NOT NULL DEFAULT '',
	spec             TEXT NOT NULL DEFAULT '{}', -- JSON api.CreateSandboxRequest, resolved
	resources        TEXT NOT NULL DEFAULT '{}', -- JSON api.Resources
	env              TEXT,                       -- JSON object or NULL
	metadata         TEXT,                       -- JSON object or NULL
	handle           TEXT,                       -- JSON driver.Handle or NULL
	error            TEXT NOT NULL DEFAULT '',
	created_at       INTEGER NOT NULL,           -- unix ms
	updated_at       INTEGER NOT NULL,
	expires_at       INTEGER                     -- NULL: no TTL
) STRICT;
CREATE INDEX sandboxes_tenant ON sandboxes (tenant, created_at);
CREATE INDEX sandboxes_expires ON sandboxes (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE api_keys (
	id           TEXT PRIMARY KEY,
	tenant       TEXT NOT NULL,
	name         TEXT NOT NULL DEFAULT '',
	hash         BLOB NOT NULL UNIQUE,            -- sha256 of the secret
	admin        INTEGER NOT NULL DEFAULT 0,
	created_at   INTEGER NOT NULL,
	last_used_at INTEGER,
	revoked_at   INTEGER
) STRICT;
CREATE INDEX api_keys_tenant ON api_keys (tenant, created_at);

CREATE TABLE events (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	time       INTEGER NOT NULL,
	kind       TEXT NOT NULL,
	message    TEXT NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX events_sandbox ON events (sandbox_id, id);
`,
	// 2: lineage and layers of sandboxes; snapshots.
	`
ALTER TABLE sandboxes ADD COLUMN parent TEXT NOT NULL DEFAULT '';   -- sandbox forked from
ALTER TABLE sandboxes ADD COLUMN snapshot TEXT NOT NULL DEFAULT ''; -- snapshot started from
ALTER TABLE sandboxes ADD COLUMN lowers TEXT;                       -- JSON overlay lowers, top first
CREATE INDEX sandboxes_snapshot ON sandboxes (snapshot) WHERE snapshot != '';

CREATE TABLE snapshots (
	id               TEXT PRIMARY KEY,
	name             TEXT NOT NULL DEFAULT '',
	tenant           TEXT NOT NULL,
	state            TEXT NOT NULL,               -- creating, ready
	sandbox_id       TEXT NOT NULL DEFAULT '',    -- source sandbox
	template         TEXT NOT NULL DEFAULT '',
	template_version TEXT NOT NULL DEFAULT '',
	isolation        TEXT NOT NULL DEFAULT '',
	parent           TEXT NOT NULL DEFAULT '',    -- snapshot the source started from
	lowers           TEXT NOT NULL DEFAULT '[]',  -- JSON overlay lowers of sandboxes made from it
	env              TEXT,                        -- JSON object or NULL: the source's env
	internal         INTEGER NOT NULL DEFAULT 0,  -- made by fork; removed with its last dependent
	size_bytes       INTEGER NOT NULL DEFAULT 0,
	created_at       INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX snapshots_name ON snapshots (tenant, name) WHERE name != '';
CREATE INDEX snapshots_parent ON snapshots (parent) WHERE parent != '';
`,
	// 3: tenants with quotas; the audit log of state-changing API calls.
	`
CREATE TABLE tenants (
	name       TEXT PRIMARY KEY,
	sandboxes  INTEGER NOT NULL DEFAULT 0,  -- quotas; 0: no limit
	cpu        REAL NOT NULL DEFAULT 0,
	memory_mb  INTEGER NOT NULL DEFAULT 0,
	disk_mb    INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL
) STRICT;
INSERT INTO tenants (name, created_at) VALUES ('default', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
INSERT OR IGNORE INTO tenants (name, created_at)
	SELECT DISTINCT tenant, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) FROM api_keys;

CREATE TABLE audit (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	time       INTEGER NOT NULL,
	key_id     TEXT NOT NULL DEFAULT '',
	tenant     TEXT NOT NULL DEFAULT '',
	method     TEXT NOT NULL,
	path       TEXT NOT NULL,
	sandbox_id TEXT NOT NULL DEFAULT '',
	status     INTEGER NOT NULL,
	remote     TEXT NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX audit_time ON audit (time);
`,
	// 4: a pids quota (issue 27: one tenant's sandboxes could take every
	// host pid).
	`
ALTER TABLE tenants ADD COLUMN pids INTEGER NOT NULL DEFAULT 0; -- 0: no limit
`,
	// 5: the list order (created_at, id) indexed for every scope, so a page
	// of the list reads only its own rows (issue 22: paginated lists).
	`
CREATE INDEX sandboxes_created ON sandboxes (created_at, id);
`,
}

// SchemaVersion is the schema version this binary writes.
func SchemaVersion() int { return len(migrations) }

// migrate applies the migrations the file lacks, each in its own
// transaction together with the user_version bump.
func (s *Store) migrate(ctx context.Context) error {
	var v int
	if err := s.w.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return dbErr("reading schema version of "+s.path, err)
	}
	if v > len(migrations) {
		return errdefs.Precondition("%s has schema version %d but this agentbox knows only up to %d: it was written by a newer agentbox; upgrade agentbox or restore an older backup of the file",
			s.path, v, len(migrations))
	}
	for ; v < len(migrations); v++ {
		err := s.writeTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
				return dbErr(fmt.Sprintf("migrating %s to schema version %d", s.path, v+1), err)
			}
			// PRAGMA takes no bind parameters; v is an int.
			if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v+1)); err != nil {
				return dbErr("setting schema version", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
