package sandbox

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// Pause and resume. A paused sandbox's processes are frozen by the
// driver (the cgroup freezer on the container tier): memory is kept, no
// CPU is used, and exec and file requests fail with a precondition error
// unless the sandbox was created with auto_resume. Its TTL keeps running;
// when the TTL runs out a paused sandbox is destroyed, unless it asked for
// on_timeout "pause", in which case it stays paused until resumed and its
// TTL starts again from the resume.
//
// A stopped sandbox (a persistent one whose init was lost, e.g. after a
// host reboot) still has its writable layer; Resume starts a new init on it
// (a cold start: files survive, processes and memory do not).

func pauser(e *entry) (driver.Pauser, error) {
	if err := driver.Refuses(e.drv, driver.OpPause); err != nil {
		return nil, err
	}
	p, ok := driver.As[driver.Pauser](e.drv)
	if !ok {
		return nil, errdefs.Precondition("isolation %s cannot pause sandboxes", e.drv.Name())
	}
	return p, nil
}

// Pause freezes every process of a tenant's sandbox.
func (s *Service) Pause(ctx context.Context, scope tenancy.Scope, id string) (*api.Sandbox, error) {
	e, err := s.lookup(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	p, err := pauser(e)
	if err != nil {
		return nil, err
	}
	e.op.Lock()
	defer e.op.Unlock()
	if err := s.pauseLocked(ctx, e, p); err != nil {
		return nil, err
	}
	return s.Get(ctx, scope, id)
}

func (s *Service) pauseLocked(ctx context.Context, e *entry, p driver.Pauser) error {
	if e.destroying {
		return errdefs.Precondition("sandbox %s is being destroyed", e.id)
	}
	if e.paused.Load() {
		return nil
	}
	e.sb.waitSpawn(ctx) // standby.go
	if err := p.Pause(ctx, e.handle()); err != nil {
		return fmt.Errorf("pausing sandbox %s: %w", e.id, err)
	}
	e.paused.Store(true)
	err := s.st.UpdateSandbox(context.WithoutCancel(ctx), e.id, func(r *store.SandboxRecord) error {
		if err := s.transition(r, api.StatePaused); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		_ = p.Resume(context.WithoutCancel(ctx), e.handle())
		e.paused.Store(false)
		return err
	}
	return nil
}

// Resume thaws a paused sandbox, or cold-starts a stopped one.
func (s *Service) Resume(ctx context.Context, scope tenancy.Scope, id string) (*api.Sandbox, error) {
	rec, err := s.visible(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	if rec.State == api.StateStopped {
		return s.coldStart(ctx, rec)
	}
	e, err := s.lookup(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	if e.onDisk.Load() {
		return s.resumeFromDisk(ctx, e) // memsnap.go
	}
	p, err := pauser(e)
	if err != nil {
		return nil, err
	}
	e.op.Lock()
	defer e.op.Unlock()
	if e.destroying {
		return nil, errdefs.Precondition("sandbox %s is being destroyed", id)
	}
	if !e.paused.Load() {
		return s.Get(ctx, scope, id)
	}
	if err := p.Resume(ctx, e.handle()); err != nil {
		return nil, fmt.Errorf("resuming sandbox %s: %w", id, err)
	}
	e.paused.Store(false)
	e.act.touch() // the idle clock starts again
	var out *store.SandboxRecord
	err = s.st.UpdateSandbox(context.WithoutCancel(ctx), id, func(r *store.SandboxRecord) error {
		if err := s.transition(r, api.StateRunning); err != nil {
			return err
		}
		s.renewTTL(r)
		out = r
		return nil
	})
	if err != nil {
		return nil, err
	}
	return toAPI(out), nil
}

// renewTTL gives a sandbox whose TTL ran out while paused (on_timeout
// pause) a full TTL again.
func (s *Service) renewTTL(r *store.SandboxRecord) {
	if r.ExpiresAt == nil || r.ExpiresAt.After(time.Now()) {
		return
	}
	res, err := resolve(s.cfg, &r.Spec)
	if err != nil || res.TTL <= 0 {
		r.ExpiresAt = nil
		return
	}
	exp := time.Now().UTC().Add(res.TTL)
	r.ExpiresAt = &exp
}

// coldStart starts a new init on a stopped sandbox's layer.
func (s *Service) coldStart(ctx context.Context, rec *store.SandboxRecord) (*api.Sandbox, error) {
	drv, ok := s.drivers[rec.Isolation]
	if !ok {
		return nil, errdefs.Precondition("sandbox %s needs isolation %s, which this daemon does not run", rec.ID, rec.Isolation)
	}
	tpl, err := s.pool.TemplateVersion(rec.Template, rec.TemplateVersion)
	if err != nil {
		return nil, fmt.Errorf("template of sandbox %s: %w", rec.ID, err)
	}
	// One cold start at a time: a second resume finds it running.
	s.coldMu.Lock()
	defer s.coldMu.Unlock()
	if cur, err := s.st.GetSandbox(ctx, rec.ID); err != nil || cur.State != api.StateStopped {
		return s.Get(ctx, tenancy.Only(rec.Tenant), rec.ID)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	// A stopped sandbox's disk already counts against its tenant's quota.
	release, err := s.admit(cctx, rec.Tenant, rec.Resources, 1, false)
	if err != nil {
		return nil, err
	}
	defer release()
	// The record stays stopped until the init answers: a crash meanwhile
	// leaves a stopped sandbox with its layer, never a lost one.
	e, b, err := s.start(cctx, rec, tpl, drv, true)
	if err != nil {
		return nil, fmt.Errorf("starting stopped sandbox %s: %w", rec.ID, err)
	}
	var out *store.SandboxRecord
	err = s.st.UpdateSandbox(cctx, rec.ID, func(r *store.SandboxRecord) error {
		if err := s.transition(r, api.StateRunning); err != nil {
			return err
		}
		r.Handle = e.handle()
		r.Error = ""
		s.renewTTL(r)
		out = r
		return nil
	})
	if err != nil {
		_ = b.Release(cctx) // the layer and address stay the stopped sandbox's
		return nil, err
	}
	s.mu.Lock()
	s.live[rec.ID] = e
	s.mu.Unlock()
	s.watch(e, 0)
	s.log.Info("cold-started stopped sandbox", "sandbox", rec.ID)
	return toAPI(out), nil
}

// keepStopped handles the unexpected exit of a persistent sandbox's init
// (generation gen): instead of a failed sandbox with its files removed,
// it becomes stopped with its writable layer, network address and
// settings kept, and Resume starts it cold. It reports false, doing
// nothing, for a sandbox that is not persistent.
func (s *Service) keepStopped(e *entry, gen uint64, why string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, err := s.st.GetSandbox(ctx, e.id)
	if err != nil || !persistent(rec) {
		return false
	}
	e.op.Lock()
	defer e.op.Unlock()
	if e.destroying || e.gen != gen {
		return true
	}
	e.destroying = true
	s.standby.drop(ctx, e)
	h := e.handle()
	derr := e.drv.Destroy(ctx, h)
	e.guest.CloseIdleConnections()
	_ = os.RemoveAll(s.runDir(e.id))
	s.mu.Lock()
	delete(s.live, e.id)
	s.mu.Unlock()
	_ = s.st.UpdateSandbox(ctx, e.id, func(r *store.SandboxRecord) error {
		if err := s.transition(r, api.StateStopped); err != nil {
			return err
		}
		r.Handle = nil
		r.Error = "its init exited unexpectedly" + because(why) + "; files kept: `agentbox resume " + e.id + "` starts it again"
		if derr != nil {
			r.Error += "; cleanup: " + derr.Error()
		}
		return nil
	})
	s.log.Warn("sandbox init exited unexpectedly; kept stopped with its files (on_timeout: pause)", "sandbox", e.id, "why", why, "err", derr)
	return true
}
