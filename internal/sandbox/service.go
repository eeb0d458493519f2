package sandbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/network"
	"github.com/agentbox/agentbox/internal/registry"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"
	"github.com/agentbox/agentbox/internal/tracing"
)

// Options wire the service.
type Options struct {
	Config  *config.Config
	Store   *store.Store
	Pool    *storage.Pool
	Drivers map[string]driver.Driver
	Logger  *slog.Logger
	// Net wires sandboxes with egress to the network (egress.go); nil
	// refuses egress other than none.
	Net *network.Manager
}

// Service owns every sandbox of this daemon.
type Service struct {
	cfg     *config.Config
	st      *store.Store
	pool    layerStore
	drivers map[string]driver.Driver
	log     *slog.Logger
	net     *network.Manager
	reg     *registry.Client // snapshot pushes and pulls (snapshotoci.go)

	stop chan struct{}
	wg   sync.WaitGroup

	// quota enforces tenants' quotas (quota.go).
	quota quotas

	// coldMu serializes cold starts of stopped sandboxes.
	coldMu sync.Mutex

	// warm are the warm pools (warmpool.go).
	warm warmPools
	// ckpt are the memory checkpoints on disk (memsnap.go).
	ckpt checkpoints
	// standby boots and holds the sandboxes' standby inits (standby.go).
	standby standbys

	// events receives the lifecycle events (events.go); nil: none.
	events *events.Hub

	mu sync.Mutex
	// live are the sandboxes with a running (or paused) init.
	live map[string]*entry
}

// entry is one live sandbox.
type entry struct {
	id     string
	tenant string
	drv    driver.Driver
	// hp is the driver's handle; reset swaps it for a new one.
	hp    atomic.Pointer[driver.Handle]
	guest *http.Transport
	// guestCheck: the protocol check of an adopted sandbox's agent
	// (guestversion.go); nil for every sandbox this daemon booted.
	guestCheck atomic.Pointer[guestCheck]
	// paused is set while the sandbox is frozen; autoResume makes guest
	// requests thaw it instead of failing.
	paused     atomic.Bool
	autoResume bool
	// onDisk: paused to disk (memsnap.go): no init runs, the handle is
	// stale, resume restores the checkpoint.
	onDisk atomic.Bool
	// idle is the sandbox's idle timeout (0: none); act its clock (idle.go).
	idle time.Duration
	act  activity

	// op serializes lifecycle operations (destroy, pause, snapshot, reset).
	op         sync.Mutex
	destroying bool
	// gen counts the inits this entry has had (reset starts a new one), so
	// that the watcher of a replaced init ignores its exit.
	gen uint64
	// sb is the sandbox's standby init, if any (standby.go).
	sb standbySlot
}

func (e *entry) handle() *driver.Handle { return e.hp.Load() }

// New returns a service; call Start to recover state and start the reaper.
func New(o Options) *Service {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Service{
		cfg:     o.Config,
		st:      o.Store,
		pool:    o.Pool,
		drivers: o.Drivers,
		log:     o.Logger,
		net:     o.Net,
		stop:    make(chan struct{}),
		live:    map[string]*entry{},
	}
	s.warm.host, s.warm.log, s.warm.stop, s.warm.wg = s, s.log, s.stop, &s.wg
	s.ckpt.host, s.ckpt.log = s, s.log
	s.standby.host, s.standby.pool, s.standby.log, s.standby.wg = s, s.pool, s.log, &s.wg
	if o.Config != nil {
		s.ckpt.root = filepath.Join(o.Config.DataDir, "checkpoints")
	}
	return s
}

func (s *Service) runDir(id string) string {
	return filepath.Join(s.cfg.RunDir, "sandboxes", id)
}

// newID returns a sandbox or snapshot id: the daemon's node_id (none, or
// 3 characters; docs/cluster.md), then 12 random characters of
// api.IDAlphabet (60 bits): usable as a hostname, a cgroup name and a DNS
// label. Names with a length limit derived from an id use its last 12
// characters (network.HostVeth).
func (s *Service) newID() string {
	node := ""
	if s.cfg != nil {
		node = s.cfg.NodeID
	}
	return newID(node)
}

