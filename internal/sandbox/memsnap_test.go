package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

// ckptHost is a checkpointHost of fixed answers: the checkpoints are
// tested here on their own, without a service.
type ckptHost struct {
	onDisk map[string]bool
	snaps  map[string]*store.SnapshotRecord
	broken bool // snapshotRecord fails (the store is unreadable)
}

func (h *ckptHost) pausedToDisk(id string) bool { return h.onDisk[id] }

func (h *ckptHost) snapshotRecord(ctx context.Context, id string) (*store.SnapshotRecord, error) {
	if h.broken {
		return nil, errors.New("store unreadable")
	}
	if r := h.snaps[id]; r != nil {
		return r, nil
	}
	return nil, errdefs.NotFound("snapshot %s", id)
}

func newCheckpoints(t *testing.T, h checkpointHost) *checkpoints {
	return &checkpoints{root: filepath.Join(t.TempDir(), "checkpoints"), host: h, log: slog.New(slog.DiscardHandler)}
}

// mkCheckpoint makes checkpoint directory dir, whole or not.
func mkCheckpoint(t *testing.T, dir string, whole bool) {
	t.Helper()
	if err := newCheckpointDir(dir); err != nil {
		t.Fatal(err)
	}
	if whole {
		if err := markComplete(dir); err != nil {
			t.Fatal(err)
		}
	}
}

func exists(dir string) bool {
	_, err := os.Stat(dir)
	return err == nil
}

func TestCheckpointsSweep(t *testing.T) {
	t.Parallel()
	h := &ckptHost{
		onDisk: map[string]bool{"ondisk": true, "halfdisk": true},
		snaps: map[string]*store.SnapshotRecord{
			"ready":    {ID: "ready", State: store.SnapshotReady},
			"taking":   {ID: "taking", State: store.SnapshotCreating},
			"halfsnap": {ID: "halfsnap", State: store.SnapshotReady},
		},
	}
	c := newCheckpoints(t, h)
	keep := []string{c.diskDir("ondisk"), c.snapshotDir("ready")}
	for _, d := range keep {
		mkCheckpoint(t, d, true)
	}
	gone := map[string]bool{ // dir: whole
		c.diskDir("halfdisk"):      false, // paused to disk, but its checkpoint is not whole
		c.diskDir("running"):       true,  // the sandbox is not paused to disk
		c.snapshotDir("taking"):    true,  // the snapshot is not ready
		c.snapshotDir("halfsnap"):  false, // ready, but its memory is not whole
		c.snapshotDir("forgotten"): true,  // no such snapshot
	}
	for d, whole := range gone {
		mkCheckpoint(t, d, whole)
	}
	c.sweep(context.Background())
	for _, d := range keep {
		if !exists(d) {
			t.Errorf("sweep removed %s", d)
		}
	}
	for d := range gone {
		if exists(d) {
			t.Errorf("sweep left %s", d)
		}
	}
	// A snapshot the store cannot answer for keeps its memory.
	h.broken = true
	d := c.snapshotDir("unknown")
	mkCheckpoint(t, d, true)
	c.sweep(context.Background())
	if !exists(d) {
		t.Error("sweep removed a snapshot's memory while the store could not say whether it exists")
	}
	// No checkpoints at all: nothing to do.
	newCheckpoints(t, h).sweep(context.Background())
}

func TestCheckpointsCapture(t *testing.T) {
	t.Parallel()
	drv := newFakeDriver()
	mem := fakeMemDriver{drv}
	c := newCheckpoints(t, &ckptHost{})
	ctx := context.Background()
	run := t.TempDir()
	// The fake driver wants a layer and a run dir, as the real ones do.
	h, err := drv.Create(ctx, &driver.Spec{ID: "box", RunDir: run, UpperDir: run})
	if err != nil {
		t.Fatal(err)
	}
	var frozen, done bool
	if err := c.capture(ctx, mem, "box", h, "snap", func() error { frozen = true; return nil }, func() { done = true }); err != nil {
		t.Fatal(err)
	}
	if !frozen || !done {
		t.Errorf("capture: frozen called %v, done called %v; want both", frozen, done)
	}
	if !c.hasMemory("snap") || c.memoryOf("snap", mem) != c.snapshotDir("snap") {
		t.Errorf("after a capture: hasMemory %v, memoryOf %q", c.hasMemory("snap"), c.memoryOf("snap", mem))
	}
	if c.memoryOf("snap", drv) != "" {
		t.Error("memoryOf offers a checkpoint to a driver that cannot restore it")
	}
	// A capture that fails leaves nothing, and says so.
	done = false
	fail := errors.New("disk full")
	err = c.capture(ctx, mem, "box", h, "bad", func() error { return fail }, func() { done = true })
	if !errors.Is(err, fail) || !done {
		t.Errorf("failed capture: %v (done %v), want %v", err, done, fail)
	}
	if exists(c.snapshotDir("bad")) || c.hasMemory("bad") || c.memoryOf("bad", mem) != "" {
		t.Error("a failed capture left its checkpoint")
	}
}
