package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/agentbox/agentbox/errdefs"
)

// Quotas cap what a tenant's sandboxes may hold at once; 0 means no limit.
type Quotas struct {
	Sandboxes int64   // concurrent sandboxes (creating, running, paused)
	CPU       float64 // total cores of those sandboxes
	MemoryMB  int64   // total memory of those sandboxes
	DiskMB    int64   // total disk of every sandbox not destroyed
}

// TenantRecord is one tenant.
type TenantRecord struct {
	Name   string
	Quotas Quotas
	// CreatedAt is set by CreateTenant.
	CreatedAt time.Time
}

// Usage is what a tenant's sandboxes hold now, counted as Quotas counts.
type Usage struct {
	Sandboxes int64
	CPU       float64
	MemoryMB  int64
	DiskMB    int64
}

const tenantColumns = `name, sandboxes, cpu, memory_mb, disk_mb, created_at`

// CreateTenant inserts t. An existing name is an error wrapping
// errdefs.ErrAlreadyExists.
func (s *Store) CreateTenant(ctx context.Context, t *TenantRecord) error {
	defer s.changed()
	if t.Name == "" {
		return errdefs.Invalid("tenant record needs a name")
	}
	t.CreatedAt = now()
	_, err := s.w.ExecContext(ctx, `INSERT INTO tenants (`+tenantColumns+`) VALUES (?, ?, ?, ?, ?, ?)`,
		t.Name, t.Quotas.Sandboxes, t.Quotas.CPU, t.Quotas.MemoryMB, t.Quotas.DiskMB, toMS(t.CreatedAt))
	if err != nil {
		if err := dbErr("inserting tenant", err); !errors.Is(err, errdefs.ErrAlreadyExists) {
			return err
		}
		return errdefs.New(errdefs.ErrAlreadyExists, "tenant %q already exists", t.Name)
	}
	return nil
}

// GetTenant returns the tenant named name, or an error wrapping
// errdefs.ErrNotFound.
func (s *Store) GetTenant(ctx context.Context, name string) (*TenantRecord, error) {
	t, err := scanTenant(s.r.QueryRowContext(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("tenant %q not found; list them with `agentbox tenant ls`", name)
	}
	return t, err
}

// ListTenants returns every tenant by name.
func (s *Store) ListTenants(ctx context.Context) ([]*TenantRecord, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+tenantColumns+` FROM tenants ORDER BY name`)
	if err != nil {
		return nil, dbErr("listing tenants", err)
	}
	defer rows.Close()
	var out []*TenantRecord
	for rows.Next() {
		t, err := scanTenant(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr("listing tenants", err)
	}
	return out, nil
}

// SetQuotas replaces the quotas of tenant name.
func (s *Store) SetQuotas(ctx context.Context, name string, q Quotas) error {
	defer s.changed()
	res, err := s.w.ExecContext(ctx, `UPDATE tenants SET sandboxes = ?, cpu = ?, memory_mb = ?, disk_mb = ? WHERE name = ?`,
		q.Sandboxes, q.CPU, q.MemoryMB, q.DiskMB, name)
	if err != nil {
		return dbErr("setting quotas of tenant "+name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("tenant %q not found", name)
	}
	return nil
}

// DeleteTenant removes tenant name and revokes its keys, in one
// transaction. It is refused while the tenant has sandboxes that are not
// destroyed or snapshots: remove those first.
func (s *Store) DeleteTenant(ctx context.Context, name string) error {
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		var n int64
		if err := tx.QueryRowContext(ctx, `SELECT
			(SELECT count(*) FROM sandboxes WHERE tenant = ? AND state NOT IN ('destroyed', 'failed')) +
			(SELECT count(*) FROM snapshots WHERE tenant = ? AND internal = 0)`, name, name).Scan(&n); err != nil {
			return dbErr("counting sandboxes of tenant "+name, err)
		}
		if n > 0 {
			return errdefs.Precondition("tenant %q still has %d sandboxes or snapshots; destroy them first", name, n)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM tenants WHERE name = ?`, name)
		if err != nil {
			return dbErr("deleting tenant "+name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return errdefs.NotFound("tenant %q not found", name)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE tenant = ?`,
			toMS(now()), name); err != nil {
			return dbErr("revoking keys of tenant "+name, err)
		}
		return nil
	})
}

// TenantUsage sums what tenant's sandboxes hold: count, CPU and memory of
// those creating, running or paused; disk of every one not destroyed.
func (s *Store) TenantUsage(ctx context.Context, tenant string) (Usage, error) {
	var u Usage
	err := s.r.QueryRowContext(ctx, `SELECT
		coalesce(sum(state IN ('creating', 'running', 'paused')), 0),
		coalesce(sum(CASE WHEN state IN ('creating', 'running', 'paused') THEN json_extract(resources, '$.cpu') END), 0.0),
		coalesce(sum(CASE WHEN state IN ('creating', 'running', 'paused') THEN json_extract(resources, '$.memory_mb') END), 0),
		coalesce(sum(json_extract(resources, '$.disk_mb')), 0)
		FROM sandboxes WHERE tenant = ? AND state NOT IN ('destroyed', 'failed', 'destroying')`, tenant).
		Scan(&u.Sandboxes, &u.CPU, &u.MemoryMB, &u.DiskMB)
	if err != nil {
		return u, dbErr("summing usage of tenant "+tenant, err)
	}
	return u, nil
}

func scanTenant(row scanner) (*TenantRecord, error) {
	var (
		t       TenantRecord
		created int64
	)
	err := row.Scan(&t.Name, &t.Quotas.Sandboxes, &t.Quotas.CPU, &t.Quotas.MemoryMB, &t.Quotas.DiskMB, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	if err != nil {
		return nil, dbErr("reading tenant", err)
	}
	t.CreatedAt = fromMS(created)
	return &t, nil
}