// newID returns node followed by api.IDRandLen random characters.
func newID(node string) string {
	b := make([]byte, len(node)+api.IDRandLen)
	copy(b, node)
	r := b[len(node):]
	_, _ = rand.Read(r)
	for i := range r {
		r[i] = api.IDAlphabet[r[i]&31]
	}
	return string(b)
}

// Create makes a sandbox for tenant and returns once it can run a command.
func (s *Service) Create(ctx context.Context, tenant string, req *api.CreateSandboxRequest) (_ *api.Sandbox, err error) {
	ctx, sp := tracing.Start(ctx, "sandbox.Create")
	defer func() { tracing.End(sp, err) }()
	r, err := resolve(s.cfg, req)
	if err != nil {
		return nil, err
	}
	netw, err := resolveNetwork(s.cfg, req.Network)
	if err != nil {
		return nil, err
	}
	if err := s.checkNetAvailable(netw); err != nil {
		return nil, err
	}
	var (
		tpl  *storage.Template
		snap *store.SnapshotRecord
	)
	if req.Snapshot != "" {
		if req.Template != "" {
			return nil, errdefs.Invalid("send either template or snapshot, not both: a snapshot already names its template")
		}
		if snap, err = s.st.GetSnapshot(ctx, tenancy.Only(tenant), req.Snapshot); err != nil {
			return nil, err
		}
		if snap.State != store.SnapshotReady {
			return nil, errdefs.NotFound("snapshot %q is still being taken; retry in a moment", req.Snapshot)
		}
		// A snapshot restores on its own tier unless the request names
		// another: with its memory where it has one (another tier gets
		// the files only), and a sandbox snapshotted on gvisor is not
		// moved to the default tier, a weaker boundary, by a create that
		// named none. A tier this node lacks (a snapshot pulled from
		// another node) leaves the default.
		if req.Isolation == "" && s.drivers[snap.Isolation] != nil {
			r.Isolation = snap.Isolation
		}
	}
	drv, ok := s.drivers[r.Isolation]
	if !ok {
		return nil, errdefs.Invalid("isolation %q is not available on this host; available: %s", r.Isolation, strings.Join(s.DriverNames(), ", "))
	}
	if netw.Egress != api.EgressNone {
		if err := driver.Refuses(drv, driver.OpNetwork); err != nil {
			return nil, err
		}
	}
	if snap != nil {
		if err := driver.Refuses(drv, driver.OpSnapshot); err != nil {
			return nil, err
		}
		if tpl, err = s.pool.TemplateVersion(snap.Template, snap.TemplateVersion); err != nil {
			return nil, fmt.Errorf("template of snapshot %s: %w", snap.ID, err)
		}
		// Without its memory a snapshot gives its layer's files: a tier
		// whose files are not a layer (microvm) has none to give or take.
		if snap.Isolation != r.Isolation || s.ckpt.memoryOf(snap.ID, drv) == "" {
			if err := driver.Refuses(drv, driver.OpFileSnapshot); err != nil {
				return nil, err
			}
			if src := s.drivers[snap.Isolation]; src != nil {
				if err := driver.Refuses(src, driver.OpFileSnapshot); err != nil {
					return nil, fmt.Errorf("snapshot %s was taken on isolation %s and restores only there with its memory: %w", snap.ID, snap.Isolation, err)
				}
			}
		}
	} else if tpl, err = s.pool.TemplateFor(ctx, r.Template); err != nil { // another tenant's: not found
		return nil, err
	}
	if req.MemoryMB == 0 && tpl.MemoryMB > 0 {
		// The template's own default: a desktop needs more than a shell.
		r.Res.MemoryMB = min(tpl.MemoryMB, s.cfg.Limits.MemoryMB)
	}
	ul, err := resolveUserLimits(tpl.UserLimits, req.UserLimits)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	rec := &store.SandboxRecord{
		ID:              s.newID(),
		Tenant:          tenant,
		State:           api.StateCreating,
		Template:        tpl.Name,
		TemplateVersion: tpl.Version,
		Isolation:       r.Isolation,
		Spec:            *req,
		Resources:       r.Res,
		Env:             r.Env,
		Metadata:        r.Metadata,
		CreatedAt:       now,
		Lowers:          tpl.LowerDirs(),
	}
	rec.Spec.Network = netw
	rec.Spec.UserLimits = &ul
	if snap != nil {
		rec.Snapshot = snap.ID
		rec.Spec.Snapshot = snap.ID
		rec.Lowers = snap.Lowers
		rec.Env = mergeEnv(snap.Env, r.Env)
	}
	if r.TTL > 0 {
		exp := now.Add(r.TTL)
		rec.ExpiresAt = &exp
	}
	// A matching warm pool sandbox is handed out instead of a cold boot
	// (warmpool.go): it gives rec its id, and take takes it.
	defer s.warm.claim(rec, tpl, drv)()
	// The sandbox outlives this request: build it on a context of its own.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	release, err := s.admit(cctx, tenant, rec.Resources, 1, true)
	if err != nil {
		return nil, err
	}
	var (
		e        *entry
		restored bool
	)
	if sp.IsRecording() {
		sp.SetAttributes(attribute.String("agentbox.sandbox", rec.ID), attribute.String("agentbox.template", tpl.Name),
			attribute.String("agentbox.tier", r.Isolation))
	}
	if m := s.warm.take(cctx, rec); m != nil {
		if sp.IsRecording() {
			sp.SetAttributes(attribute.Bool("agentbox.warm_pool", true))
		}
		e, err = s.recordWarm(cctx, rec, m)
		release()
	} else {
		e, restored, err = s.createCold(cctx, rec, tpl, snap, drv, release)
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.live[rec.ID] = e
	s.mu.Unlock()
	s.watch(e, 0)
	// The template's start command and readiness check (start.go); a
	// sandbox restored with memory runs them already.
	if restored {
		return toAPI(rec), nil
	}
	if err := s.startTemplate(ctx, e, tpl); err != nil {
		// The create failed: say so on the events stream (created was
		// published when it ran; destroyed follows).
		s.emit(events.Failed, rec.ID, tenant, err.Error())
		_ = s.Destroy(context.WithoutCancel(ctx), tenancy.AllTenants(), rec.ID)
		return nil, err
	}
	s.log.Debug("created", "sandbox", rec.ID, "tenant", tenant, "template", tpl.Name+"@"+tpl.Version)
	return toAPI(rec), nil
}

// createCold records rec as creating, boots it and records it running;
// release drops the quota reservation once the record counts. On error
// the record says failed and nothing else is left. restored: it was
// restored with memory from its snapshot.
func (s *Service) createCold(ctx context.Context, rec *store.SandboxRecord, tpl *storage.Template, snap *store.SnapshotRecord,
	drv driver.Driver, release func()) (e *entry, restored bool, err error) {
	err = s.st.CreateSandboxFromSnapshot(ctx, rec)
	release()
	if err != nil {
		return nil, false, err
	}
	bootDrv := drv
	if snap != nil && snap.Isolation == rec.Isolation {
		if dir := s.ckpt.memoryOf(snap.ID, drv); dir != "" {
			bootDrv, restored = restoring{drv, dir}, true // memsnap.go
		}
	}
	e, _, err = s.start(ctx, rec, tpl, bootDrv, false)
	if err != nil {
		s.log.Warn("create failed", "sandbox", rec.ID, "err", err)
		// ctx may be what ended the boot (its 60 s bound): the record
		// says failed all the same, never creating for ever.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = s.st.UpdateSandbox(fctx, rec.ID, func(r *store.SandboxRecord) error {
			if err := s.transition(r, api.StateFailed); err != nil {
				return err
			}
			r.Error = err.Error()
			return nil
		})
		return nil, false, fmt.Errorf("creating sandbox: %w", err)
	}
	e.drv = drv
	var out *store.SandboxRecord
	err = s.st.UpdateSandbox(ctx, rec.ID, func(r *store.SandboxRecord) error {
		if err := s.transition(r, api.StateRunning); err != nil {
			return err
		}
		r.Handle = e.handle()
		out = r
		return nil
	})
	if err != nil {
		s.teardown(e, "store update failed")
		return nil, false, err
	}
	*rec = *out
	return e, restored, nil
}

