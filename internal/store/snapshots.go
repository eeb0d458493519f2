package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// Snapshot states. A snapshot is recorded as creating before its subvolume
// is made (the intent), and becomes ready once it is whole; recovery
// removes what a crash left in creating.
const (
	SnapshotCreating = "creating"
	SnapshotReady    = "ready"
)

// SnapshotRecord is one snapshot as the store keeps it.
type SnapshotRecord struct {
	ID              string
	Name            string // "" for unnamed
	Tenant          string
	State           string
	SandboxID       string // the source sandbox
	Template        string
	TemplateVersion string
	Isolation       string
	Parent          string // the snapshot the source started from
	// Lowers are the overlay lowers of a sandbox made from this snapshot,
	// top first: its own upper dir, then the source's lowers.
	Lowers []string
	Env    map[string]string
	// Internal snapshots are made by fork and removed with their last
	// dependent.
	Internal  bool
	SizeBytes int64
	CreatedAt time.Time
}

const snapshotColumns = `id, name, tenant, state, sandbox_id, template, template_version,
	isolation, parent, lowers, env, internal, size_bytes, created_at`

// CreateSnapshot inserts rec. A duplicate name for the tenant is an error
// wrapping errdefs.ErrAlreadyExists.
func (s *Store) CreateSnapshot(ctx context.Context, rec *SnapshotRecord) error {
	defer s.changed()
	if rec.ID == "" || rec.Tenant == "" || rec.State == "" {
		return errdefs.Invalid("snapshot record needs an id, a tenant and a state")
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = now()
	} else {
		rec.CreatedAt = fromMS(toMS(rec.CreatedAt))
	}
	lowers, err := json.Marshal(rec.Lowers)
	if err != nil {
		return fmt.Errorf("encoding lowers: %w", err)
	}
	env, err := jsonOrNull(rec.Env, rec.Env == nil)
	if err != nil {
		return fmt.Errorf("encoding env: %w", err)
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO snapshots (`+snapshotColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		rec.ID, rec.Name, rec.Tenant, rec.State, rec.SandboxID, rec.Template, rec.TemplateVersion,
		rec.Isolation, rec.Parent, string(lowers), env, rec.Internal, rec.SizeBytes, toMS(rec.CreatedAt))
	if err != nil {
		if err := dbErr("inserting snapshot", err); !errors.Is(err, errdefs.ErrAlreadyExists) {
			return err
		}
		return errdefs.New(errdefs.ErrAlreadyExists, "a snapshot named %q already exists; pick another name or remove it with `agentbox snapshot rm %s`", rec.Name, rec.Name)
	}
	return nil
}

func scanSnapshot(row scanner) (*SnapshotRecord, error) {
	var (
		rec     SnapshotRecord
		lowers  string
		env     sql.NullString
		created int64
	)
	err := row.Scan(&rec.ID, &rec.Name, &rec.Tenant, &rec.State, &rec.SandboxID, &rec.Template,
		&rec.TemplateVersion, &rec.Isolation, &rec.Parent, &lowers, &env, &rec.Internal, &rec.SizeBytes, &created)
	if err != nil {
		return nil, err
	}
	rec.CreatedAt = fromMS(created)
	if err := json.Unmarshal([]byte(lowers), &rec.Lowers); err != nil {
		return nil, fmt.Errorf("decoding snapshot %s: %w: %w", rec.ID, errdefs.ErrInternal, err)
	}
	if env.Valid {
		if err := json.Unmarshal([]byte(env.String), &rec.Env); err != nil {
			return nil, fmt.Errorf("decoding snapshot %s: %w: %w", rec.ID, errdefs.ErrInternal, err)
		}
	}
	return &rec, nil
}

// GetSnapshot returns the snapshot in scope whose id or name is ref (for
// tenancy.AllTenants() a name must be unique across tenants).
func (s *Store) GetSnapshot(ctx context.Context, scope tenancy.Scope, ref string) (*SnapshotRecord, error) {
	q := `SELECT ` + snapshotColumns + ` FROM snapshots WHERE (id = ? OR name = ?)`
	args := []any{ref, ref}
	if tenant, limited := scope.Tenant(); limited {
		q += ` AND tenant = ?`
		args = append(args, tenant)
	}
	q += ` ORDER BY id = ? DESC LIMIT 2`
	args = append(args, ref)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, dbErr("reading snapshot", err)
	}
	defer rows.Close()
	var out []*SnapshotRecord
	for rows.Next() {
		rec, err := scanSnapshot(rows)
		if err != nil {
			return nil, dbErr("reading snapshot", err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("reading snapshot", err)
	}
	switch {
	case len(out) == 0:
		return nil, errdefs.NotFound("snapshot %q not found; list snapshots with `agentbox snapshot ls`", ref)
	case len(out) > 1 && out[0].ID != ref:
		return nil, errdefs.Invalid("snapshot name %q is used by more than one tenant; use the snapshot's id", ref)
	}
	return out[0], nil
}

// ListSnapshots returns the snapshots in scope, oldest first. states
// filters by state when not empty.
func (s *Store) ListSnapshots(ctx context.Context, scope tenancy.Scope, states ...string) ([]*SnapshotRecord, error) {
	q := `SELECT ` + snapshotColumns + ` FROM snapshots WHERE 1`
	var args []any
	if tenant, limited := scope.Tenant(); limited {
		q += ` AND tenant = ?`
		args = append(args, tenant)
	}
	if len(states) > 0 {
		q += ` AND state IN (?` + strings.Repeat(", ?", len(states)-1) + `)`
		for _, st := range states {
			args = append(args, st)
		}
	}
	q += ` ORDER BY created_at, id`
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, dbErr("listing snapshots", err)
	}
	defer rows.Close()
	var out []*SnapshotRecord
	for rows.Next() {
		rec, err := scanSnapshot(rows)
		if err != nil {
			return nil, dbErr("listing snapshots", err)
		}
		out = append(out, rec)
	}
	return out, dbErrOrNil("listing snapshots", rows.Err())
}

func dbErrOrNil(what string, err error) error {
	if err == nil {
		return nil
	}
	return dbErr(what, err)
}

// FinishSnapshot marks snapshot id ready with its size.
func (s *Store) FinishSnapshot(ctx context.Context, id string, size int64) error {
	defer s.changed()
	res, err := s.w.ExecContext(ctx, `UPDATE snapshots SET state = ?, size_bytes = ? WHERE id = ?`, SnapshotReady, size, id)
	if err != nil {
		return dbErr("updating snapshot "+id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("snapshot %s not found", id)
	}
	return nil
}

// MarkSnapshotInternal makes snapshot id internal: removed with its last
// dependent (DELETE /v1/snapshots/{ref}?when_unused=true).
func (s *Store) MarkSnapshotInternal(ctx context.Context, id string) error {
	defer s.changed()
	res, err := s.w.ExecContext(ctx, `UPDATE snapshots SET internal = 1 WHERE id = ?`, id)
	if err != nil {
		return dbErr("updating snapshot "+id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("snapshot %s not found", id)
	}
	return nil
}

// SnapshotDependents returns the sandboxes (not destroyed or failed) and
// the snapshots whose layers stack on snapshot id.
func (s *Store) SnapshotDependents(ctx context.Context, id string) (sandboxes, snapshots []string, err error) {
	rows, err := s.r.QueryContext(ctx, `SELECT 'sandbox', id FROM sandboxes WHERE snapshot = ?
			AND state NOT IN ('destroyed', 'failed')
		UNION ALL SELECT 'snapshot', id FROM snapshots WHERE parent = ?`, id, id)
	if err != nil {
		return nil, nil, dbErr("finding dependents of snapshot "+id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind, dep string
		if err := rows.Scan(&kind, &dep); err != nil {
			return nil, nil, dbErr("finding dependents of snapshot "+id, err)
		}
		if kind == "sandbox" {
			sandboxes = append(sandboxes, dep)
		} else {
			snapshots = append(snapshots, dep)
		}
	}
	return sandboxes, snapshots, dbErrOrNil("finding dependents of snapshot "+id, rows.Err())
}

// DeleteSnapshot removes snapshot id's record only if nothing depends on
// it, in one transaction, so that no sandbox can start from a snapshot
// being removed. It returns an error wrapping ErrFailedPrecondition
// naming the dependents otherwise.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		var deps []string
		rows, err := tx.QueryContext(ctx, `SELECT 'sandbox ' || id FROM sandboxes WHERE snapshot = ?
				AND state NOT IN ('destroyed', 'failed')
			UNION ALL SELECT 'snapshot ' || id FROM snapshots WHERE parent = ? LIMIT 5`, id, id)
		if err != nil {
			return dbErr("finding dependents of snapshot "+id, err)
		}
		for rows.Next() {
			var d string
			if err := rows.Scan(&d); err != nil {
				rows.Close()
				return dbErr("finding dependents of snapshot "+id, err)
			}
			deps = append(deps, d)
		}
		rows.Close()
		if len(deps) > 0 {
			return errdefs.Precondition("snapshot %s is in use by %s; destroy those first", id, strings.Join(deps, ", "))
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, id)
		if err != nil {
			return dbErr("deleting snapshot "+id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return errdefs.NotFound("snapshot %s not found", id)
		}
		return nil
	})
}

// CreateSandboxFromSnapshot inserts rec only while snapshot rec.Snapshot
// exists and is ready, in one transaction with that check, so that a
// concurrent DeleteSnapshot cannot remove its layers underneath.
func (s *Store) CreateSandboxFromSnapshot(ctx context.Context, rec *SandboxRecord) error {
	if rec.Snapshot == "" {
		return s.CreateSandbox(ctx, rec)
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		var state string
		err := tx.QueryRowContext(ctx, `SELECT state FROM snapshots WHERE id = ?`, rec.Snapshot).Scan(&state)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && state != SnapshotReady) {
			return errdefs.NotFound("snapshot %s not found (removed meanwhile?)", rec.Snapshot)
		}
		if err != nil {
			return dbErr("reading snapshot", err)
		}
		if rec.CreatedAt.IsZero() {
			rec.CreatedAt = now()
		} else {
			rec.CreatedAt = fromMS(toMS(rec.CreatedAt))
		}
		rec.UpdatedAt = rec.CreatedAt
		args, err := sandboxArgs(rec)
		if err != nil {
			return err
		}
		args = append(append([]any{rec.ID}, args...), toMS(rec.CreatedAt), toMS(rec.UpdatedAt))
		if _, err := tx.StmtContext(ctx, s.stmts.insertSandbox).ExecContext(ctx, args...); err != nil {
			return dbErr("inserting sandbox", err)
		}
		return nil
	})
	if err == nil {
		var d usageDelta
		d.change(nil, rec)
		s.usage.apply(d)
		s.noteSandbox("", rec)
	}
	return err
}

// UpdateSandboxes applies fn to each sandbox in ids in one transaction:
// all change or none (fork flips its children to running this way).
func (s *Store) UpdateSandboxes(ctx context.Context, ids []string, fn func(*SandboxRecord) error) error {
	var (
		d     usageDelta
		prevs []string
		outs  []*SandboxRecord
	)
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		prevs, outs = prevs[:0], outs[:0]
		for _, id := range ids {
			rec, err := scanSandbox(tx.StmtContext(ctx, s.stmts.getSandboxW).QueryRowContext(ctx, id), id)
			if err != nil {
				return err
			}
			d.change(rec, nil)
			prevs, outs = append(prevs, rec.State), append(outs, rec)
			created := rec.CreatedAt
			if err := fn(rec); err != nil {
				return err
			}
			rec.ID, rec.CreatedAt, rec.UpdatedAt = id, created, now()
			args, err := sandboxArgs(rec)
			if err != nil {
				return err
			}
			args = append(args, toMS(rec.UpdatedAt), id)
			if _, err := tx.StmtContext(ctx, s.stmts.updateSandbox).ExecContext(ctx, args...); err != nil {
				return dbErr("updating sandbox "+id, err)
			}
			d.change(nil, rec)
		}
		return nil
	})
	if err == nil {
		s.usage.apply(d)
		for i, rec := range outs {
			s.noteSandbox(prevs[i], rec)
		}
	}
	return err
}
