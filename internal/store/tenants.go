package store

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	"github.com/agentbox/agentbox/errdefs"
)

// Quotas cap what a tenant's sandboxes may hold at once; 0 means no limit.
type Quotas struct {
	Sandboxes int64   // concurrent sandboxes (creating, running, paused)
	CPU       float64 // total cores of those sandboxes
	MemoryMB  int64   // total memory of those sandboxes
	DiskMB    int64   // total disk of every sandbox not destroyed
	Pids      int64   // total pids limits of the concurrent sandboxes
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
	Pids      int64
}

const tenantColumns = `name, sandboxes, cpu, memory_mb, disk_mb, pids, created_at`

// tenantCache holds every tenant record, so that the quota check of each
// create reads no row: loaded at Open, changed by CreateTenant, SetQuotas
// and DeleteTenant once they have committed.
type tenantCache struct {
	mu     sync.Mutex
	byName map[string]TenantRecord
}

func (c *tenantCache) load(ctx context.Context, s *Store) error {
	rows, err := s.w.QueryContext(ctx, `SELECT `+tenantColumns+` FROM tenants`)
	if err != nil {
		return dbErr("listing tenants", err)
	}
	defer rows.Close()
	by := map[string]TenantRecord{}
	for rows.Next() {
		t, err := scanTenant(rows)
		if err != nil {
			return err
		}
		by[t.Name] = *t
	}
	if err := rows.Err(); err != nil {
		return dbErr("listing tenants", err)
	}
	c.mu.Lock()
	c.byName = by
	c.mu.Unlock()
	return nil
}

func (c *tenantCache) get(name string) (TenantRecord, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.byName[name]
	return t, ok
}

// set stores t, or removes name when t is nil.
func (c *tenantCache) set(name string, t *TenantRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t == nil {
		delete(c.byName, name)
		return
	}
	c.byName[name] = *t
}

// CreateTenant inserts t. An existing name is an error wrapping
// errdefs.ErrAlreadyExists.
func (s *Store) CreateTenant(ctx context.Context, t *TenantRecord) error {
	defer s.changed()
	if t.Name == "" {
		return errdefs.Invalid("tenant record needs a name")
	}
	t.CreatedAt = now()
	_, err := s.w.ExecContext(ctx, `INSERT INTO tenants (`+tenantColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		t.Name, t.Quotas.Sandboxes, t.Quotas.CPU, t.Quotas.MemoryMB, t.Quotas.DiskMB, t.Quotas.Pids, toMS(t.CreatedAt))
	if err != nil {
		if err := dbErr("inserting tenant", err); !errors.Is(err, errdefs.ErrAlreadyExists) {
			return err
		}
		return errdefs.New(errdefs.ErrAlreadyExists, "tenant %q already exists", t.Name)
	}
	s.tenants.set(t.Name, t)
	return nil
}

// GetTenant returns the tenant named name, or an error wrapping
// errdefs.ErrNotFound. It reads no row (tenantCache).
func (s *Store) GetTenant(ctx context.Context, name string) (*TenantRecord, error) {
	t, ok := s.tenants.get(name)
	if !ok {
		return nil, errdefs.NotFound("tenant %q not found; list them with `agentbox tenant ls`", name)
	}
	return &t, nil
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
	res, err := s.w.ExecContext(ctx, `UPDATE tenants SET sandboxes = ?, cpu = ?, memory_mb = ?, disk_mb = ?, pids = ? WHERE name = ?`,
		q.Sandboxes, q.CPU, q.MemoryMB, q.DiskMB, q.Pids, name)
	if err != nil {
		return dbErr("setting quotas of tenant "+name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("tenant %q not found", name)
	}
	if t, ok := s.tenants.get(name); ok {
		t.Quotas = q
		s.tenants.set(name, &t)
	}
	return nil
}

// DeleteTenant removes tenant name and revokes its keys, in one
// transaction. It is refused while the tenant has sandboxes that are not
// destroyed or snapshots: remove those first.
func (s *Store) DeleteTenant(ctx context.Context, name string) error {
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
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
	if err == nil {
		s.tenants.set(name, nil)
	}
	return err
}

// TenantUsage sums what tenant's sandboxes hold: count, CPU, memory and
// pids limits of those creating, running or paused; disk of every one not destroyed,
// failed or being destroyed. It reads no rows: the store keeps the sums
// as it writes the records (usage.go).
func (s *Store) TenantUsage(ctx context.Context, tenant string) (Usage, error) {
	return s.usage.of(tenant), nil
}

func scanTenant(row scanner) (*TenantRecord, error) {
	var (
		t       TenantRecord
		created int64
	)
	err := row.Scan(&t.Name, &t.Quotas.Sandboxes, &t.Quotas.CPU, &t.Quotas.MemoryMB, &t.Quotas.DiskMB, &t.Quotas.Pids, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	if err != nil {
		return nil, dbErr("reading tenant", err)
	}
	t.CreatedAt = fromMS(created)
	return &t, nil
}
