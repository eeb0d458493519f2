package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/store"
)

// An in-memory host for the lifecycle unit tests: a driver whose
// sandboxes are records in a map, and a storage pool whose layers are
// plain directories. The service under test is the real one, on a real
// store (SQLite in a temp dir); only what needs root is replaced. The real
// drivers and pool are tested by their own suites and by integration/.

// fakeDriver is an isolation tier with no isolation: Create records a
// sandbox, Destroy forgets it. It can pause (a flag) and survives a
// "daemon restart" (a new Service on the same fakeDriver re-adopts what
// it holds); crash makes a sandbox's init exit.
type fakeDriver struct {
	mu    sync.Mutex
	boxes map[string]*fakeBox // by handle id
	// standbys are standby inits not yet promoted, by pid (fakeStandbyDriver).
	standbys map[int]*fakeBox
	pid      int
	// failCreate, when set, makes Create fail with it; failAfter > 0
	// makes it fail only once that many Creates succeeded.
	failCreate error
	failAfter  int
	// created counts Create calls.
	created int
}

type fakeBox struct {
	h      *driver.Handle
	exited chan struct{}
	paused bool
	spec   driver.Spec
	// restoredFrom is the checkpoint it was restored from ("": created).
	restoredFrom string
}

var (
	_ driver.Driver = (*fakeDriver)(nil)
	_ driver.Pauser = (*fakeDriver)(nil)
)

func newFakeDriver() *fakeDriver {
	return &fakeDriver{boxes: map[string]*fakeBox{}, standbys: map[int]*fakeBox{}, pid: 1000}
}

func (d *fakeDriver) Name() string { return "fake" }

func (d *fakeDriver) Create(ctx context.Context, spec *driver.Spec) (*driver.Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.created++
	if d.failCreate != nil && d.created > d.failAfter {
		return nil, d.failCreate
	}
	if spec.RunDir == "" || spec.UpperDir == "" {
		return nil, fmt.Errorf("fake: spec without run dir or layer: %+v", spec)
	}
	if _, err := os.Stat(spec.UpperDir); err != nil {
		return nil, fmt.Errorf("fake: writable layer: %w", err)
	}
	d.pid++
	h := &driver.Handle{ID: spec.ID, Pid: d.pid, PidStart: uint64(d.pid)}
	d.boxes[spec.ID] = &fakeBox{h: h, exited: make(chan struct{}), spec: *spec}
	return h, nil
}

// box is the live sandbox h names, nil when it is gone or h is stale.
func (d *fakeDriver) boxLocked(h *driver.Handle) *fakeBox {
	if h == nil {
		return nil
	}
	b := d.boxes[h.ID]
	if b == nil || b.h.Pid != h.Pid {
		return d.standbys[h.Pid]
	}
	return b
}

func (d *fakeDriver) DialGuest(ctx context.Context, h *driver.Handle) (net.Conn, error) {
	return nil, errdefs.Unavailable("the fake driver runs no guest agent")
}

func (d *fakeDriver) Exited(h *driver.Handle) <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b := d.boxLocked(h); b != nil {
		return b.exited
	}
	c := make(chan struct{})
	close(c)
	return c
}

func (d *fakeDriver) Destroy(ctx context.Context, h *driver.Handle) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b := d.boxLocked(h); b != nil {
		d.removeLocked(b)
	}
	return nil
}

func (d *fakeDriver) removeLocked(b *fakeBox) {
	select {
	case <-b.exited:
	default:
		close(b.exited)
	}
	if d.boxes[b.h.ID] == b {
		delete(d.boxes, b.h.ID)
	}
	delete(d.standbys, b.h.Pid)
}

func (d *fakeDriver) Adopt(ctx context.Context, h *driver.Handle) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.boxLocked(h) == nil {
		return errdefs.NotFound("sandbox %s did not survive", h.ID)
	}
	return nil
}

func (d *fakeDriver) Cleanup(ctx context.Context, keep map[string]bool) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var removed []string
	for id, b := range d.boxes {
		if !keep[id] {
			d.removeLocked(b)
			removed = append(removed, "sandbox "+id)
		}
	}
	return removed, nil
}

func (d *fakeDriver) Pause(ctx context.Context, h *driver.Handle) error {
	return d.setPaused(h, true)
}

func (d *fakeDriver) Resume(ctx context.Context, h *driver.Handle) error {
	return d.setPaused(h, false)
}

func (d *fakeDriver) setPaused(h *driver.Handle, p bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.boxLocked(h)
	if b == nil {
		return errdefs.NotFound("sandbox %s is gone", h.ID)
	}
	b.paused = p
	return nil
}

// fakeMemDriver is the fake tier with memory snapshots ("fakemem"): a
// checkpoint is a file naming the sandbox it saved, a restore a new box
// that remembers it. It shares the boxes of the fakeDriver it wraps.
type fakeMemDriver struct{ *fakeDriver }

var _ driver.Checkpointer = fakeMemDriver{}

func (d fakeMemDriver) Name() string { return "fakemem" }

const fakeCheckpointFile = "fake-memory"

