package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// Memory snapshots, on tiers whose driver declares MemorySnapshot (gvisor:
// runsc checkpoint and restore, driver.Checkpointer):
//
//   - pause to disk: the sandbox's processes and memory are checkpointed
//     into <data_dir>/checkpoints/<id>, its init stops (no host memory
//     used) and only its writable layer and the checkpoint stay. It is
//     paused; a restarted daemon (or a rebooted host) finds it paused again,
//     and resume restores it on its layer where it was;
//   - snapshots with memory: the layer is captured while the sandbox is
//     frozen for the checkpoint, so files and memory are of one instant;
//     the checkpoint lives in <data_dir>/checkpoints/snapshots/<snapshot id>
//     and goes with the snapshot. A sandbox created from it restores it;
//   - fork with memory: an internal snapshot with memory, each child
//     restored from it with its own id, hostname, env, limits and empty
//     writable layer over the snapshot (so each child sees exactly the
//     parent's files of that instant and shares nothing writable).
//
// A checkpoint directory is whole once it holds completeMarker; one
// without it is what a crash left and is removed.

const completeMarker = "complete"

// checkpoints is where the service keeps memory snapshots on disk
// (<data_dir>/checkpoints): a collaborator of the service that owns the
// directory layout, what makes a checkpoint whole, taking a snapshot's
// memory, and the sweep of leftovers. It reaches the service only
// through host (checkpointHost) and holds no lock of its own. The
// lifecycle operations that change a live sandbox around a checkpoint
// (pause to disk, resume from disk, re-adoption) stay the service's:
// they are entry operations under entry.op, like Pause and Resume.
type checkpoints struct {
	root string // <data_dir>/checkpoints
	host checkpointHost
	log  *slog.Logger
}

// checkpointHost is what the checkpoints need of the service: whether a
// sandbox is paused to disk, and a snapshot's record. *Service is the one
// the daemon uses. Neither may take entry.op (the checkpoints are called
// with it held).
type checkpointHost interface {
	// pausedToDisk reports whether sandbox id is live and paused to disk.
	pausedToDisk(id string) bool
	// snapshotRecord is snapshot id's record, whoever owns it.
	snapshotRecord(ctx context.Context, id string) (*store.SnapshotRecord, error)
}

var _ checkpointHost = (*Service)(nil)

// diskDir is where sandbox id's checkpoint lies while it is paused to disk.
func (c *checkpoints) diskDir(id string) string {
	return filepath.Join(c.root, id)
}

// snapshotDir is where snapshot snapID's memory lies, if it has any.
func (c *checkpoints) snapshotDir(snapID string) string {
	return filepath.Join(c.root, "snapshots", snapID)
}

// hasMemory reports whether snapshot snapID has a whole memory checkpoint.
func (c *checkpoints) hasMemory(snapID string) bool {
	return isComplete(c.snapshotDir(snapID))
}

func isComplete(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, completeMarker))
	return err == nil
}

// newCheckpointDir makes dir empty and private.
func newCheckpointDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	return os.Mkdir(dir, 0o700)
}

func markComplete(dir string) error {
	return os.WriteFile(filepath.Join(dir, completeMarker), nil, 0o600)
}

// checkpointer returns drv's memory snapshots, or a precondition error
// that names the tier that has them.
func checkpointer(drv driver.Driver, what string) (driver.Checkpointer, error) {
	cp, ok := driver.As[driver.Checkpointer](drv)
	if !ok {
		return nil, errdefs.Precondition("isolation %s cannot %s: that needs memory snapshots, which the gvisor and microvm tiers have (create the sandbox with `--isolation gvisor` or `--isolation microvm`)", drv.Name(), what)
	}
	return cp, nil
}

// restoring is a driver whose Create restores the checkpoint in dir: the
// service's boot path (layer, run dir, spec, network) is the same for a
// restore as for a create.
type restoring struct {
	driver.Driver
	dir string
}

func (r restoring) Create(ctx context.Context, spec *driver.Spec) (*driver.Handle, error) {
	cp, _ := driver.As[driver.Checkpointer](r.Driver)
	return cp.Restore(ctx, spec, r.dir)
}

