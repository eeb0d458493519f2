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

// TestGvisorCreateFromPool measures create on the gvisor tier served from
// a warm pool of pre-started runsc sandboxes ([[pool]] isolation =
// "gvisor"): the daemon restarts with a pool of 2 busybox sandboxes, and
// each of 20 samples waits for the pool to be full (refills untimed),
// creates, checks the pool served it and that the sandbox is its own
// (id, hostname), and destroys it. p50 and p99 are logged; docs/gvisor.md
// has the figures. A cold gvisor create is TestGvisorCreateLatency.
func TestGvisorCreateFromPool(t *testing.T) {
	needGvisor(t)
	ctx := context.Background()
	saved := slices.Clone(env.cfg.Pools)
	env.cfg.Pools = append(env.cfg.Pools, config.WarmPool{Template: "busybox", Isolation: "gvisor", Size: 2})
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
		if p.Template == "busybox" && p.Isolation == "gvisor" {
			pool = i
		}
	}
	if pool < 0 {
		t.Fatalf("no gvisor pool in %+v", ps)
	}
	waitFull := func() int64 {
		deadline := time.Now().Add(60 * time.Second)
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
				t.Fatalf("the gvisor pool did not fill: %+v", p)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	const n = 20
	var ds []time.Duration
	for i := range n {
		served := waitFull()
		start := time.Now()
		sb, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", Isolation: "gvisor"})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		ds = append(ds, time.Since(start))
		ps, _ := env.client.Pools(ctx)
		if ps[pool].Served != served+1 {
			t.Errorf("sample %d was not served by the pool (served %d -> %d)", i, served, ps[pool].Served)
		}
		if i == 0 {
			if out := mustSh(t, sb.ID, "hostname"); out != "sbx-"+sb.ID {
				t.Errorf("pool sandbox %s has hostname %q", sb.ID, out)
			}
		}
		if err := env.client.DestroySandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	p99 := ds[(len(ds)*99+99)/100-1]
	t.Logf("gvisor create from a warm pool (%d, busybox): p50 %v, p99 %v, min %v", n, ds[len(ds)/2], p99, ds[0])
}
