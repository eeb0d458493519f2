package storage

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

func TestSnapshotIoctlLayout(t *testing.T) {
	// From <linux/btrfs.h> (kernel 6.18): sizeof(struct
	// btrfs_ioctl_vol_args_v2) and BTRFS_IOC_SNAP_CREATE_V2.
	if got := unsafe.Sizeof(btrfsVolArgsV2{}); got != 4096 {
		t.Errorf("sizeof vol_args_v2 = %d, want 4096", got)
	}
	if iocSnapCreateV2 != 0x50009417 {
		t.Errorf("BTRFS_IOC_SNAP_CREATE_V2 = %#x, want 0x50009417", iocSnapCreateV2)
	}
}

// TestSnapshotLayer: a snapshot holds the layer's files as they were, is
// read-only, does not change when the layer does, and goes away whole.
func TestSnapshotLayer(t *testing.T) {
	requireBtrfs(t)
	p, _ := newTestPool(t)
	ctx := context.Background()
	upper, _, err := p.CreateLayer(ctx, "src", 64, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.RemoveLayer(ctx, "src")
	if err := os.WriteFile(filepath.Join(upper, "f"), []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SnapshotLayer(ctx, "src", "snap1"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(upper, "f"), []byte("after"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(p.SnapshotUpper("snap1"), "f"))
	if err != nil || string(got) != "before" {
		t.Fatalf("snapshot's file: %q, %v; want before", got, err)
	}
	if !p.SnapshotReadOnly("snap1") {
		t.Error("snapshot is not read-only")
	}
	if err := os.WriteFile(filepath.Join(p.SnapshotUpper("snap1"), "g"), nil, 0o644); err == nil {
		t.Error("wrote into a snapshot")
	}
	if ids, _ := p.ListSnapshots(); len(ids) != 1 || ids[0] != "snap1" {
		t.Errorf("ListSnapshots = %v", ids)
	}
	if _, err := p.SnapshotLayer(ctx, "src", "snap1"); err == nil {
		t.Error("a second snapshot with the same id succeeded")
	}
	if _, err := p.SnapshotLayer(ctx, "missing", "snap2"); err == nil {
		t.Error("snapshot of a missing layer succeeded")
	}
	if err := p.RemoveSnapshot(ctx, "snap1"); err != nil {
		t.Fatal(err)
	}
	if err := p.RemoveSnapshot(ctx, "snap1"); err != nil {
		t.Fatalf("removing twice: %v", err)
	}
	if ids, _ := p.ListSnapshots(); len(ids) != 0 {
		t.Errorf("after remove: %v", ids)
	}
}
