package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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

// standbys boots sandboxes' standby inits, holds them and hands them to
// a reset: a collaborator of the service that reaches it only through
// host (standbyHost) and the storage pool. A sandbox's standby state
// (standbySlot) lives in its entry, guarded by the entry's op; of the
// entry, the standbys use only id, drv, op, destroying and gen (read), and
// its slot. What a reset does to the entry and its record around the
// switch (handle, paused, record, watcher) stays the service's (resetFast).
type standbys struct {
	host standbyHost
	pool layerStore
	log  *slog.Logger
	// wg counts the background boots and cleanups; the service's Close
	// waits for it.
	wg *sync.WaitGroup
}

// standbyHost is what the standbys need of the service: where a
// sandbox's run dir is and the spec its init boots on. *Service is the
// one the daemon uses. Neither takes a lock.
type standbyHost interface {
	runDir(id string) string
	driverSpec(rec *store.SandboxRecord, tpl *storage.Template, upper, work, dir string) *driver.Spec
}

var _ standbyHost = (*Service)(nil)

// standbySlot is a sandbox's standby state, in its entry.
type standbySlot struct {
	// next is the standby init a reset switches to; nil while there is
	// none. Guarded by the entry's op.
	next *standby
	// preparing is closed when the last standby started has booted (or
	// failed to).
	preparing atomic.Pointer[chan struct{}]
	// spawning is closed when the last standby's spawn has returned:
	// whoever destroys the sandbox's cgroups waits for it first.
	spawning atomic.Pointer[chan struct{}]
}

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

// drop discards e's standby, if any, and waits for one still being
// spawned (so that the sandbox's cgroups can go); e.op is held.
func (st *standbys) drop(ctx context.Context, e *entry) {
	e.sb.waitSpawn(ctx)
	nx := e.sb.next
	if nx == nil {
		return
	}
	e.sb.next = nil
	st.discard(ctx, nx)
}

func (st *standbys) discard(ctx context.Context, nx *standby) {
	if err := nx.Release(ctx); err != nil {
		st.log.Warn("discarding a standby init", "sandbox", nx.id, "err", err)
	}
}

// prepare boots, in the background, the init that e's next reset to the
// place rec now names switches to; gen is e's generation now. A reset
// meanwhile waits for it (waitStandby).
func (st *standbys) prepare(e *entry, rec *store.SandboxRecord, tpl *storage.Template, gen uint64) {
	sb, ok := driver.As[driver.Standby](e.drv)
	if !ok {
		return
	}
	recCopy := *rec
	done := make(chan struct{})
	e.sb.preparing.Store(&done)
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		defer close(done)
		stale := func() bool { return e.destroying || e.gen != gen || e.sb.next != nil }
		// Registered under e.op: a destroy after this waits for the spawn
		// (waitSpawn), one before it makes this stale.
		spawned := make(chan struct{})
		e.op.Lock()
		// A sandbox paused before this ran gets none: a standby spawned
		// into its frozen cgroups would hang mid-boot until the spawn's
		// timeout, and a reset or destroy meanwhile would wait for it
		// (waitSpawn). Its reset takes the full path, and prepares again.
		skip := stale() || e.paused.Load() || e.onDisk.Load()
		if !skip {
			e.sb.spawning.Store(&spawned)
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
			pool:    st.pool,
			id:      e.id,
			drv:     e.drv,
			layer:   fmt.Sprintf("%s.next-%d", e.id, gen),
			runDir:  filepath.Join(st.host.runDir(e.id), fmt.Sprintf("gen-%d", gen)),
			standby: true,
		}}
		upper, work, err := st.pool.CreateLayer(ctx, nx.layer, recCopy.Resources.DiskMB, recCopy.Lowers)
		if err != nil {
			st.log.Warn("standby init: layer", "sandbox", e.id, "err", err)
			return
		}
		// Mkdir, not MkdirAll: a sandbox destroyed meanwhile has no run
		// dir, and must not get one back.
		if err := os.Mkdir(nx.runDir, 0o711); err != nil {
			_ = st.pool.RemoveLayer(ctx, nx.layer)
			return
		}
		spec := st.host.driverSpec(&recCopy, tpl, upper, work, nx.runDir)
		nx.key = specKey(spec)
		nx.h, err = sb.Prepare(ctx, spec)
		spawnDone()
		if err != nil {
			e.op.Lock()
			gone := e.destroying || e.gen != gen
			e.op.Unlock()
			if !gone { // else: destroyed or reset meanwhile, as expected
				st.log.Warn("standby init did not start", "sandbox", e.id, "err", err)
			}
			nx.h = nil // nothing to discard: layer and run dir go
			_ = nx.Release(ctx)
			return
		}
		e.op.Lock()
		defer e.op.Unlock()
		if stale() {
			st.discard(ctx, nx)
			return
		}
		e.sb.next = nx
	}()
}