func (d fakeMemDriver) Checkpoint(ctx context.Context, h *driver.Handle, dir string, opts driver.CheckpointOptions) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.boxLocked(h)
	if b == nil {
		return errdefs.NotFound("sandbox %s is gone", h.ID)
	}
	if opts.Frozen != nil {
		if err := opts.Frozen(); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, fakeCheckpointFile), []byte(h.ID), 0o600); err != nil {
		return err
	}
	if !opts.LeaveRunning {
		d.removeLocked(b) // its init stops once saved
	}
	return nil
}

func (d fakeMemDriver) Restore(ctx context.Context, spec *driver.Spec, dir string) (*driver.Handle, error) {
	if _, err := os.Stat(filepath.Join(dir, fakeCheckpointFile)); err != nil {
		return nil, fmt.Errorf("fake: no checkpoint in %s: %w", dir, err)
	}
	h, err := d.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.boxes[spec.ID].restoredFrom = dir
	d.mu.Unlock()
	return h, nil
}

// restoredFrom is the checkpoint sandbox id was restored from ("" when
// it was created, or is gone).
func (d *fakeDriver) restoredFrom(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b := d.boxes[id]; b != nil {
		return b.restoredFrom
	}
	return ""
}

// fakeStandbyDriver is the fake tier that boots a sandbox's next init
// ahead ("fakeready", driver.Standby): resets after the first switch to
// it. It shares the boxes of the fakeDriver it wraps.
type fakeStandbyDriver struct{ *fakeDriver }

var _ driver.Standby = fakeStandbyDriver{}

func (d fakeStandbyDriver) Name() string { return "fakeready" }

func (d fakeStandbyDriver) Prepare(ctx context.Context, spec *driver.Spec) (*driver.Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.created++
	if d.failCreate != nil && d.created > d.failAfter {
		return nil, d.failCreate
	}
	if d.boxes[spec.ID] == nil {
		return nil, fmt.Errorf("fake: standby for %s, which does not run", spec.ID)
	}
	d.pid++
	h := &driver.Handle{ID: spec.ID, Pid: d.pid, PidStart: uint64(d.pid)}
	d.standbys[d.pid] = &fakeBox{h: h, exited: make(chan struct{}), spec: *spec}
	return h, nil
}

func (d fakeStandbyDriver) Promote(ctx context.Context, cur, next *driver.Handle) (<-chan struct{}, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	nb := d.standbys[next.Pid]
	if nb == nil {
		return nil, fmt.Errorf("fake: standby %d is gone", next.Pid)
	}
	if cb := d.boxLocked(cur); cb != nil {
		d.removeLocked(cb)
	}
	delete(d.standbys, next.Pid)
	d.boxes[next.ID] = nb
	gone := make(chan struct{})
	close(gone)
	return gone, nil
}

func (d fakeStandbyDriver) Discard(ctx context.Context, next *driver.Handle) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b := d.standbys[next.Pid]; b != nil {
		d.removeLocked(b)
	}
	return nil
}

// standbyCount is the number of standby inits not yet promoted.
func (d *fakeDriver) standbyCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.standbys)
}

// crash makes the init of sandbox id exit, as a kill -9 would.
func (d *fakeDriver) crash(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b := d.boxes[id]; b != nil {
		d.removeLocked(b)
	}
}

// reboot forgets every sandbox, as a host reboot would, without closing
// their exit channels (no daemon watches them any more).
func (d *fakeDriver) reboot() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.boxes = map[string]*fakeBox{}
}

// running lists the ids of the sandboxes the driver holds.
func (d *fakeDriver) running() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []string
	for id := range d.boxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (d *fakeDriver) isPaused(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.boxes[id]
	return b != nil && b.paused
}

// fakePool is a storage pool whose layers and snapshots are directories
// under a temp dir, with one template, "base".
type fakePool struct {
	root string
	mu   sync.Mutex
	tpls map[string]*storage.Template
}

var _ layerStore = (*fakePool)(nil)

func newFakePool(t *testing.T) *fakePool {
	root := t.TempDir()
	rootfs := filepath.Join(root, "templates", "base")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"sandboxes", "snapshots"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tpl := &storage.Template{Name: "base", Version: "1", Rootfs: rootfs, Env: map[string]string{"PATH": "/bin"}}
	return &fakePool{root: root, tpls: map[string]*storage.Template{"base": tpl}}
}

func (p *fakePool) Template(name string) (*storage.Template, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.tpls[name]; t != nil {
		return t, nil
	}
	return nil, errdefs.NotFound("template %q not found", name)
}

func (p *fakePool) TemplateFor(ctx context.Context, name string) (*storage.Template, error) {
	return p.Template(name)
}

func (p *fakePool) TemplateVersion(name, version string) (*storage.Template, error) {
	t, err := p.Template(name)
	if err != nil || t.Version != version {
		return nil, errdefs.NotFound("template %s@%s not found", name, version)
	}
	return t, nil
}

func (p *fakePool) layerDir(id string) string { return filepath.Join(p.root, "sandboxes", id) }

