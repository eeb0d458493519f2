package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// The lifecycle rules, on the real service over the fake host
// (fake_test.go): they run without root, in well under a second each.

const tenant = "acme"

// acme is what tenant's key may see.
var acme = tenancy.Only(tenant)

func create(t *testing.T, s *Service, req *api.CreateSandboxRequest) *api.Sandbox {
	t.Helper()
	if req == nil {
		req = &api.CreateSandboxRequest{}
	}
	sb, err := s.Create(context.Background(), tenant, req)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if sb.State != api.StateRunning {
		t.Fatalf("created sandbox is %s, want running", sb.State)
	}
	return sb
}

// upperOf is sandbox id's writable layer on the fake pool.
func (h *host) upperOf(id string) string {
	upper, _, err := h.pool.LayerPaths(id)
	if err != nil {
		h.t.Fatalf("layer of %s: %v", id, err)
	}
	return upper
}

func TestLifecycleCreateDestroy(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start()
	ctx := context.Background()
	sb := create(t, s, nil)
	if got := h.drv.running(); !slices.Equal(got, []string{sb.ID}) {
		t.Fatalf("driver runs %v, want [%s]", got, sb.ID)
	}
	if !slices.Contains(h.pool.layers(t), sb.ID) {
		t.Fatalf("no writable layer for %s", sb.ID)
	}
	if got, err := s.Get(ctx, acme, sb.ID); err != nil || got.State != api.StateRunning {
		t.Fatalf("Get = %+v, %v; want running", got, err)
	}
	if _, err := s.Get(ctx, tenancy.Only("other"), sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant's Get: %s, want not found", errClass(err))
	}
	if err := s.Destroy(ctx, tenancy.Only("other"), sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant's Destroy: %s, want not found", errClass(err))
	}
	// A caller that built no scope sees nothing: it fails closed.
	if _, err := s.Get(ctx, tenancy.Scope{}, sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get with the zero scope: %s, want not found", errClass(err))
	}
	if list, err := s.List(ctx, tenancy.Scope{}, ListFilter{}); err != nil || len(list) != 0 {
		t.Errorf("List with the zero scope = %d sandboxes, %v; want none", len(list), err)
	}
	if list, err := s.List(ctx, tenancy.AllTenants(), ListFilter{}); err != nil || len(list) != 1 {
		t.Errorf("List of all tenants = %d sandboxes, %v; want 1", len(list), err)
	}
	if err := s.Destroy(ctx, acme, sb.ID); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if got := h.state(sb.ID); got != api.StateDestroyed {
		t.Errorf("state after destroy = %s", got)
	}
	h.leftNothing(sb.ID)
	if _, err := s.Get(ctx, acme, sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get of a destroyed sandbox: %s, want not found", errClass(err))
	}
	if n := s.LiveCount(); n != 0 {
		t.Errorf("LiveCount = %d after destroy", n)
	}
}

func TestLifecycleCreateFailsLeavesNothing(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start()
	h.drv.failCreate = errors.New("no more inits")
	_, err := s.Create(context.Background(), tenant, &api.CreateSandboxRequest{})
	if err == nil {
		t.Fatal("create succeeded on a driver that fails")
	}
	recs, lerr := h.st.ListSandboxes(context.Background(), store.Filter{Scope: tenancy.AllTenants()})
	if lerr != nil || len(recs) != 1 {
		t.Fatalf("records: %v, %v; want the one failed", recs, lerr)
	}
	if recs[0].State != api.StateFailed || recs[0].Error == "" {
		t.Errorf("record is %s (%q), want failed with its error", recs[0].State, recs[0].Error)
	}
	h.leftNothing(recs[0].ID)
	// Destroying a failed sandbox records it destroyed and succeeds.
	if err := s.Destroy(context.Background(), acme, recs[0].ID); err != nil {
		t.Errorf("destroy of a failed sandbox: %v", err)
	}
	if got := h.state(recs[0].ID); got != api.StateDestroyed {
		t.Errorf("state = %s, want destroyed", got)
	}
}

