package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// Start re-adopts the sandboxes an earlier daemon left running, cleans up
// whatever belongs to no sandbox, and starts the TTL reaper. Every decision
// is logged.
func (s *Service) Start(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(s.cfg.RunDir, "sandboxes"), 0o711); err != nil {
		return err
	}
	// Snapshots a crash left half-taken go first: their record is the
	// intent, their subvolume (if any) is incomplete.
	if snaps, err := s.st.ListSnapshots(ctx, tenancy.AllTenants(), store.SnapshotCreating); err == nil {
		for _, sn := range snaps {
			_ = s.pool.RemoveSnapshot(ctx, sn.ID)
			_ = s.st.DeleteSnapshot(ctx, sn.ID)
			s.log.Info("removed a snapshot left half-taken", "snapshot", sn.ID, "sandbox", sn.SandboxID)
		}
	}
	recs, err := s.st.ListSandboxes(ctx, store.Filter{Scope: tenancy.AllTenants(), States: []string{
		api.StateCreating, api.StateRunning, api.StatePaused, api.StateStopped, api.StateDestroying,
	}})
	if err != nil {
		return err
	}
	// keep: sandboxes whose init runs; keepLayer adds the stopped ones.
	keep, keepLayer := map[string]bool{}, map[string]bool{}
	for _, rec := range recs {
		drv := s.drivers[rec.Isolation]
		if rec.State == api.StateStopped {
			keepLayer[rec.ID] = true
			continue
		}
		if s.adoptOnDisk(ctx, rec, drv) { // paused to disk (memsnap.go)
			keepLayer[rec.ID] = true
			continue
		}
		if (rec.State == api.StateRunning || rec.State == api.StatePaused) && drv != nil && rec.Handle != nil {
			if e, err := s.adopt(ctx, rec, drv); err == nil {
				s.mu.Lock()
				s.live[rec.ID] = e
				s.mu.Unlock()
				s.watch(e, 0)
				keep[rec.ID], keepLayer[rec.ID] = true, true
				s.log.Info("re-adopted sandbox", "sandbox", rec.ID, "state", rec.State, "pid", rec.Handle.Pid)
				continue
			} else if persistent(rec) {
				// Its files are kept; resume starts it cold.
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_ = drv.Destroy(rctx, rec.Handle)
				cancel()
				_ = os.RemoveAll(s.runDir(rec.ID))
				_ = s.st.UpdateSandbox(ctx, rec.ID, func(r *store.SandboxRecord) error {
					if err := s.transition(r, api.StateStopped); err != nil {
						return err
					}
					r.Handle = nil
					return nil
				})
				keepLayer[rec.ID] = true
				s.log.Info("sandbox's init is gone; kept stopped with its files", "sandbox", rec.ID, "reason", err)
				continue
			} else {
				s.log.Warn("sandbox did not survive; cleaning up", "sandbox", rec.ID, "reason", err)
			}
		} else {
			s.log.Warn("sandbox was mid-operation at shutdown; cleaning up", "sandbox", rec.ID, "state", rec.State)
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_ = s.release(rctx, rec.ID, drv, rec.Handle)
		cancel()
		_ = s.st.UpdateSandbox(ctx, rec.ID, func(r *store.SandboxRecord) error {
			if r.State == api.StateDestroying {
				if err := s.transition(r, api.StateDestroyed); err != nil {
					return err
				}
				return nil
			}
			if err := s.transition(r, api.StateFailed); err != nil {
				return err
			}
			r.Error = "lost when the daemon restarted: its init was gone"
			return nil
		})
	}
	// The network table is rebuilt for the sandboxes kept; veths of
	// others go.
	if s.net != nil {
		if err := s.net.Start(netKnown(recs, keepLayer)); err != nil {
			s.log.Error("networking did not start; egress other than none is refused", "err", err)
			s.net = nil
		} else {
			s.restoreNetLimits(recs, keepLayer) // netlimits.go
		}
	}
	// Leftovers that belong to no sandbox we keep.
	for name, drv := range s.drivers {
		removed, err := drv.Cleanup(ctx, keep)
		for _, r := range removed {
			s.log.Info("cleaned up leftover", "driver", name, "what", r)
		}
		if err != nil {
			s.log.Warn("cleanup incomplete", "driver", name, "err", err)
		}
	}
	if layers, err := s.pool.ListLayers(); err == nil {
		for _, id := range layers {
			if !keepLayer[id] {
				if err := s.pool.RemoveLayer(ctx, id); err != nil {
					s.log.Warn("removing leftover layer", "sandbox", id, "err", err)
				} else {
					s.log.Info("cleaned up leftover", "what", "layer "+id)
				}
			}
		}
	}
	if ents, err := os.ReadDir(filepath.Join(s.cfg.RunDir, "sandboxes")); err == nil {
		for _, de := range ents {
			if !keep[de.Name()] {
				_ = os.RemoveAll(filepath.Join(s.cfg.RunDir, "sandboxes", de.Name()))
				s.log.Info("cleaned up leftover", "what", "run dir "+de.Name())
			}
		}
	}
	s.sweepSnapshots(ctx)
	s.ckpt.sweep(ctx)
	s.wg.Add(1)
	go s.reaper()
	s.warm.start(s.cfg.WarmPools()) // warmpool.go
	return nil
}

