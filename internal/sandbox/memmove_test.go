package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/storage"
)

// fakeCheckDriver is a fakeMemDriver whose checkpoints are checked with
// err (a CheckpointChecker).
type fakeCheckDriver struct {
	fakeMemDriver
	err error
}

func (d fakeCheckDriver) CheckCheckpoint(dir string) error { return d.err }

var _ driver.CheckpointChecker = fakeCheckDriver{}

// TestMemoryLanding: a snapshot's memory is refused before anything lands
// on a node without its tier, a tier that cannot check checkpoints, or
// with a bad file list; it is refused once received when it does not fit
// what the quota leaves or the driver finds the host differs (nothing of
// it left); else it lands whole and its bytes are counted.
func TestMemoryLanding(t *testing.T) {
	files := []storage.SnapshotFile{{Name: "checkpoint.img", Size: 60}}
	s := &Service{drivers: map[string]driver.Driver{
		"container": newFakeDriver(),
		"fakemem":   fakeMemDriver{newFakeDriver()},
		"checked":   fakeCheckDriver{fakeMemDriver: fakeMemDriver{newFakeDriver()}},
		"other":     fakeCheckDriver{fakeMemDriver: fakeMemDriver{newFakeDriver()}, err: errdefs.Precondition("runsc differs")},
	}}
	s.ckpt.root = t.TempDir()
	if d, err := s.memoryTier(nil, "container"); d != nil || err != nil {
		t.Errorf("no memory: %v %v", d, err)
	}
	for name, c := range map[string]struct {
		m    SnapshotMemory
		iso  string
		want error
	}{
		"no such tier":   {SnapshotMemory{Isolation: "gvisor", Files: files}, "gvisor", errdefs.ErrFailedPrecondition},
		"no checkpoints": {SnapshotMemory{Isolation: "container", Files: files}, "container", errdefs.ErrFailedPrecondition},
		"no checker":     {SnapshotMemory{Isolation: "fakemem", Files: files}, "fakemem", errdefs.ErrFailedPrecondition},
		"other tier":     {SnapshotMemory{Isolation: "checked", Files: files}, "fakemem", errdefs.ErrInvalidArgument},
		"bad name":       {SnapshotMemory{Isolation: "checked", Files: []storage.SnapshotFile{{Name: "../x"}}}, "checked", errdefs.ErrInvalidArgument},
		"reserved name":  {SnapshotMemory{Isolation: "checked", Files: []storage.SnapshotFile{{Name: completeMarker}}}, "checked", errdefs.ErrInvalidArgument},
	} {
		if _, err := s.memoryTier(&c.m, c.iso); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	m := &SnapshotMemory{Isolation: "checked", Files: files}
	drv, err := s.memoryTier(m, "checked")
	if err != nil {
		t.Fatal(err)
	}
	receive := func(dir string) error {
		return storage.ReceiveSnapshotFile(dir, files[0], strings.NewReader(strings.Repeat("m", 60)))
	}
	// 100 bytes left, 50 of them taken by the layers: 60 do not fit.
	ctx := storage.WithMaxBytes(context.Background(), 100)
	if _, err := s.landMemory(ctx, "snap1", m, drv, 50, receive); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("over the quota: %v", err)
	}
	if _, err := s.landMemory(context.Background(), "snap2", m, s.drivers["other"], 0, receive); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "runsc differs") {
		t.Errorf("a checkpoint of another host: %v", err)
	}
	for _, id := range []string{"snap1", "snap2"} {
		if _, err := os.Stat(s.ckpt.snapshotDir(id)); !os.IsNotExist(err) {
			t.Errorf("%s: a refused memory left %v", id, err)
		}
	}
	n, err := s.landMemory(storage.WithMaxBytes(context.Background(), 200), "snap3", m, drv, 50, receive)
	if err != nil || n != 60 {
		t.Fatalf("landing: %d, %v", n, err)
	}
	if !s.ckpt.hasMemory("snap3") {
		t.Error("the landed memory is not whole")
	}
	if b, _ := os.ReadFile(filepath.Join(s.ckpt.snapshotDir("snap3"), "checkpoint.img")); len(b) != 60 {
		t.Errorf("checkpoint.img is %d bytes", len(b))
	}
}
