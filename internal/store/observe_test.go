package store

import (
	"context"
	"testing"

	"github.com/agentbox/agentbox/api"
)

// The observer sees every committed sandbox write with the state before
// it, and nothing of a write that failed.
func TestObserveSandboxes(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	type seen struct{ prev, state, id string }
	var got []seen
	s.ObserveSandboxes(func(prev string, rec *SandboxRecord) { got = append(got, seen{prev, rec.State, rec.ID}) })
	if err := s.CreateSandbox(ctx, sampleRecord("o1")); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateSandbox(ctx, "o1", func(r *SandboxRecord) error { r.State = api.StateRunning; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSandbox(ctx, sampleRecord("o2")); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateSandboxes(ctx, []string{"o1", "o2"}, func(r *SandboxRecord) error { r.State = api.StatePaused; return nil }); err != nil {
		t.Fatal(err)
	}
	_ = s.UpdateSandbox(ctx, "missing", func(r *SandboxRecord) error { return nil })
	want := []seen{
		{"", api.StateCreating, "o1"},
		{api.StateCreating, api.StateRunning, "o1"},
		{"", api.StateCreating, "o2"},
		{api.StateRunning, api.StatePaused, "o1"},
		{api.StateCreating, api.StatePaused, "o2"},
	}
	if len(got) != len(want) {
		t.Fatalf("observed %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("write %d: observed %+v, want %+v", i, got[i], want[i])
		}
	}
}
