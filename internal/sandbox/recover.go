package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/store"
)

// Start re-adopts the sandboxes an earlier daemon left running, cleans up
// whatever belongs to no sandbox, and starts the TTL reaper. Every decision
// is logged.
func (s *Service) Start(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(s.cfg.RunDir, "sandboxes"), 0o711); err != nil {
		return err
	}
	recs, err := s.st.ListSandboxes(ctx, store.Filter{States: []string{
		api.StateCreating, api.StateRunning, api.StatePaused, api.StateDestroying,
	}})
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, rec := range recs {
		drv := s.drivers[rec.Isolation]
		if (rec.State == api.StateRunning || rec.State == api.StatePaused) && drv != nil && rec.Handle != nil {
			if err := drv.Adopt(ctx, rec.Handle); err == nil {
				e := s.newEntry(rec.ID, rec.Tenant, drv, rec.Handle)
				s.mu.Lock()
				s.live[rec.ID] = e
				s.mu.Unlock()
				s.watch(e)
				keep[rec.ID] = true
				s.log.Info("re-adopted sandbox", "sandbox", rec.ID, "state", rec.State, "pid", rec.Handle.Pid)
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
				r.State = api.StateDestroyed
				return nil
			}
			r.State = api.StateFailed
			r.Error = "lost when the daemon restarted: its init was gone"
			return nil
		})
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
			if !keep[id] {
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
	s.wg.Add(1)
	go s.reaper()
	return nil
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
			s.log.Info("TTL expired; destroying", "sandbox", id)
			if err := s.Destroy(ctx, "", id); err != nil {
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
	s.mu.Lock()
	for _, e := range s.live {
		e.guest.CloseIdleConnections()
	}
	s.mu.Unlock()
}