// start builds the sandbox's layer and run dir and starts its driver; on
// error nothing is left. With keepLayer it starts on the layer the sandbox
// already has (a cold resume), which it never removes. The booted sandbox
// is returned too, for its Release until the entry is live.
func (s *Service) start(ctx context.Context, rec *store.SandboxRecord, tpl *storage.Template, drv driver.Driver, keepLayer bool) (*entry, *booted, error) {
	b, err := s.boot(ctx, rec, tpl, drv, keepLayer)
	if err != nil {
		return nil, nil, err
	}
	return s.entryOf(rec, drv, b.h), b, nil
}

// entryOf is the live entry of rec, whose init is h.
func (s *Service) entryOf(rec *store.SandboxRecord, drv driver.Driver, h *driver.Handle) *entry {
	e := s.newEntry(rec.ID, rec.Tenant, drv, h)
	e.autoResume = rec.Spec.AutoResume
	e.idle = idleTimeout(&rec.Spec)
	return e
}

// boot makes the run dir and (unless keepLayer) the writable layer, and
// starts the sandbox's init on rec.Lowers; on error nothing it made is left.
// drv may be a restoring wrapper (memsnap.go); the booted sandbox names
// the driver beneath it.
func (s *Service) boot(ctx context.Context, rec *store.SandboxRecord, tpl *storage.Template, drv driver.Driver, keepLayer bool) (_ *booted, err error) {
	dir := s.runDir(rec.ID)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("creating run dir: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	var upper, work string
	if keepLayer {
		if upper, work, err = s.pool.LayerPaths(rec.ID); err != nil {
			return nil, fmt.Errorf("finding the sandbox's layer: %w", err)
		}
	} else {
		lctx, sp := tracing.Start(ctx, "storage.CreateLayer")
		upper, work, err = s.pool.CreateLayer(lctx, rec.ID, rec.Resources.DiskMB, rec.Lowers)
		tracing.End(sp, err)
		if err != nil {
			return nil, fmt.Errorf("creating writable layer: %w", err)
		}
		defer func() {
			if err != nil {
				_ = s.pool.RemoveLayer(context.WithoutCancel(ctx), rec.ID)
			}
		}()
	}
	spec := s.driverSpec(rec, tpl, upper, work, dir)
	na := s.netAttachFor(rec, drv) // netattach.go
	nctx, sp := tracing.Start(ctx, "network.Prepare")
	err = na.before(nctx, spec)
	tracing.End(sp, err)
	if err != nil {
		return nil, fmt.Errorf("connecting the sandbox's network: %w", err)
	}
	// The driver's span; the guest's first answer (its readiness) is
	// its child.
	dctx, sp := tracing.Start(ctx, "driver.Create")
	if sp.IsRecording() {
		sp.SetAttributes(attribute.String("agentbox.tier", drv.Name()))
	}
	h, err := drv.Create(dctx, spec)
	tracing.End(sp, err)
	if err != nil {
		na.undo()
		return nil, err
	}
	if err := na.after(ctx, h); err != nil {
		_ = drv.Destroy(context.WithoutCancel(ctx), h)
		return nil, fmt.Errorf("connecting the sandbox's network: %w", err)
	}
	b := &booted{s: s, pool: s.pool, id: rec.ID, drv: drv, h: h, runDir: dir, net: !keepLayer}
	if w, ok := drv.(driver.Wrapper); ok { // a restore
		b.drv = w.Unwrap()
	}
	if !keepLayer {
		b.layer = rec.ID
	}
	return b, nil
}

// driverSpec is what the driver gets to start rec's init on its lowers
// with the writable layer upper/work and run dir dir.
func (s *Service) driverSpec(rec *store.SandboxRecord, tpl *storage.Template, upper, work, dir string) *driver.Spec {
	layers := rec.Lowers
	if len(layers) == 0 {
		layers = tpl.LowerDirs()
	}
	env := make([]string, 0, len(tpl.Env)+len(rec.Env))
	merged := maps.Clone(tpl.Env)
	if merged == nil {
		merged = map[string]string{}
	}
	maps.Copy(merged, rec.Env)
	keys := make([]string, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+merged[k])
	}
	return &driver.Spec{
		ID:       rec.ID,
		Hostname: "sbx-" + rec.ID,
		Layers:   layers,
		UpperDir: upper,
		WorkDir:  work,
		Env:      env,
		User:     tpl.User,
		Workdir:  tpl.Workdir,
		CPU:      rec.Resources.CPU,
		MemoryMB: rec.Resources.MemoryMB,
		Pids:     rec.Resources.Pids,
		DiskMB:   rec.Resources.DiskMB,
		// The layer is the directory of upper/ and work/; a layer that
		// is no btrfs subvolume (a test's) has no quota group to show.
		DiskQuota: qgroupDir(upper),
		RunDir:    dir,
		// nil (a build step's sandbox, a record from before user_limits):
		// the guest's defaults, api.DefaultUserLimits.
		UserLimits: rec.Spec.UserLimits,
	}
}

