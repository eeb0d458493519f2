package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// usageFromRows is what TenantUsage summed before the store kept the
// sums: the oracle the kept ones must match.
func usageFromRows(t *testing.T, s *Store, tenant string) Usage {
	t.Helper()
	var u Usage
	err := s.r.QueryRow(`SELECT
		coalesce(sum(state IN ('creating', 'running', 'paused')), 0),
		coalesce(sum(CASE WHEN state IN ('creating', 'running', 'paused') THEN json_extract(resources, '$.cpu') END), 0.0),
		coalesce(sum(CASE WHEN state IN ('creating', 'running', 'paused') THEN json_extract(resources, '$.memory_mb') END), 0),
		coalesce(sum(json_extract(resources, '$.disk_mb')), 0)
		FROM sandboxes WHERE tenant = ? AND state NOT IN ('destroyed', 'failed', 'destroying')`, tenant).
		Scan(&u.Sandboxes, &u.CPU, &u.MemoryMB, &u.DiskMB)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func sameUsage(a, b Usage) bool {
	return a.Sandboxes == b.Sandboxes && a.MemoryMB == b.MemoryMB && a.DiskMB == b.DiskMB &&
		math.Abs(a.CPU-b.CPU) < 1e-9
}

// TestUsageFollowsWrites: after any mix of inserts, updates (state,
// resources, tenant), batch updates and deletes, and after a reopen,
// TenantUsage says what the rows say.
func TestUsageFollowsWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	states := []string{api.StateCreating, api.StateRunning, api.StatePaused, api.StateStopped,
		api.StateDestroying, api.StateDestroyed, api.StateFailed}
	tenants := []string{"a", "b", "c"}
	rng := rand.New(rand.NewPCG(1, 2))
	res := func() api.Resources {
		return api.Resources{CPU: float64(rng.IntN(8)+1) / 4, MemoryMB: int64(rng.IntN(4)+1) * 128, DiskMB: int64(rng.IntN(3)+1) * 512}
	}
	var ids []string
	check := func(step string) {
		t.Helper()
		for _, tn := range tenants {
			got, _ := s.TenantUsage(ctx, tn)
			if want := usageFromRows(t, s, tn); !sameUsage(got, want) {
				t.Fatalf("%s: TenantUsage(%s) = %+v, the rows say %+v", step, tn, got, want)
			}
		}
	}
	for i := range 400 {
		switch op := rng.IntN(10); {
		case op < 4 || len(ids) == 0:
			rec := &SandboxRecord{ID: fmt.Sprintf("sb%d", i), Tenant: tenants[rng.IntN(3)], State: states[rng.IntN(len(states))], Resources: res()}
			if len(ids) > 0 && rng.IntN(4) == 0 {
				rec.ID = ids[rng.IntN(len(ids))] // a duplicate: refused, counts nothing
				if err := s.CreateSandbox(ctx, rec); !errors.Is(err, errdefs.ErrAlreadyExists) {
					t.Fatalf("duplicate CreateSandbox = %v", err)
				}
				break
			}
			if err := s.CreateSandbox(ctx, rec); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, rec.ID)
		case op < 8:
			id := ids[rng.IntN(len(ids))]
			fail := rng.IntN(5) == 0
			err := s.UpdateSandbox(ctx, id, func(r *SandboxRecord) error {
				r.State = states[rng.IntN(len(states))]
				if rng.IntN(3) == 0 {
					r.Resources = res()
				}
				if rng.IntN(5) == 0 {
					r.Tenant = tenants[rng.IntN(3)]
				}
				if fail {
					return fmt.Errorf("changed my mind")
				}
				return nil
			})
			if (err != nil) != fail {
				t.Fatalf("UpdateSandbox: %v", err)
			}
		case op < 9:
			batch := []string{ids[rng.IntN(len(ids))], ids[rng.IntN(len(ids))]}
			if batch[0] == batch[1] {
				batch = batch[:1]
			}
			st := states[rng.IntN(len(states))]
			if err := s.UpdateSandboxes(ctx, batch, func(r *SandboxRecord) error { r.State = st; return nil }); err != nil {
				t.Fatalf("UpdateSandboxes: %v", err)
			}
		default:
			k := rng.IntN(len(ids))
			if err := s.DeleteSandbox(ctx, ids[k]); err != nil {
				t.Fatalf("DeleteSandbox: %v", err)
			}
			ids = append(ids[:k], ids[k+1:]...)
		}
		check(fmt.Sprintf("step %d", i))
	}
	s.Close()
	if s, err = Open(ctx, path); err != nil {
		t.Fatal(err)
	}
	check("after reopening")
}
