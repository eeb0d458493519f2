package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// SandboxRecord is one sandbox as the store keeps it.
type SandboxRecord struct {
	ID              string
	Tenant          string
	State           string // one of the api.State* constants
	Template        string
	TemplateVersion string
	Isolation       string
	// Spec is the create request with every default filled in.
	Spec      api.CreateSandboxRequest
	Resources api.Resources
	Env       map[string]string
	Metadata  map[string]string
	// Handle is the driver's handle, nil until the driver created the
	// sandbox.
	Handle    *driver.Handle
	Error     string // why it failed, when State is failed
	CreatedAt time.Time
	UpdatedAt time.Time
	ExpiresAt *time.Time // nil: no TTL
	// Lineage: the sandbox it was forked from and the snapshot it started
	// from ("" for none).
	Parent   string
	Snapshot string
	// Lowers are the overlay's read-only layers, top first (the
	// snapshots' upper dirs, then the template's rootfs).
	Lowers []string
}

// Filter selects sandboxes in ListSandboxes. Scope is whose sandboxes
// (the zero Scope matches none: say tenancy.AllTenants() for every
// tenant's); the other fields match everything when zero.
type Filter struct {
	Scope  tenancy.Scope
	States []string
	// Metadata pairs must all match exactly.
	Metadata map[string]string
	// After, when set, starts the list after this position of the list's
	// order (created_at, id): the position of the last sandbox of the
	// previous page.
	After *Position
	// Limit caps the number of sandboxes returned; 0 returns all.
	Limit int
}

// Position is a place in the sandbox list's order.
type Position struct {
	CreatedAt time.Time
	ID        string
}

// CreateSandbox inserts rec. A zero CreatedAt becomes now; UpdatedAt is set
// to CreatedAt; both are written back to rec as stored (ms precision). A
// duplicate id is an error wrapping errdefs.ErrAlreadyExists.
func (s *Store) CreateSandbox(ctx context.Context, rec *SandboxRecord) error {
	defer s.changed()
	if rec.ID == "" || rec.Tenant == "" || rec.State == "" {
		return errdefs.Invalid("sandbox record needs an id, a tenant and a state, got id %q tenant %q state %q", rec.ID, rec.Tenant, rec.State)
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = now()
	} else {
		rec.CreatedAt = fromMS(toMS(rec.CreatedAt))
	}
	rec.UpdatedAt = rec.CreatedAt
	if rec.ExpiresAt != nil {
		t := fromMS(toMS(*rec.ExpiresAt))
		rec.ExpiresAt = &t
	}
	args, err := sandboxArgs(rec)
	if err != nil {
		return err
	}
	args = append(append([]any{rec.ID}, args...), toMS(rec.CreatedAt), toMS(rec.UpdatedAt))
	if _, err := s.stmts.insertSandbox.ExecContext(ctx, args...); err != nil {
		if err := dbErr("inserting sandbox", err); !errors.Is(err, errdefs.ErrAlreadyExists) {
			return err
		}
		return errdefs.New(errdefs.ErrAlreadyExists, "sandbox %s already exists", rec.ID)
	}
	var d usageDelta
	d.change(nil, rec)
	s.usage.apply(d)
	s.noteSandbox("", rec)
	return nil
}

// sandboxArgs returns the columns tenant..error followed by expires_at,
// in statement order.
func sandboxArgs(rec *SandboxRecord) ([]any, error) {
	spec, err := json.Marshal(rec.Spec)
	if err != nil {
		return nil, fmt.Errorf("encoding spec: %w", err)
	}
	res, err := json.Marshal(rec.Resources)
	if err != nil {
		return nil, fmt.Errorf("encoding resources: %w", err)
	}
	env, err := jsonOrNull(rec.Env, rec.Env == nil)
	if err != nil {
		return nil, fmt.Errorf("encoding env: %w", err)
	}
	md, err := jsonOrNull(rec.Metadata, rec.Metadata == nil)
	if err != nil {
		return nil, fmt.Errorf("encoding metadata: %w", err)
	}
	h, err := jsonOrNull(rec.Handle, rec.Handle == nil)
	if err != nil {
		return nil, fmt.Errorf("encoding handle: %w", err)
	}
	lowers, err := jsonOrNull(rec.Lowers, rec.Lowers == nil)
	if err != nil {
		return nil, fmt.Errorf("encoding lowers: %w", err)
	}
	return []any{rec.Tenant, rec.State, rec.Template, rec.TemplateVersion, rec.Isolation,
		string(spec), string(res), env, md, h, rec.Error, toNullMS(rec.ExpiresAt),
		rec.Parent, rec.Snapshot, lowers}, nil
}

func jsonOrNull(v any, isNil bool) (sql.NullString, error) {
	if isNil {
		return sql.NullString{}, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return sql.NullString{}, err
	}
	return sql.NullString{String: string(b), Valid: true}, nil
}

// GetSandbox returns the sandbox with id, or an error wrapping
// errdefs.ErrNotFound.
func (s *Store) GetSandbox(ctx context.Context, id string) (*SandboxRecord, error) {
	return scanSandbox(s.stmts.getSandbox.QueryRowContext(ctx, id), id)
}

type scanner interface{ Scan(dest ...any) error }