func qgroupDir(upper string) string {
	if upper == "" {
		return ""
	}
	d, err := storage.QgroupSysfsDir(filepath.Dir(upper))
	if err != nil {
		return ""
	}
	return d
}

func mergeEnv(base, over map[string]string) map[string]string {
	if len(base) == 0 {
		return over
	}
	out := maps.Clone(base)
	maps.Copy(out, over)
	return out
}

func (s *Service) newEntry(id, tenant string, drv driver.Driver, h *driver.Handle) *entry {
	e := &entry{id: id, tenant: tenant, drv: drv}
	e.hp.Store(h)
	e.act.touch()
	e.guest = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return drv.DialGuest(ctx, e.handle())
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return e
}

// watch marks a sandbox failed when its init (generation gen) dies without
// a destroy or a reset.
func (s *Service) watch(e *entry, gen uint64) {
	exited := e.drv.Exited(e.handle())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case <-exited:
		case <-s.stop:
			return
		}
		e.op.Lock()
		stale := e.destroying || e.gen != gen
		e.op.Unlock()
		if stale {
			return
		}
		// The tier's account of the end, read before Destroy removes
		// its evidence (runsc's logs, the cgroup's OOM count).
		why := driver.ExitReason(e.drv, e.handle())
		if s.keepStopped(e, gen, why) {
			return
		}
		s.log.Warn("sandbox init exited unexpectedly; cleaning up", "sandbox", e.id, "why", why)
		s.teardown(e, "sandbox init exited unexpectedly"+because(why))
	}()
}

