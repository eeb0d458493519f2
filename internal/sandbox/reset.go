package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// Reset puts a tenant's sandbox back where it started (its template, or
// the snapshot it was created from or last reset to), onto snapshot
// snapRef, or with toTemplate onto its template alone, in place:
// same id, settings and lineage; every process is killed and the writable
// layer replaced by an empty one. It skips what a destroy and a create
// spend on records, ids and the API round trips.
func (s *Service) Reset(ctx context.Context, scope tenancy.Scope, id, snapRef string, toTemplate bool) (_ *api.Sandbox, err error) {
	defer func() {
		if err == nil {
			s.Emit(events.Reset, id, snapRef) // events.go
		}
	}()
	if snapRef != "" && toTemplate {
		return nil, errdefs.Invalid("reset to a snapshot or to the template, not both")
	}
	e, err := s.lookup(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	if err := driver.Refuses(e.drv, driver.OpReset); err != nil {
		return nil, err
	}
	if e.onDisk.Load() { // memsnap.go
		return nil, errdefs.Precondition("sandbox %s is paused to disk; resume it (`agentbox resume %s`) before a reset, or destroy it", id, id)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	cur, err := s.st.GetSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	var (
		tpl     *storage.Template
		snap    *store.SnapshotRecord
		oldSnap = cur.Snapshot
	)
	if snapRef != "" {
		if snap, err = s.st.GetSnapshot(ctx, scope, snapRef); err != nil {
			return nil, err
		}
		if snap.State != store.SnapshotReady {
			return nil, errdefs.NotFound("snapshot %q is still being taken; retry in a moment", snapRef)
		}
		if snap.Isolation != "" && snap.Isolation != cur.Isolation {
			return nil, errdefs.Invalid("snapshot %s was taken on isolation %s; sandbox %s runs %s", snap.ID, snap.Isolation, id, cur.Isolation)
		}
		// A reset boots the snapshot's files, without its memory.
		if err := driver.Refuses(e.drv, driver.OpFileSnapshot); err != nil {
			return nil, err
		}
		tpl, err = s.pool.TemplateVersion(snap.Template, snap.TemplateVersion)
	} else {
		tpl, err = s.pool.TemplateVersion(cur.Template, cur.TemplateVersion)
	}
	if err != nil {
		return nil, fmt.Errorf("resetting sandbox %s: %w", id, err)
	}

	e.sb.waitStandby(ctx) // standby.go
	e.op.Lock()
	defer e.op.Unlock()
	if e.destroying {
		return nil, errdefs.Precondition("sandbox %s is being destroyed", id)
	}
	var rec *store.SandboxRecord
	err = s.st.UpdateSandbox(ctx, id, func(r *store.SandboxRecord) error {
		switch {
		case snap != nil:
			r.Snapshot, r.Lowers, r.Template, r.TemplateVersion = snap.ID, snap.Lowers, snap.Template, snap.TemplateVersion
			r.Env = mergeEnv(snap.Env, r.Spec.Env)
		case toTemplate:
			r.Snapshot, r.Lowers = "", tpl.LowerDirs()
			r.Env = mergeEnv(nil, r.Spec.Env)
		}
		rec = r
		return nil
	})
	if err != nil {
		return nil, err
	}
	if snap != nil {
		// The record now depends on snap; if it was removed meanwhile,
		// DeleteSnapshot ran first and this reset must not use it.
		if _, err := s.st.GetSnapshot(ctx, tenancy.AllTenants(), snap.ID); err != nil {
			return nil, err
		}
	}
	// The old init's exit is expected: its watcher must not tear down.
	e.gen++
	gen := e.gen
	if out, err := s.resetFast(ctx, e, rec, tpl, gen); err != nil {
		return nil, s.failLocked(e, err)
	} else if out != nil {
		if oldSnap != "" && oldSnap != out.Snapshot {
			s.collect(ctx, oldSnap)
		}
		return toAPI(out), nil
	}
	s.standby.drop(ctx, e)
	t0 := time.Now()
	if err := e.drv.Destroy(ctx, e.handle()); err != nil {
		s.log.Warn("reset: stopping the old init", "sandbox", id, "err", err)
	}
	e.guest.CloseIdleConnections()
	t1 := time.Now()
	if err := s.pool.RemoveLayer(ctx, id); err != nil {
		return nil, s.failLocked(e, fmt.Errorf("resetting sandbox %s: %w", id, err))
	}
	t2 := time.Now()
	b, err := s.boot(ctx, rec, tpl, e.drv, false)
	if err != nil {
		return nil, s.failLocked(e, fmt.Errorf("resetting sandbox %s: %w", id, err))
	}
	e.hp.Store(b.h)
	e.paused.Store(false)
	e.act.touch()
	var out *store.SandboxRecord
	err = s.st.UpdateSandbox(ctx, id, func(r *store.SandboxRecord) error {
		if err := s.transition(r, api.StateRunning); err != nil {
			return err
		}
		r.Handle = b.h
		out = r
		return nil
	})
	if err != nil {
		return nil, s.failLocked(e, err)
	}
	s.watch(e, gen)
	s.log.Debug("reset", "sandbox", id, "stop", t1.Sub(t0), "remove_layer", t2.Sub(t1), "boot", time.Since(t2))
	s.standby.prepare(e, rec, tpl, gen)
	if oldSnap != "" && oldSnap != out.Snapshot {
		s.collect(ctx, oldSnap)
	}
	return toAPI(out), nil
}

// failLocked tears down a sandbox whose reset (or resume from disk)
// failed and records why (teardownLocked); e.op is held. It returns cause.
func (s *Service) failLocked(e *entry, cause error) error {
	_ = s.teardownLocked(e, cause.Error())
	return cause
}

// resetFast switches e to its standby when it was booted on what rec and
// tpl name; e.op is held and rec already names the reset's target. It
// returns nil, nil when there is no such standby (the caller takes the
// full path), and an error when the sandbox is left unusable.
func (s *Service) resetFast(ctx context.Context, e *entry, rec *store.SandboxRecord, tpl *storage.Template, gen uint64) (*store.SandboxRecord, error) {
	nx := s.standby.take(e, func() string { return specKey(s.driverSpec(rec, tpl, "", "", "")) }) // standby.go
	if nx == nil {
		return nil, nil
	}
	t0 := time.Now()
	if e.paused.Load() {
		// Thaws the standby too: both live in the sandbox's cgroups.
		if p, ok := driver.As[driver.Pauser](e.drv); ok {
			_ = p.Resume(ctx, e.handle())
		}
	}
	old := e.handle()
	gone, err := s.standby.promote(ctx, e, old, nx)
	if err != nil {
		return nil, nil
	}
	e.hp.Store(nx.h)
	e.paused.Store(false)
	e.act.touch()
	e.guest.CloseIdleConnections()
	ok := false
	defer func() {
		if !ok { // the sandbox fails; the old layer still goes
			s.standby.removeAfter(gone, nx.layer)
		}
	}()
	// The old layer takes the standby's name, to go once the old init
	// (and its overlay) is gone; the standby's becomes the sandbox's.
	if err := s.pool.ExchangeLayers(e.id, nx.layer); err != nil {
		return nil, fmt.Errorf("resetting sandbox %s: %w", e.id, err)
	}
	if hasEgress(rec.Spec.Network) {
		// The veth moves to the new init once the old namespace is gone.
		<-gone
		if err := s.attachNet(ctx, rec, nx.h); err != nil {
			return nil, fmt.Errorf("resetting sandbox %s: connecting the network: %w", e.id, err)
		}
	}
	var out *store.SandboxRecord
	err = s.st.UpdateSandbox(ctx, e.id, func(r *store.SandboxRecord) error {
		if err := s.transition(r, api.StateRunning); err != nil {
			return err
		}
		r.Handle = nx.h
		out = r
		return nil
	})
	if err != nil {
		return nil, err
	}
	ok = true
	s.watch(e, gen)
	s.log.Debug("reset (standby)", "sandbox", e.id, "took", time.Since(t0))
	s.standby.retire(e.id, old, nx, gone)
	s.standby.prepare(e, out, tpl, gen)
	return out, nil
}