// Unwrap implements driver.Wrapper: a restore has the abilities of the
// driver it restores with.
func (r restoring) Unwrap() driver.Driver { return r.Driver }

// PauseToDisk checkpoints a tenant's sandbox to disk and stops it.
func (s *Service) PauseToDisk(ctx context.Context, scope tenancy.Scope, id string) (*api.Sandbox, error) {
	e, err := s.lookup(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	if err := driver.Refuses(e.drv, driver.OpPause); err != nil {
		return nil, err
	}
	cp, err := checkpointer(e.drv, "pause to disk")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 120*time.Second)
	defer cancel()
	e.op.Lock()
	defer e.op.Unlock()
	if err := s.pauseToDiskLocked(ctx, e, cp); err != nil {
		return nil, err
	}
	return s.Get(ctx, scope, id)
}

func (s *Service) pauseToDiskLocked(ctx context.Context, e *entry, cp driver.Checkpointer) error {
	if e.destroying {
		return errdefs.Precondition("sandbox %s is being destroyed", e.id)
	}
	if e.onDisk.Load() {
		return nil
	}
	// The agent must answer to close its channel: thaw a sandbox paused
	// in memory first.
	if e.paused.Load() {
		if p, ok := driver.As[driver.Pauser](e.drv); ok {
			if err := p.Resume(ctx, e.handle()); err != nil {
				return fmt.Errorf("thawing sandbox %s before its checkpoint: %w", e.id, err)
			}
		}
		e.paused.Store(false)
	}
	dir := s.ckpt.diskDir(e.id)
	if err := newCheckpointDir(dir); err != nil {
		return fmt.Errorf("checkpoint directory: %w", err)
	}
	h := e.handle()
	// The init's exit is expected from here: its watcher must not tear
	// the sandbox down.
	e.gen++
	t0 := time.Now()
	if err := cp.Checkpoint(ctx, h, dir, driver.CheckpointOptions{}); err != nil {
		e.gen--
		_ = os.RemoveAll(dir)
		return fmt.Errorf("checkpointing sandbox %s: %w", e.id, err)
	}
	took := time.Since(t0)
	if err := markComplete(dir); err != nil {
		return err
	}
	e.guest.CloseIdleConnections()
	if err := e.drv.Destroy(ctx, h); err != nil {
		s.log.Warn("pause to disk: releasing the stopped sandbox", "sandbox", e.id, "err", err)
	}
	_ = os.RemoveAll(s.runDir(e.id))
	e.paused.Store(true)
	e.onDisk.Store(true)
	err := s.st.UpdateSandbox(context.WithoutCancel(ctx), e.id, func(r *store.SandboxRecord) error {
		// The handle stays (stale): Destroy on it finds nothing left.
		if err := s.transition(r, api.StatePaused); err != nil {
			return err
		}
		return nil
	})
	s.log.Info("paused to disk", "sandbox", e.id, "checkpoint", took, "bytes", dirSize(dir))
	return err
}

// resumeFromDisk restores a sandbox paused to disk on its layer.
func (s *Service) resumeFromDisk(ctx context.Context, e *entry) (*api.Sandbox, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 120*time.Second)
	defer cancel()
	e.op.Lock()
	defer e.op.Unlock()
	if e.destroying {
		return nil, errdefs.Precondition("sandbox %s is being destroyed", e.id)
	}
	if !e.onDisk.Load() {
		return s.Get(ctx, tenancy.Only(e.tenant), e.id)
	}
	rec, err := s.st.GetSandbox(ctx, e.id)
	if err != nil {
		return nil, err
	}
	tpl, err := s.pool.TemplateVersion(rec.Template, rec.TemplateVersion)
	if err != nil {
		return nil, fmt.Errorf("template of sandbox %s: %w", e.id, err)
	}
	dir := s.ckpt.diskDir(e.id)
	t0 := time.Now()
	b, err := s.boot(ctx, rec, tpl, restoring{e.drv, dir}, true)
	if err != nil {
		return nil, fmt.Errorf("restoring sandbox %s from its checkpoint (it stays paused; retry, or destroy it): %w", e.id, err)
	}
	took := time.Since(t0)
	e.gen++
	gen := e.gen
	e.hp.Store(b.h)
	e.onDisk.Store(false)
	e.paused.Store(false)
	e.act.touch()
	var out *store.SandboxRecord
	err = s.st.UpdateSandbox(ctx, e.id, func(r *store.SandboxRecord) error {
		if err := s.transition(r, api.StateRunning); err != nil {
			return err
		}
		r.Handle = b.h
		s.renewTTL(r)
		out = r
		return nil
	})
	if err != nil {
		return nil, s.failLocked(e, err)
	}
	_ = os.RemoveAll(dir)
	s.watch(e, gen)
	s.log.Info("resumed from disk", "sandbox", e.id, "restore", took)
	return toAPI(out), nil
}

