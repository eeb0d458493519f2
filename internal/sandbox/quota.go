package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/store"
)

// quotas enforces tenants' quotas at create, fork and resume. Usage is
// read from the store (what the records hold) plus the reservations of
// admissions still on their way into the store, so two concurrent creates
// cannot both take the last slot.
type quotas struct {
	mu      sync.Mutex
	pending map[string]store.Usage // by tenant
}

// admit checks that tenant may add n sandboxes of res (disk false: their
// disk is already counted, as for a stopped sandbox resumed) and reserves
// them; release drops the reservation once the records count in the store.
// A tenant without a record has no quotas.
func (s *Service) admit(ctx context.Context, tenant string, res api.Resources, n int, disk bool) (release func(), err error) {
	t, err := s.st.GetTenant(ctx, tenant)
	if errors.Is(err, errdefs.ErrNotFound) {
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading quotas: %w", err)
	}
	q := &s.quota
	q.mu.Lock()
	defer q.mu.Unlock()
	use, err := s.st.TenantUsage(ctx, tenant)
	if err != nil {
		return nil, err
	}
	p := q.pending[tenant]
	use.Sandboxes += p.Sandboxes
	use.CPU += p.CPU
	use.MemoryMB += p.MemoryMB
	use.DiskMB += p.DiskMB
	use.Pids += p.Pids
	add := store.Usage{Sandboxes: int64(n), CPU: res.CPU * float64(n), MemoryMB: res.MemoryMB * int64(n), Pids: res.Pids * int64(n)}
	if disk {
		add.DiskMB = res.DiskMB * int64(n)
	}
	var over []string
	check := func(name string, limit, used, more float64, unit string) {
		if limit > 0 && used+more > limit+1e-9 {
			over = append(over, fmt.Sprintf("%s quota is %g%s, %g in use, this request adds %g", name, limit, unit, used, more))
		}
	}
	check("sandboxes", float64(t.Quotas.Sandboxes), float64(use.Sandboxes), float64(add.Sandboxes), "")
	check("cpu", t.Quotas.CPU, use.CPU, add.CPU, " cores")
	check("memory_mb", float64(t.Quotas.MemoryMB), float64(use.MemoryMB), float64(add.MemoryMB), " MB")
	check("disk_mb", float64(t.Quotas.DiskMB), float64(use.DiskMB), float64(add.DiskMB), " MB")
	check("pids", float64(t.Quotas.Pids), float64(use.Pids), float64(add.Pids), "")
	if len(over) > 0 {
		s.emit(events.QuotaRejected, "", tenant, strings.Join(over, "; "))
		return nil, errdefs.Exhausted("tenant %q: %s; destroy or stop sandboxes, or ask an admin to raise the quota (agentbox tenant set)",
			tenant, strings.Join(over, "; "))
	}
	if q.pending == nil {
		q.pending = map[string]store.Usage{}
	}
	q.pending[tenant] = sum(q.pending[tenant], add, 1)
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			if u := sum(q.pending[tenant], add, -1); u == (store.Usage{}) {
				delete(q.pending, tenant)
			} else {
				q.pending[tenant] = u
			}
		})
	}, nil
}

func sum(a, b store.Usage, sign int64) store.Usage {
	return store.Usage{
		Sandboxes: a.Sandboxes + sign*b.Sandboxes,
		CPU:       a.CPU + float64(sign)*b.CPU,
		MemoryMB:  a.MemoryMB + sign*b.MemoryMB,
		DiskMB:    a.DiskMB + sign*b.DiskMB,
		Pids:      a.Pids + sign*b.Pids,
	}
}
