package sandbox

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// ReleaseSnapshot removes a snapshot nothing stacks on at once; one that
// sandboxes stack on becomes internal and goes with the last of them
// (what a fleet gateway does with a spread fork's snapshots); another
// tenant's is not found.
func TestReleaseSnapshot(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	s := h.start()
	ctx := context.Background()
	sb := create(t, s, nil)
	unused, err := s.Snapshot(ctx, acme, sb.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if kept, err := s.ReleaseSnapshot(ctx, acme, unused.ID); err != nil || kept != nil {
		t.Fatalf("release of an unused snapshot: kept %+v, %v; want it removed", kept, err)
	}
	if _, err := s.GetSnapshot(ctx, acme, unused.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("an unused snapshot released: %v, want not found", err)
	}

	used, err := s.Snapshot(ctx, acme, sb.ID, "kept")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReleaseSnapshot(ctx, tenancy.Only("other"), used.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant's release: %v, want not found", err)
	}
	k1 := create(t, s, &api.CreateSandboxRequest{Snapshot: used.ID})
	k2 := create(t, s, &api.CreateSandboxRequest{Snapshot: used.ID})
	if kept, err := s.ReleaseSnapshot(ctx, acme, used.ID); err != nil || kept == nil || !kept.Internal {
		t.Fatalf("release of a snapshot 2 sandboxes stack on: kept %+v, %v; want it kept, internal", kept, err)
	}
	got, err := s.GetSnapshot(ctx, acme, used.ID)
	if err != nil || !got.Internal {
		t.Fatalf("a released snapshot in use: %+v, %v; want it internal", got, err)
	}
	if err := s.Destroy(ctx, acme, k1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSnapshot(ctx, acme, used.ID); err != nil {
		t.Errorf("a released snapshot with one sandbox left on it: %v, want kept", err)
	}
	if err := s.Destroy(ctx, acme, k2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSnapshot(ctx, acme, used.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a released snapshot after its last sandbox: %v, want not found", err)
	}
	if left, _ := h.pool.ListSnapshots(); slices.Contains(left, used.ID) {
		t.Errorf("the released snapshot's layer is left: %v", left)
	}
}