// persistent reports whether a sandbox asked to be kept (on_timeout pause):
// it survives the loss of its init as a stopped sandbox.
func persistent(rec *store.SandboxRecord) bool {
	return rec.Spec.OnTimeout == api.OnTimeoutPause || rec.State == api.StatePaused
}

// adopt re-attaches a sandbox an earlier daemon left. A running sandbox
// is thawed first: a crash in the middle of a snapshot leaves it frozen.
func (s *Service) adopt(ctx context.Context, rec *store.SandboxRecord, drv driver.Driver) (*entry, error) {
	p, canPause := driver.As[driver.Pauser](drv)
	if rec.State == api.StateRunning && canPause {
		_ = p.Resume(ctx, rec.Handle)
	}
	if err := drv.Adopt(ctx, rec.Handle); err != nil {
		return nil, err
	}
	e := s.entryOf(rec, drv, rec.Handle)
	s.checkAdoptedGuest(ctx, e, rec.State == api.StatePaused) // guestversion.go
	if rec.State == api.StatePaused {
		e.paused.Store(true)
		if canPause {
			// Make sure it is frozen, whatever happened meanwhile.
			_ = p.Pause(ctx, rec.Handle)
		}
	}
	return e, nil
}

// sweepSnapshots removes snapshot subvolumes with no record (a crash
// between removing the record and the subvolume) and internal snapshots
// nothing depends on any more.
func (s *Service) sweepSnapshots(ctx context.Context) {
	recs, err := s.st.ListSnapshots(ctx, tenancy.AllTenants())
	if err != nil {
		s.log.Warn("listing snapshots", "err", err)
		return
	}
	known := map[string]bool{}
	for _, r := range recs {
		known[r.ID] = true
	}
	if ids, err := s.pool.ListSnapshots(); err == nil {
		for _, id := range ids {
			if !known[id] {
				if err := s.pool.RemoveSnapshot(ctx, id); err == nil {
					s.log.Info("cleaned up leftover", "what", "snapshot "+id)
				}
			}
		}
	}
	for _, r := range recs {
		if r.Internal {
			s.collect(ctx, r.ID)
		}
	}
}

// reaper destroys sandboxes past their TTL, until Close.
func (s *Service) reaper() {
	defer s.wg.Done()
	every := s.cfg.ReapInterval
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.reapOnce()
		s.reapIdle()
	}
}

func (s *Service) reapOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids, err := s.st.Expired(ctx, time.Now())
	if err != nil {
		s.log.Warn("reaper: listing expired sandboxes", "err", err)
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rec, err := s.st.GetSandbox(ctx, id)
			if err == nil && rec.Spec.OnTimeout == api.OnTimeoutPause {
				if rec.State == api.StatePaused {
					return
				}
				s.log.Info("TTL expired; pausing (on_timeout: pause)", "sandbox", id)
				s.emit(events.Expired, id, rec.Tenant, "ttl")
				if _, err := s.pauseOnTimeout(ctx, id); err != nil {
					s.log.Warn("reaper: pause failed", "sandbox", id, "err", err)
				}
				return
			}
			s.log.Info("TTL expired; destroying", "sandbox", id)
			if err == nil {
				s.emit(events.Expired, id, rec.Tenant, "ttl")
			} else {
				s.Emit(events.Expired, id, "ttl")
			}
			if err := s.Destroy(ctx, tenancy.AllTenants(), id); err != nil {
				s.log.Warn("reaper: destroy failed", "sandbox", id, "err", err)
			}
		}()
	}
	wg.Wait()
}

// Close stops the reaper and watchers. Sandboxes keep running: a restarted
// daemon re-adopts them.
func (s *Service) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
	s.warm.close() // warm pool sandboxes are destroyed, never re-adopted
	s.mu.Lock()
	for _, e := range s.live {
		e.guest.CloseIdleConnections()
	}
	s.mu.Unlock()
}
