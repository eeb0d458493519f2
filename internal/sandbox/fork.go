package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// MaxForkCount bounds one fork call.
const MaxForkCount = 100

// forkParallelism is how many children start at once.
const forkParallelism = 4

// Fork creates count children from a tenant's running sandbox's current
// files: an internal snapshot of the parent (frozen for the capture, then
// thawed: the parent keeps running), then count sandboxes stacked on it,
// each with its own empty writable layer, so they are independent from
// their first instruction and the cost does not grow with the template.
//
// All or nothing: the children are recorded as creating (the intent) and
// flipped to running in one transaction once every one answers; on an
// error every child is removed, and after a crash recovery removes
// children still creating.
func (s *Service) Fork(ctx context.Context, scope tenancy.Scope, id string, count int) ([]api.Sandbox, error) {
	return s.fork(ctx, scope, id, count, false)
}

// fork is Fork; with memory each child is restored from a checkpoint of
// the parent taken with the snapshot (memsnap.go).
func (s *Service) fork(ctx context.Context, scope tenancy.Scope, id string, count int, memory bool) ([]api.Sandbox, error) {
	if count == 0 {
		count = 1
	}
	if count < 1 || count > MaxForkCount {
		return nil, errdefs.Invalid("count must be between 1 and %d, got %d", MaxForkCount, count)
	}
	e, err := s.lookup(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	if err := driver.Refuses(e.drv, driver.OpFork); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 120*time.Second)
	defer cancel()
	parent, err := s.st.GetSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	release, err := s.admit(ctx, parent.Tenant, parent.Resources, count, true)
	if err != nil {
		return nil, err
	}
	defer release()
	drv := e.drv
	snap, err := s.snapshotWith(ctx, e, "", true, memory)
	if err != nil {
		return nil, err
	}
	// The template and env are the snapshot's, read with the layer it
	// captured: a reset onto another snapshot may have changed the
	// parent's since parent was read.
	tpl, err := s.pool.TemplateVersion(snap.Template, snap.TemplateVersion)
	if err != nil {
		s.collect(ctx, snap.ID)
		return nil, fmt.Errorf("template of sandbox %s: %w", id, err)
	}
	now := time.Now().UTC()
	recs := make([]*store.SandboxRecord, count)
	ids := make([]string, count)
	for i := range recs {
		spec := parent.Spec
		spec.Network = forkNetwork(spec.Network)
		spec.Template = ""
		spec.Snapshot = snap.ID
		r := &store.SandboxRecord{
			ID:              s.newID(),
			Tenant:          parent.Tenant,
			State:           api.StateCreating,
			Template:        snap.Template,
			TemplateVersion: snap.TemplateVersion,
			Isolation:       parent.Isolation,
			Spec:            spec,
			Resources:       parent.Resources,
			Env:             snap.Env,
			Metadata:        parent.Metadata,
			CreatedAt:       now,
			Parent:          id,
			Snapshot:        snap.ID,
			Lowers:          snap.Lowers,
		}
		if res, err := resolve(s.cfg, &spec); err == nil && res.TTL > 0 {
			exp := now.Add(res.TTL)
			r.ExpiresAt = &exp
		}
		recs[i], ids[i] = r, r.ID
	}
	entries := make([]*entry, count)
	boots := make([]*booted, count) // each child's, until all are live
	ok := false
	defer func() {
		if ok {
			return
		}
		for i, r := range recs {
			if boots[i] != nil {
				_ = boots[i].Release(ctx)
			}
			_ = s.st.UpdateSandbox(ctx, r.ID, func(rec *store.SandboxRecord) error {
				if err := s.transition(rec, api.StateFailed); err != nil {
					return err
				}
				rec.Error = "fork failed"
				return nil
			})
		}
		s.collect(ctx, snap.ID)
	}()
	for _, r := range recs {
		if err := s.st.CreateSandboxFromSnapshot(ctx, r); err != nil {
			return nil, err
		}
	}
	release()
	var (
		wg   sync.WaitGroup
		sem  = make(chan struct{}, forkParallelism)
		errs = make([]error, count)
	)
	for i, r := range recs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			bootDrv := drv
			if memory {
				bootDrv = restoring{drv, s.ckpt.snapshotDir(snap.ID)}
			}
			entries[i], boots[i], errs[i] = s.start(ctx, r, tpl, bootDrv, false)
			if entries[i] != nil {
				entries[i].drv = drv
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("forking sandbox %s: %w", id, err)
	}
	out := make([]api.Sandbox, count)
	err = s.st.UpdateSandboxes(ctx, ids, func(r *store.SandboxRecord) error {
		for i := range ids {
			if ids[i] == r.ID {
				if err := s.transition(r, api.StateRunning); err != nil {
					return err
				}
				r.Handle = entries[i].handle()
				out[i] = *toAPI(r)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	ok = true
	s.mu.Lock()
	for _, ent := range entries {
		s.live[ent.id] = ent
	}
	s.mu.Unlock()
	for _, ent := range entries {
		s.watch(ent, 0)
	}
	s.log.Debug("forked", "sandbox", id, "children", count, "snapshot", snap.ID)
	return out, nil
}
