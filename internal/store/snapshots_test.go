package store

import (
	"context"
	"errors"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// TestSnapshotDependencies: a snapshot cannot be deleted while a live
// sandbox or another snapshot stacks on it, and a sandbox cannot be made
// from a snapshot that is not ready or gone.
func TestSnapshotDependencies(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	snap := &SnapshotRecord{ID: "s1", Name: "one", Tenant: "t", State: SnapshotCreating, Lowers: []string{"/a", "/b"}}
	if err := s.CreateSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	sb := &SandboxRecord{ID: "b1", Tenant: "t", State: api.StateCreating, Snapshot: "s1", Lowers: []string{"/a", "/b"}}
	if err := s.CreateSandboxFromSnapshot(ctx, sb); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("sandbox from a snapshot still creating: %v; want not found", err)
	}
	if err := s.FinishSnapshot(ctx, "s1", 42); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSandboxFromSnapshot(ctx, sb); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSandbox(ctx, "b1")
	if err != nil || got.Snapshot != "s1" || len(got.Lowers) != 2 {
		t.Fatalf("sandbox lineage: %+v, %v", got, err)
	}
	if err := s.CreateSnapshot(ctx, &SnapshotRecord{ID: "s2", Name: "one", Tenant: "t", State: SnapshotReady}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("duplicate name: %v", err)
	}
	if err := s.CreateSnapshot(ctx, &SnapshotRecord{ID: "s3", Tenant: "t", State: SnapshotReady, Parent: "s1"}); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"s1", "one"} {
		r, err := s.GetSnapshot(ctx, tenancy.Only("t"), ref)
		if err != nil || r.ID != "s1" || r.SizeBytes != 42 {
			t.Fatalf("get %s: %+v, %v", ref, r, err)
		}
	}
	if _, err := s.GetSnapshot(ctx, tenancy.Only("other"), "one"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("another tenant's snapshot: %v", err)
	}
	if err := s.DeleteSnapshot(ctx, "s1"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("delete in use: %v; want failed precondition", err)
	}
	if err := s.DeleteSnapshot(ctx, "s3"); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateSandboxes(ctx, []string{"b1"}, func(r *SandboxRecord) error { r.State = api.StateDestroyed; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSnapshot(ctx, "s1"); err != nil {
		t.Fatalf("delete once nothing depends on it: %v", err)
	}
}