// adoptOnDisk re-registers, after a daemon restart, a sandbox paused to
// disk; it reports whether rec is one. That is a paused sandbox with a
// whole checkpoint, or a running one with a whole checkpoint and no init
// (a crash between the checkpoint and the record's update). Any other is
// left to the usual recovery.
func (s *Service) adoptOnDisk(ctx context.Context, rec *store.SandboxRecord, drv driver.Driver) bool {
	if drv == nil || !isComplete(s.ckpt.diskDir(rec.ID)) {
		return false
	}
	switch rec.State {
	case api.StatePaused:
	case api.StateRunning:
		if rec.Handle != nil && drv.Adopt(ctx, rec.Handle) == nil {
			return false // it runs: the checkpoint is a leftover of its resume
		}
		err := s.st.UpdateSandbox(ctx, rec.ID, func(r *store.SandboxRecord) error {
			if err := s.transition(r, api.StatePaused); err != nil {
				return err
			}
			return nil
		})
		if err != nil {
			return false
		}
		s.log.Info("sandbox was being paused to disk when the daemon stopped; its checkpoint is whole", "sandbox", rec.ID)
	default:
		return false
	}
	e := s.newEntry(rec.ID, rec.Tenant, drv, rec.Handle)
	e.autoResume = rec.Spec.AutoResume
	e.idle = idleTimeout(&rec.Spec)
	e.paused.Store(true)
	e.onDisk.Store(true)
	s.mu.Lock()
	s.live[rec.ID] = e
	s.mu.Unlock()
	s.log.Info("re-adopted sandbox paused to disk", "sandbox", rec.ID)
	return true
}

// withDisk marks sb paused to disk when it is.
func (s *Service) withDisk(sb *api.Sandbox) *api.Sandbox {
	if sb.State == api.StatePaused {
		sb.PausedToDisk = s.pausedToDisk(sb.ID)
	}
	return sb
}

// pauseOnTimeout pauses a sandbox whose TTL ran out with on_timeout pause:
// to disk where its tier checkpoints memory (no host memory held while it
// waits), in memory elsewhere.
func (s *Service) pauseOnTimeout(ctx context.Context, id string) (*api.Sandbox, error) {
	s.mu.Lock()
	e := s.live[id]
	s.mu.Unlock()
	if e != nil {
		if _, err := checkpointer(e.drv, ""); err == nil {
			sb, err := s.PauseToDisk(ctx, tenancy.AllTenants(), id)
			if err == nil {
				return sb, nil
			}
			s.log.Warn("pause to disk failed; pausing in memory", "sandbox", id, "err", err)
		}
	}
	return s.Pause(ctx, tenancy.AllTenants(), id)
}

