package sandbox

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/store"
)

// sbHost is a standbyHost without a service: run dirs under root, and a
// spec of the record's lowers and env.
type sbHost struct{ root string }

func (h sbHost) runDir(id string) string { return filepath.Join(h.root, id) }

func (h sbHost) driverSpec(rec *store.SandboxRecord, tpl *storage.Template, upper, work, dir string) *driver.Spec {
	var env []string
	for k, v := range rec.Env {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return &driver.Spec{ID: rec.ID, Layers: rec.Lowers, Env: env, UpperDir: upper, WorkDir: work, RunDir: dir}
}

// TestStandbys drives the standby collaborator on its own, on the fake
// driver and pool: boot, hand over to a reset, clean up after it, and
// the ways a standby is not used.
func TestStandbys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newFakePool(t)
	fd := newFakeDriver()
	drv := fakeStandbyDriver{fd}
	h := sbHost{root: t.TempDir()}
	var wg sync.WaitGroup
	st := &standbys{host: h, pool: pool, log: slog.New(slog.DiscardHandler), wg: &wg}

	// The sandbox: its layer, run dir and init.
	rec := &store.SandboxRecord{ID: "box", Lowers: []string{"/lower"}, Env: map[string]string{"A": "1"}}
	upper, work, err := pool.CreateLayer(ctx, "box", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(h.runDir("box"), 0o711); err != nil {
		t.Fatal(err)
	}
	old, err := drv.Create(ctx, h.driverSpec(rec, nil, upper, work, h.runDir("box")))
	if err != nil {
		t.Fatal(err)
	}
	old.Socket = filepath.Join(h.runDir("box"), "guest.sock")
	e := &entry{id: "box", drv: drv}
	e.hp.Store(old)
	prepared := func() {
		t.Helper()
		p := e.sb.preparing.Load()
		if p == nil {
			t.Fatal("prepare started nothing")
		}
		<-*p
	}
	key := func() string { return specKey(h.driverSpec(rec, nil, "", "", "")) }

	st.prepare(e, rec, nil, 0)
	prepared()
	if e.sb.next == nil || fd.standbyCount() != 1 || !slices.Contains(pool.layers(t), "box.next-0") {
		t.Fatalf("after prepare: next %v, %d standbys, layers %v", e.sb.next, fd.standbyCount(), pool.layers(t))
	}
	// A reset to another place does not take it.
	if nx := st.take(e, func() string { return key() + "other" }); nx != nil || e.sb.next == nil {
		t.Fatal("a standby booted for another place was taken")
	}
	nx := st.take(e, key)
	if nx == nil || e.sb.next != nil {
		t.Fatal("the standby was not taken")
	}
	gone, err := st.promote(ctx, e, old, nx)
	if err != nil {
		t.Fatal(err)
	}
	if fd.standbyCount() != 0 || !slices.Contains(fd.running(), "box") {
		t.Fatalf("after promote: %d standbys, running %v", fd.standbyCount(), fd.running())
	}
	// The reset exchanges the layers; retire removes the old one.
	if err := pool.ExchangeLayers("box", nx.layer); err != nil {
		t.Fatal(err)
	}
	st.retire("box", old, nx, gone)
	wg.Wait()
	if got := pool.layers(t); !slices.Equal(got, []string{"box"}) {
		t.Errorf("after retire: layers %v, want [box]", got)
	}

	// One booted for a generation that is gone is discarded.
	e.gen = 2
	st.prepare(e, rec, nil, 1)
	prepared()
	if e.sb.next != nil || fd.standbyCount() != 0 || len(pool.layers(t)) != 1 {
		t.Errorf("a stale prepare left next %v, %d standbys, layers %v", e.sb.next, fd.standbyCount(), pool.layers(t))
	}

	// None is booted for a sandbox paused before the prepare ran: it
	// would be frozen mid-boot.
	e.paused.Store(true)
	st.prepare(e, rec, nil, 2)
	prepared()
	if e.sb.next != nil || fd.standbyCount() != 0 || len(pool.layers(t)) != 1 {
		t.Errorf("a prepare for a paused sandbox left next %v, %d standbys, layers %v", e.sb.next, fd.standbyCount(), pool.layers(t))
	}
	e.paused.Store(false)

	// drop discards the standby and what it was booted on.
	st.prepare(e, rec, nil, 2)
	prepared()
	e.op.Lock()
	if e.sb.next == nil {
		e.op.Unlock()
		t.Fatal("no standby to drop")
	}
	dir := e.sb.next.runDir
	st.drop(ctx, e)
	e.op.Unlock()
	if e.sb.next != nil || fd.standbyCount() != 0 || len(pool.layers(t)) != 1 {
		t.Errorf("after drop: next %v, %d standbys, layers %v", e.sb.next, fd.standbyCount(), pool.layers(t))
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("after drop, the standby's run dir %s: %v", dir, err)
	}

	// removeLayers removes this sandbox's standby layers only.
	for _, l := range []string{"box.next-7", "other.next-1"} {
		if _, _, err := pool.CreateLayer(ctx, l, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.removeLayers(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	if got := pool.layers(t); !slices.Equal(got, []string{"box", "other.next-1"}) {
		t.Errorf("after removeLayers: %v", got)
	}
}

// TestStandbysNone: a driver without standby inits boots none.
func TestStandbysNone(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	st := &standbys{host: sbHost{root: t.TempDir()}, pool: newFakePool(t), log: slog.New(slog.DiscardHandler), wg: &wg}
	e := &entry{id: "box", drv: newFakeDriver()}
	st.prepare(e, &store.SandboxRecord{ID: "box"}, nil, 0)
	wg.Wait()
	if e.sb.preparing.Load() != nil || st.take(e, func() string { return "" }) != nil {
		t.Error("a standby was prepared on a driver without driver.Standby")
	}
}
