package integration

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/config"
)

// createsFromPool restarts the daemon with a warm pool of size busybox
// sandboxes of tier added ([[pool]] isolation = tier; the pools as they
// were come back when t ends), then n times: waits up to fill for the
// pool to be full (refills untimed), creates, checks the pool served it,
// runs check on the sandbox, and destroys it. It returns the creates'
// times, sorted.
func createsFromPool(t *testing.T, tier string, size, n int, fill time.Duration, check func(t *testing.T, sb *api.Sandbox)) []time.Duration {
	t.Helper()
	ctx := context.Background()
	saved := slices.Clone(env.cfg.Pools)
	env.cfg.Pools = append(env.cfg.Pools, config.WarmPool{Template: "busybox", Isolation: tier, Size: size})
	restartDaemon(t, func() {})
	t.Cleanup(func() {
		env.cfg.Pools = saved
		restartDaemon(t, func() {})
	})
	pool := -1
	ps, err := env.client.Pools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range ps {
		if p.Template == "busybox" && p.Isolation == tier {
			pool = i
		}
	}
	if pool < 0 {
		t.Fatalf("no %s pool in %+v", tier, ps)
	}
	waitFull := func() int64 {
		deadline := time.Now().Add(fill)
		for {
			ps, err := env.client.Pools(ctx)
			if err != nil {
				t.Fatal(err)
			}
			p := ps[pool]
			if p.Ready >= p.Size {
				return p.Served
			}
			if time.Now().After(deadline) {
				t.Fatalf("the %s pool did not fill in %v: %+v", tier, fill, p)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	var ds []time.Duration
	for i := range n {
		served := waitFull()
		start := time.Now()
		sb, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", Isolation: tier})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		ds = append(ds, time.Since(start))
		ps, _ := env.client.Pools(ctx)
		if ps[pool].Served != served+1 {
			t.Errorf("sample %d was not served by the pool (served %d -> %d)", i, served, ps[pool].Served)
		}
		check(t, sb)
		if err := env.client.DestroySandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds
}