func scanSandbox(row scanner, id string) (*SandboxRecord, error) {
	var (
		rec              SandboxRecord
		spec, res        string
		env, md, h, lw   sql.NullString
		created, updated int64
		expires          sql.NullInt64
	)
	err := row.Scan(&rec.ID, &rec.Tenant, &rec.State, &rec.Template, &rec.TemplateVersion, &rec.Isolation,
		&spec, &res, &env, &md, &h, &rec.Error, &created, &updated, &expires,
		&rec.Parent, &rec.Snapshot, &lw)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("sandbox %s not found", id)
	}
	if err != nil {
		return nil, dbErr("reading sandbox", err)
	}
	rec.CreatedAt, rec.UpdatedAt, rec.ExpiresAt = fromMS(created), fromMS(updated), fromNullMS(expires)
	if err := json.Unmarshal([]byte(spec), &rec.Spec); err != nil {
		return nil, fmt.Errorf("decoding spec of sandbox %s: %w: %w", rec.ID, errdefs.ErrInternal, err)
	}
	if err := json.Unmarshal([]byte(res), &rec.Resources); err != nil {
		return nil, fmt.Errorf("decoding resources of sandbox %s: %w: %w", rec.ID, errdefs.ErrInternal, err)
	}
	for _, c := range []struct {
		col sql.NullString
		dst any
	}{{env, &rec.Env}, {md, &rec.Metadata}, {h, &rec.Handle}, {lw, &rec.Lowers}} {
		if c.col.Valid {
			if err := json.Unmarshal([]byte(c.col.String), c.dst); err != nil {
				return nil, fmt.Errorf("decoding sandbox %s: %w: %w", rec.ID, errdefs.ErrInternal, err)
			}
		}
	}
	return &rec, nil
}

// ListSandboxes returns the sandboxes matching f, oldest first.
func (s *Store) ListSandboxes(ctx context.Context, f Filter) ([]*SandboxRecord, error) {
	var (
		q    strings.Builder
		args []any
	)
	q.WriteString("SELECT " + sandboxColumns + " FROM sandboxes WHERE 1")
	if tenant, limited := f.Scope.Tenant(); limited {
		q.WriteString(" AND tenant = ?")
		args = append(args, tenant)
	}
	if len(f.States) > 0 {
		q.WriteString(" AND state IN (?" + strings.Repeat(", ?", len(f.States)-1) + ")")
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	// json_each compares keys as data, so a key may hold any character
	// (a json_extract path would need quoting rules for '.', '"', '[').
	for k, v := range f.Metadata {
		q.WriteString(" AND EXISTS (SELECT 1 FROM json_each(sandboxes.metadata) m WHERE m.key = ? AND m.type = 'text' AND m.value = ?)")
		args = append(args, k, v)
	}
	if f.After != nil {
		ms := toMS(f.After.CreatedAt)
		// A row value, so that SQLite reads the (created_at, id) index
		// from the position on.
		q.WriteString(" AND (created_at, id) > (?, ?)")
		args = append(args, ms, f.After.ID)
	}
	q.WriteString(" ORDER BY created_at, id")
	if f.Limit > 0 {
		q.WriteString(" LIMIT ?")
		args = append(args, f.Limit)
	}
	rows, err := s.r.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return nil, dbErr("listing sandboxes", err)
	}
	defer rows.Close()
	var out []*SandboxRecord
	for rows.Next() {
		rec, err := scanSandbox(rows, "")
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("listing sandboxes", err)
	}
	return out, nil
}

// UpdateSandbox reads the sandbox, lets fn change it and writes it back,
// all in one transaction: concurrent updates never lose each other's
// changes. If fn returns an error nothing is written and that error is
// returned as is. fn must not call the Store (it would wait for itself)
// and must not change the id; CreatedAt is kept and UpdatedAt is set to
// now.
func (s *Store) UpdateSandbox(ctx context.Context, id string, fn func(*SandboxRecord) error) error {
	var (
		d    usageDelta
		prev string
		out  *SandboxRecord
	)
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		rec, err := scanSandbox(tx.StmtContext(ctx, s.stmts.getSandboxW).QueryRowContext(ctx, id), id)
		if err != nil {
			return err
		}
		d.change(rec, nil)
		prev, out = rec.State, rec
		created := rec.CreatedAt
		if err := fn(rec); err != nil {
			return err
		}
		if rec.ID != id {
			return errdefs.Invalid("updating sandbox %s: the id cannot change (got %q)", id, rec.ID)
		}
		rec.CreatedAt = created
		rec.UpdatedAt = now()
		args, err := sandboxArgs(rec)
		if err != nil {
			return err
		}
		args = append(args, toMS(rec.UpdatedAt), id)
		if _, err := tx.StmtContext(ctx, s.stmts.updateSandbox).ExecContext(ctx, args...); err != nil {
			return dbErr("updating sandbox "+id, err)
		}
		d.change(nil, rec)
		return nil
	})
	if err == nil {
		s.usage.apply(d)
		s.noteSandbox(prev, out)
	}
	return err
}

// DeleteSandbox removes the sandbox and its events. Deleting a missing
// sandbox is an error wrapping errdefs.ErrNotFound.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	defer s.changed()
	var d usageDelta
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		rec, err := scanSandbox(tx.StmtContext(ctx, s.stmts.getSandboxW).QueryRowContext(ctx, id), id)
		if err != nil {
			return err
		}
		if _, err := tx.StmtContext(ctx, s.stmts.deleteSandbox).ExecContext(ctx, id); err != nil {
			return dbErr("deleting sandbox "+id, err)
		}
		d.change(rec, nil)
		return nil
	})
	if err == nil {
		s.usage.apply(d)
	}
	return err
}

// Expired returns the ids of running or paused sandboxes whose ExpiresAt is
// at or before now, soonest first.
func (s *Store) Expired(ctx context.Context, now time.Time) ([]string, error) {
	rows, err := s.stmts.expired.QueryContext(ctx, toMS(now))
	if err != nil {
		return nil, dbErr("finding expired sandboxes", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, dbErr("finding expired sandboxes", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("finding expired sandboxes", err)
	}
	return ids, nil
}