// SnapshotWithMemory is Snapshot with the sandbox's processes and memory.
func (s *Service) SnapshotWithMemory(ctx context.Context, scope tenancy.Scope, id, name string) (*api.Snapshot, error) {
	if name != "" && !snapNameRE.MatchString(name) {
		return nil, errdefs.Invalid("snapshot name %q is not valid: use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	e, err := s.lookup(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	if err := driver.Refuses(e.drv, driver.OpSnapshot); err != nil {
		return nil, err
	}
	rec, err := s.snapshotWith(ctx, e, name, false, true)
	if err != nil {
		return nil, err
	}
	out := s.snapshotOut(rec)
	return &out, nil
}

// capture checkpoints sandbox id's init h (left running) into snapshot
// snapID's memory directory, calling frozen while it is frozen for the
// checkpoint and then done (checkpoint taken or not). On error nothing of
// the checkpoint is left.
func (c *checkpoints) capture(ctx context.Context, cp driver.Checkpointer, id string, h *driver.Handle, snapID string, frozen func() error, done func()) error {
	dir := c.snapshotDir(snapID)
	if err := newCheckpointDir(dir); err != nil {
		return fmt.Errorf("checkpoint directory: %w", err)
	}
	t0 := time.Now()
	err := cp.Checkpoint(ctx, h, dir, driver.CheckpointOptions{LeaveRunning: true, Frozen: frozen})
	done()
	if err == nil {
		err = markComplete(dir)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("checkpointing sandbox %s: %w", id, err)
	}
	c.log.Info("snapshot with memory", "sandbox", id, "snapshot", snapID, "checkpoint", time.Since(t0), "bytes", dirSize(dir))
	return nil
}

// memoryOf returns the checkpoint of snapshot snapID when it has one and
// drv can restore it, else "".
func (c *checkpoints) memoryOf(snapID string, drv driver.Driver) string {
	dir := c.snapshotDir(snapID)
	if !isComplete(dir) {
		return ""
	}
	if _, err := checkpointer(drv, ""); err != nil {
		return ""
	}
	return dir
}

// snapshotOut is the API view of a snapshot record.
func (s *Service) snapshotOut(r *store.SnapshotRecord) api.Snapshot {
	out := snapshotAPI(r)
	out.Memory = s.ckpt.hasMemory(r.ID)
	return out
}

// ForkWithMemory is Fork with each child going on running the parent's
// processes.
func (s *Service) ForkWithMemory(ctx context.Context, scope tenancy.Scope, id string, count int) ([]api.Sandbox, error) {
	e, err := s.lookup(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	if err := driver.Refuses(e.drv, driver.OpFork); err != nil {
		return nil, err
	}
	if !driver.Has[driver.Checkpointer](e.drv) {
		return nil, errdefs.Precondition("isolation %s cannot fork with memory: live fork needs the gvisor or microvm tier; a fork without memory gives children the parent's files", e.drv.Name())
	}
	return s.fork(ctx, scope, id, count, true)
}

// sweep removes checkpoint directories that belong to no sandbox
// paused to disk and no snapshot, and incomplete ones.
func (c *checkpoints) sweep(ctx context.Context) {
	ents, err := os.ReadDir(c.root)
	if err != nil {
		return
	}
	for _, de := range ents {
		if de.Name() == "snapshots" {
			continue
		}
		dir := c.diskDir(de.Name())
		if c.host.pausedToDisk(de.Name()) && isComplete(dir) {
			continue
		}
		_ = os.RemoveAll(dir)
		c.log.Info("cleaned up leftover", "what", "checkpoint "+de.Name())
	}
	snaps, err := os.ReadDir(filepath.Join(c.root, "snapshots"))
	if err != nil {
		return
	}
	for _, de := range snaps {
		dir := c.snapshotDir(de.Name())
		if rec, err := c.host.snapshotRecord(ctx, de.Name()); err == nil && rec.State == store.SnapshotReady && isComplete(dir) {
			continue
		} else if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		_ = os.RemoveAll(dir)
		c.log.Info("cleaned up leftover", "what", "snapshot checkpoint "+de.Name())
	}
}

// pausedToDisk implements checkpointHost.
func (s *Service) pausedToDisk(id string) bool {
	s.mu.Lock()
	e := s.live[id]
	s.mu.Unlock()
	return e != nil && e.onDisk.Load()
}

// snapshotRecord implements checkpointHost.
func (s *Service) snapshotRecord(ctx context.Context, id string) (*store.SnapshotRecord, error) {
	return s.st.GetSnapshot(ctx, tenancy.AllTenants(), id)
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