func TestLifecyclePauseResume(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start()
	ctx := context.Background()
	sb := create(t, s, nil)
	got, err := s.Pause(ctx, acme, sb.ID)
	if err != nil || got.State != api.StatePaused {
		t.Fatalf("pause = %+v, %v", got, err)
	}
	if !h.drv.isPaused(sb.ID) {
		t.Error("the driver did not freeze the sandbox")
	}
	if _, err := s.Pause(ctx, acme, sb.ID); err != nil {
		t.Errorf("a second pause: %v", err)
	}
	if _, err := s.Guest(ctx, acme, sb.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("guest request to a paused sandbox: %s, want failed precondition", errClass(err))
	}
	got, err = s.Resume(ctx, acme, sb.ID)
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("resume = %+v, %v", got, err)
	}
	if h.drv.isPaused(sb.ID) {
		t.Error("the driver did not thaw the sandbox")
	}
	if _, err := s.Guest(ctx, acme, sb.ID); err != nil {
		t.Errorf("guest transport of a running sandbox: %v", err)
	}
	// auto_resume: a guest request thaws it.
	ar := create(t, s, &api.CreateSandboxRequest{AutoResume: true})
	if _, err := s.Pause(ctx, acme, ar.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Guest(ctx, acme, ar.ID); err != nil {
		t.Fatalf("guest request with auto_resume: %v", err)
	}
	if st := h.state(ar.ID); st != api.StateRunning || h.drv.isPaused(ar.ID) {
		t.Errorf("after an auto-resuming request: %s, frozen %v", st, h.drv.isPaused(ar.ID))
	}
	// A paused sandbox is destroyed like any other.
	if _, err := s.Pause(ctx, acme, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Destroy(ctx, acme, sb.ID); err != nil {
		t.Fatal(err)
	}
	h.leftNothing(sb.ID)
}

func TestLifecycleReset(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start()
	ctx := context.Background()
	sb := create(t, s, nil)
	if err := os.WriteFile(filepath.Join(h.upperOf(sb.ID), "scratch"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pause(ctx, acme, sb.ID); err != nil { // a paused sandbox resets too
		t.Fatal(err)
	}
	got, err := s.Reset(ctx, acme, sb.ID, "", false)
	if err != nil {
		t.Fatalf("reset: %v", err)
	}
	if got.ID != sb.ID || got.State != api.StateRunning {
		t.Errorf("reset gave %s %s, want %s running", got.ID, got.State, sb.ID)
	}
	if got.Pid == sb.Pid {
		t.Errorf("reset kept the init (pid %d)", got.Pid)
	}
	if _, err := os.Stat(filepath.Join(h.upperOf(sb.ID), "scratch")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file written before the reset survived it (%v)", err)
	}
	if got := h.drv.running(); !slices.Equal(got, []string{sb.ID}) {
		t.Errorf("driver runs %v after reset, want only the new init", got)
	}
	// The replaced init's exit does not fail the sandbox.
	time.Sleep(50 * time.Millisecond)
	if st := h.state(sb.ID); st != api.StateRunning {
		t.Errorf("state after reset = %s", st)
	}
	// A reset that fails leaves a failed sandbox and nothing on the host.
	h.drv.failCreate = errors.New("no more inits")
	if _, err := s.Reset(ctx, acme, sb.ID, "", false); err == nil {
		t.Fatal("reset succeeded on a driver that fails")
	}
	if st := h.state(sb.ID); st != api.StateFailed {
		t.Errorf("state after a failed reset = %s, want failed", st)
	}
	h.leftNothing(sb.ID)
}

func TestLifecycleFork(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start()
	ctx := context.Background()
	parent := create(t, s, nil)
	if err := os.WriteFile(filepath.Join(h.upperOf(parent.ID), "made-before"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	kids, err := s.Fork(ctx, acme, parent.ID, 2)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	if len(kids) != 2 {
		t.Fatalf("fork made %d sandboxes, want 2", len(kids))
	}
	for _, k := range kids {
		if k.State != api.StateRunning || k.Parent != parent.ID || k.Snapshot == "" {
			t.Errorf("child %+v: want running, parent %s, a snapshot", k, parent.ID)
		}
		rec, err := h.st.GetSandbox(ctx, k.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.Lowers) == 0 {
			t.Fatalf("child %s has no lowers", k.ID)
		}
		if _, err := os.Stat(filepath.Join(rec.Lowers[0], "made-before")); err != nil {
			t.Errorf("child %s does not stack on the parent's files: %v", k.ID, err)
		}
	}
	if st := h.state(parent.ID); st != api.StateRunning {
		t.Errorf("parent is %s after fork", st)
	}
	if h.drv.isPaused(parent.ID) {
		t.Error("parent left frozen by the fork")
	}
	// The children outlive their parent; the snapshot they stack on goes
	// with the last of them.
	if err := s.Destroy(ctx, acme, parent.ID); err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		if st := h.state(k.ID); st != api.StateRunning {
			t.Errorf("child %s is %s after its parent's destroy", k.ID, st)
		}
	}
	snaps, _ := h.pool.ListSnapshots()
	if len(snaps) != 1 {
		t.Errorf("snapshots while children run: %v, want 1", snaps)
	}
	for _, k := range kids {
		if err := s.Destroy(ctx, acme, k.ID); err != nil {
			t.Fatal(err)
		}
		h.leftNothing(k.ID)
	}
	if snaps, _ := h.pool.ListSnapshots(); len(snaps) != 0 {
		t.Errorf("snapshots left after every child went: %v", snaps)
	}
}

// expire makes sandbox id's TTL run out now.
func (h *host) expire(id string) {
	h.t.Helper()
	err := h.st.UpdateSandbox(context.Background(), id, func(r *store.SandboxRecord) error {
		past := time.Now().Add(-time.Second)
		r.ExpiresAt = &past
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
}

func TestLifecycleTTLExpiry(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start()
	ctx := context.Background()
	sb := create(t, s, &api.CreateSandboxRequest{TTLSeconds: 3600})
	if sb.ExpiresAt == nil {
		t.Fatal("a sandbox with a TTL has no expiry")
	}
	keep := create(t, s, &api.CreateSandboxRequest{TTLSeconds: -1})
	pausing := create(t, s, &api.CreateSandboxRequest{TTLSeconds: 3600, OnTimeout: api.OnTimeoutPause})
	h.expire(sb.ID)
	h.expire(pausing.ID)
	h.waitState(sb.ID, api.StateDestroyed)
	h.leftNothing(sb.ID)
	h.waitState(pausing.ID, api.StatePaused)
	if !h.drv.isPaused(pausing.ID) {
		t.Error("a sandbox paused on timeout is not frozen")
	}
	// Its TTL starts again from the resume.
	got, err := s.Resume(ctx, acme, pausing.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ExpiresAt == nil || time.Until(*got.ExpiresAt) < 30*time.Minute {
		t.Errorf("resumed sandbox expires at %v, want a full TTL from now", got.ExpiresAt)
	}
	if st := h.state(keep.ID); st != api.StateRunning {
		t.Errorf("a sandbox with no TTL is %s", st)
	}
}

// idleSince moves sandbox id's idle clock back by d.
func idleSince(t *testing.T, s *Service, id string, d time.Duration) {
	t.Helper()
	s.mu.Lock()
	e := s.live[id]
	s.mu.Unlock()
	if e == nil {
		t.Fatalf("sandbox %s is not live", id)
	}
	e.act.last.Store(time.Now().Add(-d).UnixNano())
}

func TestLifecycleIdleTimeout(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start()
	idle := create(t, s, &api.CreateSandboxRequest{IdleTimeoutSeconds: 60})
	pausing := create(t, s, &api.CreateSandboxRequest{IdleTimeoutSeconds: 60, OnTimeout: api.OnTimeoutPause})
	busy := create(t, s, &api.CreateSandboxRequest{IdleTimeoutSeconds: 60})
	idleSince(t, s, idle.ID, time.Hour)
	idleSince(t, s, pausing.ID, time.Hour)
	h.waitState(idle.ID, api.StateDestroyed)
	h.leftNothing(idle.ID)
	h.waitState(pausing.ID, api.StatePaused)
	if st := h.state(busy.ID); st != api.StateRunning {
		t.Errorf("a sandbox used within its idle timeout is %s", st)
	}
}

func TestLifecycleInitDies(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start()
	ctx := context.Background()
	gone := create(t, s, nil)
	kept := create(t, s, &api.CreateSandboxRequest{OnTimeout: api.OnTimeoutPause})
	if err := os.WriteFile(filepath.Join(h.upperOf(kept.ID), "work"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.drv.crash(gone.ID)
	h.drv.crash(kept.ID)
	// A sandbox whose init dies fails, and nothing of it is left.
	h.waitState(gone.ID, api.StateFailed)
	h.leftNothing(gone.ID)
	// A persistent one stops with its files; resume starts it cold.
	h.waitState(kept.ID, api.StateStopped)
	if _, err := s.Pause(ctx, acme, kept.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("pause of a stopped sandbox: %s, want failed precondition", errClass(err))
	}
	got, err := s.Resume(ctx, acme, kept.ID)
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("cold start = %+v, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(h.upperOf(kept.ID), "work")); err != nil {
		t.Errorf("the stopped sandbox's files did not survive: %v", err)
	}
	if !slices.Contains(h.drv.running(), kept.ID) {
		t.Error("the cold-started sandbox does not run")
	}
}

func TestLifecycleRestartRecovery(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start()
	ctx := context.Background()
	running := create(t, s, nil)
	paused := create(t, s, nil)
	persistent := create(t, s, &api.CreateSandboxRequest{OnTimeout: api.OnTimeoutPause})
	if _, err := s.Pause(ctx, acme, paused.ID); err != nil {
		t.Fatal(err)
	}
	// A leftover the earlier daemon did not record.
	if _, _, err := h.pool.CreateLayer(ctx, "leftover", 1, nil); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// The daemon restarts; its sandboxes kept running.
	s = h.start()
	for _, c := range []struct{ id, state string }{
		{running.ID, api.StateRunning}, {paused.ID, api.StatePaused}, {persistent.ID, api.StateRunning},
	} {
		if st := h.state(c.id); st != c.state {
			t.Errorf("after a restart %s is %s, want %s", c.id, st, c.state)
		}
	}
	if n := s.LiveCount(); n != 3 {
		t.Errorf("re-adopted %d sandboxes, want 3", n)
	}
	if slices.Contains(h.pool.layers(t), "leftover") {
		t.Error("a layer of no sandbox survived the restart")
	}
	if _, err := s.Resume(ctx, acme, paused.ID); err != nil {
		t.Errorf("resume after a restart: %v", err)
	}
	// A re-adopted sandbox's init is watched again.
	h.drv.crash(running.ID)
	h.waitState(running.ID, api.StateFailed)
	s.Close()

	// The host reboots: no init survives. A persistent sandbox (and a
	// paused one) is kept stopped with its files; the others fail.
	h.drv.reboot()
	s = h.start()
	if st := h.state(persistent.ID); st != api.StateStopped {
		t.Errorf("persistent sandbox after a reboot is %s, want stopped", st)
	}
	if !slices.Contains(h.pool.layers(t), persistent.ID) {
		t.Error("the persistent sandbox's layer was removed")
	}
	if _, err := s.Resume(ctx, acme, persistent.ID); err != nil {
		t.Errorf("cold start after a reboot: %v", err)
	}
	if st := h.state(persistent.ID); st != api.StateRunning {
		t.Errorf("persistent sandbox after its cold start is %s", st)
	}
}

func TestLifecycleQuota(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	ctx := context.Background()
	if err := h.st.CreateTenant(ctx, &store.TenantRecord{Name: tenant, Quotas: store.Quotas{Sandboxes: 2, MemoryMB: 1024}}); err != nil {
		t.Fatal(err)
	}
	s := h.start()
	a := create(t, s, &api.CreateSandboxRequest{MemoryMB: 512})
	if _, err := s.Create(ctx, tenant, &api.CreateSandboxRequest{MemoryMB: 1024}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("create over the memory quota: %s, want resource exhausted", errClass(err))
	}
	b := create(t, s, &api.CreateSandboxRequest{MemoryMB: 256})
	if _, err := s.Create(ctx, tenant, &api.CreateSandboxRequest{MemoryMB: 64}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("create over the sandbox quota: %s, want resource exhausted", errClass(err))
	}
	if _, err := s.Fork(ctx, acme, a.ID, 1); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("fork over the sandbox quota: %s, want resource exhausted", errClass(err))
	}
	// Another tenant has no quota.
	if _, err := s.Create(ctx, "other", &api.CreateSandboxRequest{}); err != nil {
		t.Errorf("another tenant's create: %v", err)
	}
	if err := s.Destroy(ctx, acme, b.ID); err != nil {
		t.Fatal(err)
	}
	create(t, s, &api.CreateSandboxRequest{MemoryMB: 256})
	if got := len(h.drv.running()); got != 3 {
		t.Errorf("driver runs %d sandboxes, want 3", got)
	}
}

// TestLifecycleQuotaPids: a tenant's pids quota caps the sum of its
// running sandboxes' pids limits, so that its sandboxes together cannot
// take the host's pids; a destroy gives them back, and fork counts them.
func TestLifecycleQuotaPids(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	ctx := context.Background()
	if err := h.st.CreateTenant(ctx, &store.TenantRecord{Name: tenant, Quotas: store.Quotas{Pids: 1000}}); err != nil {
		t.Fatal(err)
	}
	s := h.start()
	a := create(t, s, &api.CreateSandboxRequest{Pids: 600})
	_, err := s.Create(ctx, tenant, &api.CreateSandboxRequest{Pids: 500})
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "pids quota is 1000, 600 in use, this request adds 500") {
		t.Errorf("create over the pids quota: %v, want resource exhausted naming the pids quota", err)
	}
	b := create(t, s, &api.CreateSandboxRequest{Pids: 400})
	if _, err := s.Fork(ctx, acme, b.ID, 1); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("fork over the pids quota: %s, want resource exhausted", errClass(err))
	}
	if u, _ := h.st.TenantUsage(ctx, tenant); u.Pids != 1000 {
		t.Errorf("usage counts %d pids, want 1000", u.Pids)
	}
	if err := s.Destroy(ctx, acme, a.ID); err != nil {
		t.Fatal(err)
	}
	create(t, s, &api.CreateSandboxRequest{Pids: 500})
}

// TestLifecycleCreateWhileDestroyed checks the state machine against a
// destroy that wins a race: a record destroyed never runs again.
func TestLifecycleTransitionRefused(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start()
	ctx := context.Background()
	sb := create(t, s, nil)
	if err := s.Destroy(ctx, acme, sb.ID); err != nil {
		t.Fatal(err)
	}
	err := h.st.UpdateSandbox(ctx, sb.ID, func(r *store.SandboxRecord) error {
		return s.transition(r, api.StateRunning)
	})
	if !errors.Is(err, ErrInvalidTransition) {
		t.Errorf("destroyed -> running: %v, want ErrInvalidTransition", err)
	}
	if st := h.state(sb.ID); st != api.StateDestroyed {
		t.Errorf("a refused move changed the record to %s", st)
	}
}

func TestLifecyclePauseToDisk(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start()
	ctx := context.Background()
	sb := create(t, s, &api.CreateSandboxRequest{Isolation: "fakemem"})
	if err := os.WriteFile(filepath.Join(h.upperOf(sb.ID), "work"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := s.PauseToDisk(ctx, acme, sb.ID)
	if err != nil || got.State != api.StatePaused || !got.PausedToDisk {
		t.Fatalf("pause to disk = %+v, %v", got, err)
	}
	if slices.Contains(h.drv.running(), sb.ID) {
		t.Error("a sandbox paused to disk still runs")
	}
	// Its init's exit (the checkpoint stops it) does not fail it.
	time.Sleep(50 * time.Millisecond)
	if st := h.state(sb.ID); st != api.StatePaused {
		t.Errorf("state = %s, want paused", st)
	}
	if _, err := s.Reset(ctx, acme, sb.ID, "", false); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("reset of a sandbox paused to disk: %s, want failed precondition", errClass(err))
	}
	// A restarted daemon finds it paused to disk still.
	s.Close()
	s = h.start()
	if got, err := s.Get(ctx, acme, sb.ID); err != nil || !got.PausedToDisk {
		t.Fatalf("after a restart: %+v, %v; want paused to disk", got, err)
	}
	got, err = s.Resume(ctx, acme, sb.ID)
	if err != nil || got.State != api.StateRunning {
		t.Fatalf("resume from disk = %+v, %v", got, err)
	}
	dir := s.ckpt.diskDir(sb.ID)
	if from := h.drv.restoredFrom(sb.ID); from != dir {
		t.Errorf("resumed from %q, want its checkpoint %s", from, dir)
	}
	if _, err := os.Stat(filepath.Join(h.upperOf(sb.ID), "work")); err != nil {
		t.Errorf("files written before the pause are gone: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the checkpoint outlived the resume (%v)", err)
	}
	// Paused to disk again, then destroyed: nothing is left.
	if _, err := s.PauseToDisk(ctx, acme, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Destroy(ctx, acme, sb.ID); err != nil {
		t.Fatal(err)
	}
	h.leftNothing(sb.ID)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the checkpoint outlived the destroy (%v)", err)
	}
	// A tier without memory snapshots says which has them.
	plain := create(t, s, nil)
	if _, err := s.PauseToDisk(ctx, acme, plain.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("pause to disk on a tier without it: %s, want failed precondition", errClass(err))
	}
}

func TestLifecycleForkWithMemory(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start()
	ctx := context.Background()
	parent := create(t, s, &api.CreateSandboxRequest{Isolation: "fakemem"})
	kids, err := s.ForkWithMemory(ctx, acme, parent.ID, 2)
	if err != nil {
		t.Fatalf("fork with memory: %v", err)
	}
	for _, k := range kids {
		if k.State != api.StateRunning || k.Isolation != "fakemem" {
			t.Errorf("child %+v: want running on fakemem", k)
		}
		if from := h.drv.restoredFrom(k.ID); from != s.ckpt.snapshotDir(k.Snapshot) {
			t.Errorf("child %s restored from %q, want the fork's checkpoint", k.ID, from)
		}
	}
	if st := h.state(parent.ID); st != api.StateRunning || !slices.Contains(h.drv.running(), parent.ID) {
		t.Errorf("parent is %s after a fork with memory", st)
	}
	// A sandbox created from a snapshot with memory restores it.
	snap, err := s.SnapshotWithMemory(ctx, acme, parent.ID, "mem")
	if err != nil || !snap.Memory {
		t.Fatalf("snapshot with memory = %+v, %v", snap, err)
	}
	sb := create(t, s, &api.CreateSandboxRequest{Snapshot: "mem"})
	if sb.Isolation != "fakemem" || h.drv.restoredFrom(sb.ID) != s.ckpt.snapshotDir(snap.ID) {
		t.Errorf("created from a snapshot with memory: %s, restored from %q", sb.Isolation, h.drv.restoredFrom(sb.ID))
	}
	for _, id := range append([]string{parent.ID, sb.ID}, kids[0].ID, kids[1].ID) {
		if err := s.Destroy(ctx, acme, id); err != nil {
			t.Fatal(err)
		}
		h.leftNothing(id)
	}
	// The fork's internal snapshot and its memory went with its children.
	snaps, _ := h.pool.ListSnapshots()
	if len(snaps) != 1 {
		t.Errorf("snapshots left: %v, want only %q", snaps, snap.ID)
	}
}

// TestLifecycleSnapshotKeepsTier: a create from a snapshot without memory
// names no tier and runs on the snapshot's (a sandbox snapshotted on
// gvisor is not moved to the default tier, a weaker boundary), booted
// from its files; one that names another tier gets it.
func TestLifecycleSnapshotKeepsTier(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start()
	ctx := context.Background()
	parent := create(t, s, &api.CreateSandboxRequest{Isolation: "fakemem"})
	if _, err := s.Snapshot(ctx, acme, parent.ID, "files"); err != nil {
		t.Fatal(err)
	}
	onOwn := create(t, s, &api.CreateSandboxRequest{Snapshot: "files"})
	onDefault := create(t, s, &api.CreateSandboxRequest{Snapshot: "files", Isolation: "fake"})
	if onOwn.Isolation != "fakemem" || onDefault.Isolation != "fake" || h.drv.restoredFrom(onOwn.ID) != "" {
		t.Errorf("created from a snapshot without memory: on %s (restored from %q), and with isolation fake on %s; want fakemem (booted), fake",
			onOwn.Isolation, h.drv.restoredFrom(onOwn.ID), onDefault.Isolation)
	}
	for _, id := range []string{parent.ID, onOwn.ID, onDefault.ID} {
		if err := s.Destroy(ctx, acme, id); err != nil {
			t.Fatal(err)
		}
		h.leftNothing(id)
	}
}

// TestLifecycleForkFailsLeavesNothing: when one child cannot boot, the
// children that did are released (booted.Release) and every child is
// recorded failed; the parent goes on.
func TestLifecycleForkFailsLeavesNothing(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start()
	ctx := context.Background()
	parent := create(t, s, nil)
	h.drv.mu.Lock()
	h.drv.failCreate, h.drv.failAfter = errors.New("no more inits"), h.drv.created+2
	h.drv.mu.Unlock()
	if _, err := s.Fork(ctx, acme, parent.ID, 3); err == nil {
		t.Fatal("fork succeeded with a child that cannot boot")
	}
	recs, err := h.st.ListSandboxes(ctx, store.Filter{Scope: tenancy.AllTenants()})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.ID == parent.ID {
			continue
		}
		if r.State != api.StateFailed {
			t.Errorf("child %s is %s, want failed", r.ID, r.State)
		}
		h.leftNothing(r.ID)
	}
	if len(recs) != 4 {
		t.Errorf("%d records, want the parent and 3 children", len(recs))
	}
	if got := h.drv.running(); !slices.Equal(got, []string{parent.ID}) {
		t.Errorf("driver runs %v, want only the parent", got)
	}
	if snaps, _ := h.pool.ListSnapshots(); len(snaps) != 0 {
		t.Errorf("the failed fork's snapshot is left: %v", snaps)
	}
}

// TestLifecycleResetStandby: on a tier with standby inits, a reset
// prepares the next one, the following reset switches to it, and a
// destroy discards the one waiting.
func TestLifecycleResetStandby(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start()
	ctx := context.Background()
	sb := create(t, s, &api.CreateSandboxRequest{Isolation: "fakeready"})
	first, err := s.Reset(ctx, acme, sb.ID, "", false)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a standby init", func() bool { return h.drv.standbyCount() == 1 })
	if err := os.WriteFile(filepath.Join(h.upperOf(sb.ID), "scratch"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	second, err := s.Reset(ctx, acme, sb.ID, "", false)
	if err != nil {
		t.Fatalf("reset onto the standby: %v", err)
	}
	if second.Pid == first.Pid || second.State != api.StateRunning {
		t.Errorf("second reset: pid %d (was %d), %s", second.Pid, first.Pid, second.State)
	}
	if _, err := os.Stat(filepath.Join(h.upperOf(sb.ID), "scratch")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file written before the reset survived it (%v)", err)
	}
	// The replaced init's exit does not fail the sandbox, and the old
	// layer goes.
	waitFor(t, "the old layer to go and a new standby", func() bool {
		return len(h.pool.layers(t)) == 2 && h.drv.standbyCount() == 1
	})
	if st := h.state(sb.ID); st != api.StateRunning {
		t.Errorf("state after the reset = %s", st)
	}
	if err := s.Destroy(ctx, acme, sb.ID); err != nil {
		t.Fatal(err)
	}
	h.leftNothing(sb.ID)
	if n := h.drv.standbyCount(); n != 0 {
		t.Errorf("%d standby inits outlived the destroy", n)
	}
	if got := h.pool.layers(t); len(got) != 0 {
		t.Errorf("layers left: %v", got)
	}
}