// take removes e's standby from it and returns it when it was booted on
// what key names (a specKey, computed only when there is a standby); e.op
// is held. It returns nil when there is no such standby (the reset takes
// the full path).
func (st *standbys) take(e *entry, key func() string) *standby {
	nx := e.sb.next
	if nx == nil || !driver.Has[driver.Standby](e.drv) || nx.key != key() {
		return nil
	}
	e.sb.next = nil
	return nx
}

// promote makes nx, taken from e, e's init in place of old; gone closes
// when old has exited. A standby that cannot be promoted is discarded.
func (st *standbys) promote(ctx context.Context, e *entry, old *driver.Handle, nx *standby) (gone <-chan struct{}, err error) {
	sb, _ := driver.As[driver.Standby](e.drv)
	gone, err = sb.Promote(ctx, old, nx.h)
	if err != nil {
		st.log.Warn("reset: standby unusable; full reset instead", "sandbox", e.id, "err", err)
		st.discard(ctx, nx)
		return nil, err
	}
	return gone, nil
}

// removeAfter removes layer once gone closes.
func (st *standbys) removeAfter(gone <-chan struct{}, layer string) {
	go func() { <-gone; _ = st.pool.RemoveLayer(context.Background(), layer) }()
}

// retire removes, once the old init of sandbox id is gone, what it ran on:
// its layer (under the promoted standby's name since the exchange) and
// its run dir when that was a standby's.
func (st *standbys) retire(id string, old *driver.Handle, nx *standby, gone <-chan struct{}) {
	oldDir := filepath.Dir(old.Socket)
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		<-gone
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := st.pool.RemoveLayer(cctx, nx.layer); err != nil {
			st.log.Warn("reset: removing the old layer", "sandbox", id, "err", err)
		}
		if old.Socket != "" && oldDir != st.host.runDir(id) {
			_ = os.RemoveAll(oldDir)
		}
	}()
}

// removeLayers removes every standby layer of sandbox id (its standby's,
// and an old init's still waiting to go).
func (st *standbys) removeLayers(ctx context.Context, id string) error {
	ids, err := st.pool.ListLayers()
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range ids {
		if strings.HasPrefix(l, id+".next-") {
			errs = append(errs, st.pool.RemoveLayer(ctx, l))
		}
	}
	return errors.Join(errs...)
}

// waitStandby waits (at most a second) for a standby still booting:
// switching to it when it is up costs less than a full reset.
func (sl *standbySlot) waitStandby(ctx context.Context) {
	p := sl.preparing.Load()
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

// waitSpawn waits for a standby still being spawned: its process joins
// the sandbox's cgroups, which a destroy removes and a pause freezes (a
// standby frozen mid-boot would time out).
func (sl *standbySlot) waitSpawn(ctx context.Context) {
	if p := sl.spawning.Load(); p != nil {
		select {
		case <-*p:
		case <-ctx.Done():
		}
	}
}
