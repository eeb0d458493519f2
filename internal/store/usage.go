package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// usage is what each tenant's sandboxes hold, kept next to the table so
// that a quota check reads no rows: summing them was a scan of every
// record the tenant ever had (destroyed ones stay), 1.2 ms per create
// after 400 of them. It is loaded at Open with one query and moved by
// each write of a sandbox row once that write has committed, so it is
// exactly what the rows say, give or take a write that is committing
// right now. The Store is the file's only writer (the package comment).
type usage struct {
	mu       sync.Mutex
	byTenant map[string]Usage
}

// share is what one record counts for in its tenant's usage: count, CPU,
// memory and pids while creating, running or paused; disk while it is not
// destroyed, failed or being destroyed (TenantUsage's doc).
func share(rec *SandboxRecord) Usage {
	var u Usage
	switch rec.State {
	case api.StateDestroyed, api.StateFailed, api.StateDestroying:
		return u
	case api.StateCreating, api.StateRunning, api.StatePaused:
		u.Sandboxes, u.CPU, u.MemoryMB, u.Pids = 1, rec.Resources.CPU, rec.Resources.MemoryMB, rec.Resources.Pids
	}
	u.DiskMB = rec.Resources.DiskMB
	return u
}

// load sums the rows that count.
func (u *usage) load(ctx context.Context, s *Store) error {
	rows, err := s.w.QueryContext(ctx, `SELECT tenant, state, resources FROM sandboxes
		WHERE state NOT IN ('destroyed', 'failed', 'destroying')`)
	if err != nil {
		return dbErr("summing usage", err)
	}
	defer rows.Close()
	by := map[string]Usage{}
	for rows.Next() {
		var (
			rec SandboxRecord
			res string
		)
		if err := rows.Scan(&rec.Tenant, &rec.State, &res); err != nil {
			return dbErr("summing usage", err)
		}
		if err := json.Unmarshal([]byte(res), &rec.Resources); err != nil {
			return fmt.Errorf("summing usage: resources of a sandbox of %s: %w: %w", rec.Tenant, errdefs.ErrInternal, err)
		}
		by[rec.Tenant] = add(by[rec.Tenant], share(&rec), 1)
	}
	if err := rows.Err(); err != nil {
		return dbErr("summing usage", err)
	}
	u.mu.Lock()
	u.byTenant = by
	u.mu.Unlock()
	return nil
}

// usageDelta is how writes move the usage: the share a record had
// before a write is taken away (sign -1), the one it has after is added.
type usageDelta []usageMove

type usageMove struct {
	tenant string
	share  Usage
	sign   int64
}

// change records that a write turns before into after; nil is no row.
func (d *usageDelta) change(before, after *SandboxRecord) {
	if before != nil {
		*d = append(*d, usageMove{before.Tenant, share(before), -1})
	}
	if after != nil {
		*d = append(*d, usageMove{after.Tenant, share(after), 1})
	}
}

// apply moves the usage by d; call it once d's writes have committed.
func (u *usage) apply(d usageDelta) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, c := range d {
		u.moveLocked(c.tenant, c.share, c.sign)
	}
}

func (u *usage) moveLocked(tenant string, by Usage, sign int64) {
	if by == (Usage{}) {
		return
	}
	n := add(u.byTenant[tenant], by, sign)
	if n.Sandboxes == 0 {
		n.CPU = 0 // no float residue of the sums once nothing runs
	}
	if n == (Usage{}) {
		delete(u.byTenant, tenant)
		return
	}
	if u.byTenant == nil {
		u.byTenant = map[string]Usage{}
	}
	u.byTenant[tenant] = n
}

func (u *usage) of(tenant string) Usage {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.byTenant[tenant]
}

func add(a, b Usage, sign int64) Usage {
	return Usage{
		Sandboxes: a.Sandboxes + sign*b.Sandboxes,
		CPU:       a.CPU + float64(sign)*b.CPU,
		MemoryMB:  a.MemoryMB + sign*b.MemoryMB,
		DiskMB:    a.DiskMB + sign*b.DiskMB,
		Pids:      a.Pids + sign*b.Pids,
	}
}