// because is ": why", or "" when why is empty.
func because(why string) string {
	if why == "" {
		return ""
	}
	return ": " + why
}

// teardown destroys e's resources and records the final state: destroyed,
// or failed with reason when reason is not empty.
func (s *Service) teardown(e *entry, reason string) error {
	e.op.Lock()
	defer e.op.Unlock()
	if e.destroying {
		return nil
	}
	return s.teardownLocked(e, reason)
}

// teardownLocked is teardown with e.op held and e not yet being
// destroyed: the one way a live sandbox ends (a destroy, an init that
// died, a reset or resume that failed: failLocked).
func (s *Service) teardownLocked(e *entry, reason string) error {
	e.destroying = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.standby.drop(ctx, e)
	_ = s.st.UpdateSandbox(ctx, e.id, func(r *store.SandboxRecord) error {
		return s.transition(r, api.StateDestroying)
	})
	err := s.release(ctx, e.id, e.drv, e.handle())
	e.guest.CloseIdleConnections()
	s.mu.Lock()
	delete(s.live, e.id)
	s.mu.Unlock()
	s.recordEnd(ctx, e.id, reason, err)
	return err
}

// recordEnd records the end of sandbox id once its release (whose error
// is cleanup) is done: destroyed, or failed with reason when reason is
// not empty (a destroyed sandbox that had failed keeps its error), and
// removes the internal snapshot it started from if nothing else needs it.
func (s *Service) recordEnd(ctx context.Context, id, reason string, cleanup error) {
	final := api.StateDestroyed
	if reason != "" {
		final = api.StateFailed
	}
	_ = s.st.UpdateSandbox(ctx, id, func(r *store.SandboxRecord) error {
		if err := s.transition(r, final); err != nil {
			return err
		}
		if reason != "" {
			r.Error = reason
		}
		if cleanup != nil {
			r.Error = strings.TrimPrefix(r.Error+"; cleanup: "+cleanup.Error(), "; ")
		}
		return nil
	})
	s.collectFor(ctx, id)
}