func (p *fakePool) CreateLayer(ctx context.Context, id string, diskMB int64, lowers []string) (upper, work string, err error) {
	dir := p.layerDir(id)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("fake pool: %w", err)
	}
	upper, work = filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return "", "", err
		}
	}
	return upper, work, nil
}

func (p *fakePool) LayerPaths(id string) (upper, work string, err error) {
	dir := p.layerDir(id)
	if _, err := os.Stat(dir); err != nil {
		return "", "", errdefs.NotFound("layer of %s: %v", id, err)
	}
	return filepath.Join(dir, "upper"), filepath.Join(dir, "work"), nil
}

func (p *fakePool) RemoveLayer(ctx context.Context, id string) error {
	return os.RemoveAll(p.layerDir(id))
}

func (p *fakePool) ListLayers() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(p.root, "sandboxes"))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		ids = append(ids, e.Name())
	}
	return ids, nil
}

func (p *fakePool) ExchangeLayers(a, b string) error {
	tmp := p.layerDir(a + ".swap")
	if err := os.Rename(p.layerDir(a), tmp); err != nil {
		return err
	}
	if err := os.Rename(p.layerDir(b), p.layerDir(a)); err != nil {
		return err
	}
	return os.Rename(tmp, p.layerDir(b))
}

func (p *fakePool) snapDir(id string) string { return filepath.Join(p.root, "snapshots", id) }

func (p *fakePool) SnapshotUpper(snapID string) string {
	return filepath.Join(p.snapDir(snapID), "upper")
}

// SnapshotLayer copies the names (not the contents) of the files in
// sandbox id's upper dir: enough to tell layers apart.
func (p *fakePool) SnapshotLayer(ctx context.Context, id, snapID string) (int64, error) {
	src := filepath.Join(p.layerDir(id), "upper")
	dst := p.SnapshotUpper(snapID)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return 0, err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return 0, err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return 0, err
		}
	}
	return int64(len(ents)), nil
}

func (p *fakePool) RemoveSnapshot(ctx context.Context, snapID string) error {
	return os.RemoveAll(p.snapDir(snapID))
}

func (p *fakePool) ListSnapshots() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(p.root, "snapshots"))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		ids = append(ids, e.Name())
	}
	return ids, nil
}

func (p *fakePool) GCLayers(ctx context.Context, inUse map[string]bool) ([]string, error) {
	return nil, nil
}

// layers lists the sandbox layers the pool holds.
func (p *fakePool) layers(t *testing.T) []string {
	t.Helper()
	ids, err := p.ListLayers()
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// host is one fake machine: a store file, a driver and a pool that
// outlive the services started on them (a daemon restart is a new
// service on the same host).
type host struct {
	t    *testing.T
	cfg  config.Config
	st   *store.Store
	drv  *fakeDriver
	pool *fakePool
}

func newHost(t *testing.T) *host {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.RunDir = filepath.Join(dir, "run")
	cfg.DefaultIsolation = "fake"
	cfg.ReapInterval = 10 * time.Millisecond
	cfg.PrespawnInits = 0
	cfg.Limits.TTL = 0 // no bound: a sandbox may have no TTL
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), cfg.StatePath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &host{t: t, cfg: cfg, st: st, drv: newFakeDriver(), pool: newFakePool(t)}
}

// start starts a service (a daemon) on h; the test's end closes it.
func (h *host) start() *Service {
	h.t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	cfg := h.cfg
	drivers := map[string]driver.Driver{"fake": h.drv, "fakemem": fakeMemDriver{h.drv}, "fakeready": fakeStandbyDriver{h.drv}}
	s := New(Options{Config: &cfg, Store: h.st, Drivers: drivers, Logger: log})
	s.pool, s.standby.pool = h.pool, h.pool // the service's, and its collaborators'
	if err := s.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(s.Close)
	return s
}

// state is sandbox id's recorded state.
func (h *host) state(id string) string {
	h.t.Helper()
	rec, err := h.st.GetSandbox(context.Background(), id)
	if err != nil {
		h.t.Fatalf("sandbox %s: %v", id, err)
	}
	return rec.State
}

// waitState waits (generously: never a verdict on speed) for sandbox id
// to be recorded in state want.
func (h *host) waitState(id, want string) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := h.state(id)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("sandbox %s is %s, want %s", id, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// leftNothing checks that nothing of sandbox id is left on the host: no
// init, no layer, no run dir.
func (h *host) leftNothing(id string) {
	h.t.Helper()
	if slices.Contains(h.drv.running(), id) {
		h.t.Errorf("sandbox %s still runs", id)
	}
	if slices.Contains(h.pool.layers(h.t), id) {
		h.t.Errorf("sandbox %s's layer is left", id)
	}
	if _, err := os.Stat(filepath.Join(h.cfg.RunDir, "sandboxes", id)); !errors.Is(err, os.ErrNotExist) {
		h.t.Errorf("sandbox %s's run dir is left (%v)", id, err)
	}
}

// errClass is the errdefs class of err, for messages.
func errClass(err error) string {
	if err == nil {
		return "nil"
	}
	code, _ := errdefs.Code(err)
	return code + ": " + strings.TrimSpace(err.Error())
}
