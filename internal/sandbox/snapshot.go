package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// Snapshots. Taking one: record the intent (state creating), freeze the
// sandbox, snapshot its writable layer read-only (btrfs shares every
// extent, so the cost is one transaction commit), thaw, mark it ready.
// A sandbox made from a snapshot stacks a fresh writable layer on the
// snapshot's upper dir and the source's lowers: a chain, at most
// maxLowers deep. Recovery removes snapshots a crash left creating.

// maxLowers bounds a snapshot chain (fork of a fork of ...): the overlay's
// mount options must fit in a page.
const maxLowers = 40

var snapNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

func snapshotAPI(r *store.SnapshotRecord) api.Snapshot {
	node, _ := api.NodeOfID(r.ID) // the id carries its node (docs/cluster.md)
	return api.Snapshot{
		ID:              r.ID,
		Node:            node,
		Name:            r.Name,
		SandboxID:       r.SandboxID,
		Template:        r.Template,
		TemplateVersion: r.TemplateVersion,
		Parent:          r.Parent,
		SizeBytes:       r.SizeBytes,
		CreatedAt:       r.CreatedAt,
		Internal:        r.Internal,
	}
}

// Snapshot captures a tenant's running or paused sandbox's files as a
// snapshot named name ("" for none).
func (s *Service) Snapshot(ctx context.Context, scope tenancy.Scope, id, name string) (*api.Snapshot, error) {
	if name != "" && !snapNameRE.MatchString(name) {
		return nil, errdefs.Invalid("snapshot name %q is not valid: use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	e, err := s.lookup(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	rec, err := s.snapshot(ctx, e, name, false)
	if err != nil {
		return nil, err
	}
	s.emit(events.Snapshotted, id, e.tenant, rec.ID)
	out := s.snapshotOut(rec)
	return &out, nil
}

// snapshot takes a snapshot of e; on error nothing of it is left.
func (s *Service) snapshot(ctx context.Context, e *entry, name string, internal bool) (*store.SnapshotRecord, error) {
	return s.snapshotWith(ctx, e, name, internal, false)
}

// snapshotWith is snapshot, with e's processes and memory too when memory
// is set (memsnap.go).
func (s *Service) snapshotWith(ctx context.Context, e *entry, name string, internal, memory bool) (*store.SnapshotRecord, error) {
	if err := driver.Refuses(e.drv, driver.OpSnapshot); err != nil {
		return nil, err
	}
	if !memory {
		if err := driver.Refuses(e.drv, driver.OpFileSnapshot); err != nil {
			return nil, err
		}
	}
	p, err := pauser(e)
	if err != nil {
		return nil, errdefs.Precondition("isolation %s cannot freeze a sandbox for a consistent snapshot", e.drv.Name())
	}
	if memory {
		if _, err := checkpointer(e.drv, "snapshot with memory"); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	e.op.Lock()
	rec, err := s.captureLocked(ctx, e, p, name, internal, memory)
	e.op.Unlock()
	if err != nil {
		return nil, err
	}
	if err := s.st.FinishSnapshot(ctx, rec.ID, rec.SizeBytes); err != nil {
		_ = os.RemoveAll(s.ckpt.snapshotDir(rec.ID))
		_ = s.pool.RemoveSnapshot(ctx, rec.ID)
		_ = s.st.DeleteSnapshot(ctx, rec.ID)
		return nil, err
	}
	rec.State = store.SnapshotReady
	s.log.Debug("snapshot taken", "sandbox", e.id, "snapshot", rec.ID, "name", name, "size", rec.SizeBytes)
	return rec, nil
}

// captureLocked records the intent of a snapshot of e and captures e's
// layer, frozen; e.op is held. The sandbox's record is read here, under
// e.op, because a reset (which holds e.op) replaces both the layer and the
// lowers it stacks on: read before the lock, a snapshot could record one
// lineage's lowers with another's layer, and depend on a parent snapshot
// that is no longer protected from removal. On error nothing is left.
func (s *Service) captureLocked(ctx context.Context, e *entry, p driver.Pauser, name string, internal, memory bool) (_ *store.SnapshotRecord, err error) {
	if e.destroying {
		return nil, errdefs.Precondition("sandbox %s is being destroyed", e.id)
	}
	src, err := s.st.GetSandbox(ctx, e.id)
	if err != nil {
		return nil, err
	}
	if len(src.Lowers) == 0 {
		return nil, errdefs.Precondition("sandbox %s has no recorded layers (made by an older agentbox); it cannot be snapshotted", e.id)
	}
	if len(src.Lowers)+1 > maxLowers {
		return nil, errdefs.Precondition("sandbox %s already stacks on %d layers (forks of forks); the most is %d: snapshot a sandbox nearer its template", e.id, len(src.Lowers), maxLowers)
	}
	snapID := s.newID()
	rec := &store.SnapshotRecord{
		ID:              snapID,
		Name:            name,
		Tenant:          e.tenant,
		State:           store.SnapshotCreating,
		SandboxID:       e.id,
		Template:        src.Template,
		TemplateVersion: src.TemplateVersion,
		Isolation:       src.Isolation,
		Parent:          src.Snapshot,
		Lowers:          append([]string{s.pool.SnapshotUpper(snapID)}, src.Lowers...),
		Env:             src.Env,
		Internal:        internal,
	}
	// The intent comes first: recovery removes a snapshot left creating.
	if err := s.st.CreateSnapshot(ctx, rec); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = s.pool.RemoveSnapshot(ctx, snapID)
			_ = s.st.DeleteSnapshot(ctx, snapID)
		}
	}()
	if memory {
		// Frozen for the checkpoint, the layer is captured at the
		// instant the memory is saved.
		cp, err := checkpointer(e.drv, "snapshot with memory")
		if err != nil {
			return nil, err
		}
		if e.paused.Load() {
			return nil, errdefs.Precondition("sandbox %s is paused: resume it before a snapshot with memory", e.id)
		}
		var size int64
		err = s.ckpt.capture(ctx, cp, e.id, e.handle(), snapID, func() (err error) {
			size, err = s.pool.SnapshotLayer(ctx, e.id, snapID)
			return err
		}, e.guest.CloseIdleConnections)
		if err != nil {
			return nil, err
		}
		rec.SizeBytes = size
		return rec, nil
	}
	wasPaused := e.paused.Load()
	if !wasPaused {
		if err := p.Pause(ctx, e.handle()); err != nil {
			return nil, fmt.Errorf("freezing sandbox %s for a snapshot: %w", e.id, err)
		}
	}
	size, serr := s.pool.SnapshotLayer(ctx, e.id, snapID)
	if !wasPaused {
		if terr := p.Resume(ctx, e.handle()); terr != nil {
			s.log.Warn("thawing sandbox after snapshot", "sandbox", e.id, "err", terr)
		}
	}
	if serr != nil {
		return nil, fmt.Errorf("snapshotting sandbox %s: %w", e.id, serr)
	}
	rec.SizeBytes = size
	return rec, nil
}

// GetSnapshot returns a tenant's snapshot by id or name.
func (s *Service) GetSnapshot(ctx context.Context, scope tenancy.Scope, ref string) (*api.Snapshot, error) {
	rec, err := s.st.GetSnapshot(ctx, scope, ref)
	if err != nil {
		return nil, err
	}
	if rec.State != store.SnapshotReady {
		return nil, errdefs.NotFound("snapshot %q is still being taken", ref)
	}
	out := s.snapshotOut(rec)
	return &out, nil
}

// ListSnapshots returns the snapshots in scope.
func (s *Service) ListSnapshots(ctx context.Context, scope tenancy.Scope) ([]api.Snapshot, error) {
	recs, err := s.st.ListSnapshots(ctx, scope, store.SnapshotReady)
	if err != nil {
		return nil, err
	}
	out := make([]api.Snapshot, 0, len(recs))
	for _, r := range recs {
		out = append(out, s.snapshotOut(r))
	}
	return out, nil
}

// DeleteSnapshot removes a tenant's snapshot; it is refused while a
// sandbox or another snapshot stacks on it.
func (s *Service) DeleteSnapshot(ctx context.Context, scope tenancy.Scope, ref string) error {
	rec, err := s.st.GetSnapshot(ctx, scope, ref)
	if err != nil {
		return err
	}
	if rec.State != store.SnapshotReady {
		return errdefs.Precondition("snapshot %q is still being taken; retry in a moment", ref)
	}
	return s.removeSnapshot(context.WithoutCancel(ctx), rec)
}

// ReleaseSnapshot removes a tenant's snapshot when nothing stacks on it,
// and otherwise makes it internal: removed with the last sandbox or
// snapshot that stacks on it (collect), as a fork's own snapshot is. It
// returns the snapshot when it stays, nil when it is gone. A fleet
// gateway releases the snapshots a spread fork makes and copies
// (docs/cluster.md).
func (s *Service) ReleaseSnapshot(ctx context.Context, scope tenancy.Scope, ref string) (*api.Snapshot, error) {
	rec, err := s.st.GetSnapshot(ctx, scope, ref)
	if err != nil {
		return nil, err
	}
	if rec.State != store.SnapshotReady {
		return nil, errdefs.Precondition("snapshot %q is still being taken; retry in a moment", ref)
	}
	ctx = context.WithoutCancel(ctx)
	// Internal first, then the attempt: a dependent that ends meanwhile
	// either is gone before the attempt (which then removes it) or ends
	// after it and finds the snapshot internal (its collect removes it).
	if !rec.Internal {
		if err := s.st.MarkSnapshotInternal(ctx, rec.ID); err != nil {
			return nil, err
		}
		rec.Internal = true
	}
	switch err := s.removeSnapshot(ctx, rec); {
	case err == nil, errors.Is(err, errdefs.ErrNotFound):
		return nil, nil
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		out := s.snapshotOut(rec)
		return &out, nil
	default:
		return nil, err
	}
}

// removeSnapshot deletes the record (checking dependents in the same
// transaction), then the subvolume; a crash in between leaves a subvolume
// with no record, which recovery removes.
func (s *Service) removeSnapshot(ctx context.Context, rec *store.SnapshotRecord) error {
	if err := s.st.DeleteSnapshot(ctx, rec.ID); err != nil {
		return err
	}
	if err := s.pool.RemoveSnapshot(ctx, rec.ID); err != nil {
		s.log.Warn("removing snapshot's layer; recovery will retry", "snapshot", rec.ID, "err", err)
	}
	_ = os.RemoveAll(s.ckpt.snapshotDir(rec.ID))
	if rec.Parent != "" {
		s.collect(ctx, rec.Parent)
	}
	return nil
}

// collectFor removes the internal snapshot sandbox id started from, once
// nothing depends on it any more.
func (s *Service) collectFor(ctx context.Context, id string) {
	rec, err := s.st.GetSandbox(ctx, id)
	if err != nil || rec.Snapshot == "" {
		return
	}
	s.collect(ctx, rec.Snapshot)
}

// collect removes internal snapshot snapID (and, in turn, its internal
// parents) if nothing depends on it.
func (s *Service) collect(ctx context.Context, snapID string) {
	snap, err := s.st.GetSnapshot(ctx, tenancy.AllTenants(), snapID)
	if err != nil || !snap.Internal || snap.State != store.SnapshotReady {
		return
	}
	if err := s.removeSnapshot(ctx, snap); err != nil && !errors.Is(err, errdefs.ErrFailedPrecondition) && !errors.Is(err, errdefs.ErrNotFound) {
		s.log.Warn("removing internal snapshot", "snapshot", snapID, "err", err)
	}
}