// release frees everything a recorded sandbox holds on the host: what a
// booted sandbox's Release frees (booted.go), and what the sandbox made
// since (a checkpoint on disk, standby layers).
func (s *Service) release(ctx context.Context, id string, drv driver.Driver, h *driver.Handle) error {
	b := &booted{s: s, pool: s.pool, id: id, drv: drv, h: h, layer: id, net: true}
	errs := []error{b.Release(ctx)}
	if err := os.RemoveAll(s.ckpt.diskDir(id)); err != nil {
		errs = append(errs, fmt.Errorf("removing checkpoint: %w", err))
	}
	if err := s.standby.removeLayers(ctx, id); err != nil { // standby.go
		errs = append(errs, fmt.Errorf("removing standby layers: %w", err))
	}
	if err := os.RemoveAll(s.runDir(id)); err != nil {
		errs = append(errs, fmt.Errorf("removing run dir: %w", err))
	}
	return errors.Join(errs...)
}

// lookup returns the live entry of a sandbox in scope. Another tenant's
// sandbox is not found, never forbidden.
func (s *Service) lookup(ctx context.Context, scope tenancy.Scope, id string) (*entry, error) {
	s.mu.Lock()
	e, ok := s.live[id]
	s.mu.Unlock()
	if ok && scope.Sees(e.tenant) {
		return e, nil
	}
	rec, err := s.visible(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	if rec.State == api.StateStopped {
		return nil, errdefs.Precondition("sandbox %s is stopped; start it again with `agentbox resume %s`", id, id)
	}
	return nil, errdefs.Precondition("sandbox %s is %s, not running", id, rec.State)
}

// visible returns the record of a sandbox in scope that has not been
// destroyed. Another tenant's sandbox, an
// unknown id and a destroyed sandbox are all not found, on every route
// (`agentbox ls --all` still lists destroyed ones).
func (s *Service) visible(ctx context.Context, scope tenancy.Scope, id string) (*store.SandboxRecord, error) {
	rec, err := s.st.GetSandbox(ctx, id)
	if err != nil || !scope.Sees(rec.Tenant) {
		return nil, errdefs.NotFound("sandbox %q not found; list yours with `agentbox ls`", id)
	}
	if rec.State == api.StateDestroyed {
		return nil, errdefs.NotFound("sandbox %q not found: it was destroyed; create a new one", id)
	}
	return rec, nil
}

// Get returns a sandbox in scope.
func (s *Service) Get(ctx context.Context, scope tenancy.Scope, id string) (*api.Sandbox, error) {
	rec, err := s.visible(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	return s.withDisk(toAPI(rec)), nil
}

// SetTTL makes a sandbox expire ttl from now (0: never).
func (s *Service) SetTTL(ctx context.Context, scope tenancy.Scope, id string, ttlSeconds int64) (*api.Sandbox, error) {
	if _, err := s.lookup(ctx, scope, id); err != nil {
		return nil, err
	}
	lim := s.cfg.Limits.TTL
	if ttlSeconds == 0 || ttlSeconds < -1 {
		return nil, errdefs.Invalid("ttl_seconds must be positive, or -1 for no TTL, got %d", ttlSeconds)
	}
	ttl := time.Duration(ttlSeconds) * time.Second
	if ttlSeconds == -1 {
		ttl = 0
	}
	if err := checkTTLLimit(lim, ttl, ttlSeconds); err != nil {
		return nil, err
	}
	var out *store.SandboxRecord
	err := s.st.UpdateSandbox(ctx, id, func(r *store.SandboxRecord) error {
		if ttlSeconds == -1 {
			r.ExpiresAt = nil
		} else {
			exp := time.Now().UTC().Add(time.Duration(ttlSeconds) * time.Second)
			r.ExpiresAt = &exp
		}
		out = r
		return nil
	})
	if err != nil {
		return nil, err
	}
	return toAPI(out), nil
}

// Destroy stops and removes a sandbox; nothing of it is left on the host.
func (s *Service) Destroy(ctx context.Context, scope tenancy.Scope, id string) error {
	e, err := s.lookup(ctx, scope, id)
	if err != nil {
		if errors.Is(err, errdefs.ErrFailedPrecondition) {
			// Not running: already destroyed, or failed. Make sure nothing
			// is left, record it destroyed (a failed sandbox keeps its
			// error) and report success.
			rec, gerr := s.st.GetSandbox(ctx, id)
			if gerr == nil && rec.State != api.StateDestroyed {
				var drv driver.Driver = s.drivers[rec.Isolation]
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				_ = s.release(rctx, id, drv, rec.Handle)
				s.recordEnd(rctx, id, "", nil)
			}
			return nil
		}
		return err
	}
	return s.teardown(e, "")
}

// Guest returns a transport to a tenant's running sandbox's guest agent.
func (s *Service) Guest(ctx context.Context, scope tenancy.Scope, id string) (http.RoundTripper, error) {
	e, err := s.lookup(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	if e.paused.Load() {
		if !e.autoResume {
			return nil, errdefs.Precondition("sandbox %s is paused; resume it with `agentbox resume %s`", id, id)
		}
		if _, err := s.Resume(ctx, scope, id); err != nil {
			return nil, fmt.Errorf("resuming sandbox %s (auto_resume): %w", id, err)
		}
	}
	if err := s.guestRefused(ctx, e); err != nil {
		return nil, err
	}
	return activeTransport{e}, nil
}

// DownloadLimit is the most bytes a file or archive download from a
// tenant's sandbox id may hold (max_download_mb; by default the sandbox's
// disk limit: a sandbox cannot hand the host more than it may store, a
// sparse file's holes included); 0: no limit.
func (s *Service) DownloadLimit(ctx context.Context, scope tenancy.Scope, id string) (int64, error) {
	switch {
	case s.cfg.MaxDownloadMB < 0:
		return 0, nil
	case s.cfg.MaxDownloadMB > 0:
		return s.cfg.MaxDownloadMB << 20, nil
	}
	rec, err := s.st.GetSandbox(ctx, id)
	if err != nil || !scope.Sees(rec.Tenant) {
		return 0, errdefs.NotFound("sandbox %q not found; list yours with `agentbox ls`", id)
	}
	return rec.Resources.DiskMB << 20, nil
}

// DriverNames lists the isolation tiers this daemon runs.
func (s *Service) DriverNames() []string {
	var names []string
	for n := range s.drivers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LiveCount is the number of sandboxes with a running init.
func (s *Service) LiveCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

func toAPI(r *store.SandboxRecord) *api.Sandbox {
	node, _ := api.NodeOfID(r.ID) // the id carries its node (docs/cluster.md)
	sb := &api.Sandbox{
		ID:              r.ID,
		Node:            node,
		State:           r.State,
		Template:        r.Template,
		TemplateVersion: r.TemplateVersion,
		Isolation:       r.Isolation,
		Resources:       r.Resources,
		Env:             r.Env,
		Metadata:        r.Metadata,
		CreatedAt:       r.CreatedAt,
		ExpiresAt:       r.ExpiresAt,
		Error:           r.Error,
		Parent:          r.Parent,
		Snapshot:        r.Snapshot,
		OnTimeout:       r.Spec.OnTimeout,
		AutoResume:      r.Spec.AutoResume,
		Network:         r.Spec.Network,
		UserLimits:      r.Spec.UserLimits,
	}
	sb.IdleTimeoutSeconds = r.Spec.IdleTimeoutSeconds
	if r.Handle != nil {
		sb.Pid = r.Handle.Pid
		sb.UIDBase = r.Handle.UIDBase
		sb.Accelerator = r.Handle.Accelerator
	}
	return sb
}
