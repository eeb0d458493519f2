package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/store"
)

// Fast reset. After a sandbox's first reset, the service boots its next
// init ahead of time (a standby: same cgroups, fresh namespaces, its own
// empty writable layer, reachable by nobody), on drivers that implement
// driver.Standby. The next reset to the same place (the same lowers and
// environment) kills the running init, makes the standby the sandbox's
// init and its layer the sandbox's layer (one atomic rename), and returns;
// the old init's exit and the removal of its layer happen in the
// background, and then the standby after that one is booted. A reset that
// finds no standby ready, or one booted for another place, takes the full
// path (stop, new layer, start). A standby lives in memory only: a daemon
// restart kills it (driver Adopt) and removes its layer as a leftover.

// standby is a sandbox's next init.
type standby struct {
	// booted is the standby init (h), its layer (named for it, not the
	// sandbox) and run dir; its Release discards the init.
	*booted
	key string // specKey of what it was booted on
}

// specKey identifies what an init is booted on, apart from its layer.
func specKey(sp *driver.Spec) string {
	return strings.Join(sp.Layers, ":") + "\n" + strings.Join(sp.Env, "\x00") + "\n" + sp.User + "\n" + sp.Workdir
}

// dropStandby discards e's standby, if any, and waits for one still being
// spawned (so that the sandbox's cgroups can go); e.op is held.
func (s *Service) dropStandby(ctx context.Context, e *entry) {
	waitSpawn(ctx, e)
	nx := e.next
	if nx == nil {
		return
	}
	e.next = nil
	s.discard(ctx, nx)
}

func (s *Service) discard(ctx context.Context, nx *standby) {
	if err := nx.Release(ctx); err != nil {
		s.log.Warn("discarding a standby init", "sandbox", nx.id, "err", err)
	}
}

// prepareStandby boots, in the background, the init that e's next reset
// to the place rec now names switches to; gen is e's generation now. A
// reset meanwhile waits for it (waitStandby).
func (s *Service) prepareStandby(e *entry, rec *store.SandboxRecord, tpl *storage.Template, gen uint64) {
	sb, ok := driver.As[driver.Standby](e.drv)
	if !ok {
		return
	}
	recCopy := *rec
	done := make(chan struct{})
	e.preparing.Store(&done)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		stale := func() bool { return e.destroying || e.gen != gen || e.next != nil }
		// Registered under e.op: a destroy after this waits for the spawn
		// (waitSpawn), one before it makes this stale.
		spawned := make(chan struct{})
		e.op.Lock()
		skip := stale()
		if !skip {
			e.spawning.Store(&spawned)
		}
		e.op.Unlock()
		if skip {
			return
		}
		spawnDone := sync.OnceFunc(func() { close(spawned) })
		defer spawnDone()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		nx := &standby{booted: &booted{
			s:       s,
			id:      e.id,
			drv:     e.drv,
			layer:   fmt.Sprintf("%s.next-%d", e.id, gen),
			runDir:  filepath.Join(s.runDir(e.id), fmt.Sprintf("gen-%d", gen)),
			standby: true,
		}}
		upper, work, err := s.pool.CreateLayer(ctx, nx.layer, recCopy.Resources.DiskMB)
		if err != nil {
			s.log.Warn("standby init: layer", "sandbox", e.id, "err", err)
			return
		}
		// Mkdir, not MkdirAll: a sandbox destroyed meanwhile has no run
		// dir, and must not get one back.
		if err := os.Mkdir(nx.runDir, 0o711); err != nil {
			_ = s.pool.RemoveLayer(ctx, nx.layer)
			return
		}
		spec := s.driverSpec(&recCopy, tpl, upper, work, nx.runDir)
		nx.key = specKey(spec)
		nx.h, err = sb.Prepare(ctx, spec)
		spawnDone()
		if err != nil {
			e.op.Lock()
			gone := e.destroying || e.gen != gen
			e.op.Unlock()
			if !gone { // else: destroyed or reset meanwhile, as expected
				s.log.Warn("standby init did not start", "sandbox", e.id, "err", err)
			}
			nx.h = nil // nothing to discard: layer and run dir go
			_ = nx.Release(ctx)
			return
		}
		e.op.Lock()
		defer e.op.Unlock()
		if stale() {
			s.discard(ctx, nx)
			return
		}
		e.next = nx
	}()
}

// resetFast switches e to its standby when it was booted on what rec and
// tpl name; e.op is held and rec already names the reset's target. It
// returns nil, nil when there is no such standby (the caller takes the
// full path), and an error when the sandbox is left unusable.
func (s *Service) resetFast(ctx context.Context, e *entry, rec *store.SandboxRecord, tpl *storage.Template, gen uint64) (*store.SandboxRecord, error) {
	nx := e.next
	sb, ok := driver.As[driver.Standby](e.drv)
	if nx == nil || !ok || nx.key != specKey(s.driverSpec(rec, tpl, "", "", "")) {
		return nil, nil
	}
	e.next = nil
	t0 := time.Now()
	if e.paused.Load() {
		// Thaws the standby too: both live in the sandbox's cgroups.
		if p, ok := driver.As[driver.Pauser](e.drv); ok {
			_ = p.Resume(ctx, e.handle())
		}
	}
	old := e.handle()
	gone, err := sb.Promote(ctx, old, nx.h)
	if err != nil {
		s.log.Warn("reset: standby unusable; full reset instead", "sandbox", e.id, "err", err)
		s.discard(ctx, nx)
		return nil, nil
	}
	e.hp.Store(nx.h)
	e.paused.Store(false)
	e.act.touch()
	e.guest.CloseIdleConnections()
	ok = false
	defer func() {
		if !ok { // the sandbox fails; the old layer still goes
			go func() { <-gone; _ = s.pool.RemoveLayer(context.Background(), nx.layer) }()
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
	oldDir := filepath.Dir(old.Socket)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		<-gone
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.pool.RemoveLayer(cctx, nx.layer); err != nil {
			s.log.Warn("reset: removing the old layer", "sandbox", e.id, "err", err)
		}
		if old.Socket != "" && oldDir != s.runDir(e.id) {
			_ = os.RemoveAll(oldDir)
		}
	}()
	s.prepareStandby(e, out, tpl, gen)
	return out, nil
}

// removeStandbyLayers removes every standby layer of sandbox id (its
// standby's, and an old init's still waiting to go).
func (s *Service) removeStandbyLayers(ctx context.Context, id string) error {
	ids, err := s.pool.ListLayers()
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range ids {
		if strings.HasPrefix(l, id+".next-") {
			errs = append(errs, s.pool.RemoveLayer(ctx, l))
		}
	}
	return errors.Join(errs...)
}

// waitStandby waits (at most a second) for a standby of e still booting:
// switching to it when it is up costs less than a full reset.
func waitStandby(ctx context.Context, e *entry) {
	p := e.preparing.Load()
	if p == nil {
		return
	}
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-*p:
	case <-t.C:
	case <-ctx.Done():
	}
}

// waitSpawn waits for a standby of e still being spawned: its process
// joins the sandbox's cgroups, which a destroy removes and a pause
// freezes (a standby frozen mid-boot would time out).
func waitSpawn(ctx context.Context, e *entry) {
	if p := e.spawning.Load(); p != nil {
		select {
		case <-*p:
		case <-ctx.Done():
		}
	}
}
