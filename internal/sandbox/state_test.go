package sandbox

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

func TestSetState(t *testing.T) {
	tests := []struct {
		from, to string
		ok       bool
	}{
		{api.StateCreating, api.StateRunning, true},
		{api.StateRunning, api.StatePaused, true},
		{api.StatePaused, api.StateRunning, true},
		{api.StateRunning, api.StateRunning, true}, // a reset's new handle
		{api.StateStopped, api.StateRunning, true},
		{api.StateDestroying, api.StateDestroyed, true},
		{api.StateFailed, api.StateDestroyed, true},
		{api.StateDestroyed, api.StateDestroyed, true},
		{api.StateDestroyed, api.StateRunning, false},
		{api.StateDestroyed, api.StateFailed, false},
		{api.StateFailed, api.StateRunning, false},
		{api.StateStopped, api.StatePaused, false},
		{api.StateCreating, api.StatePaused, false},
		{api.StateDestroying, api.StateRunning, false},
		{"bogus", "bogus", false},
	}
	for _, tt := range tests {
		t.Run(tt.from+"->"+tt.to, func(t *testing.T) {
			r := &store.SandboxRecord{ID: "x", State: tt.from}
			err := setState(r, tt.to)
			if got := err == nil; got != tt.ok {
				t.Fatalf("setState(%s -> %s) = %v, want ok=%v", tt.from, tt.to, err, tt.ok)
			}
			if tt.ok {
				if r.State != tt.to {
					t.Errorf("state = %s, want %s", r.State, tt.to)
				}
				return
			}
			if r.State != tt.from {
				t.Errorf("a refused move changed the state to %s", r.State)
			}
			if !errors.Is(err, ErrInvalidTransition) || !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Errorf("error %v is not an ErrInvalidTransition and a failed precondition", err)
			}
		})
	}
}

// TestTransitionTableDocumented checks that docs/ARCHITECTURE.md shows
// the transition table the code enforces.
func TestTransitionTableDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) != 4 || cells[0] != "" || cells[3] != "" {
			continue
		}
		from := strings.TrimSpace(cells[1])
		if _, ok := transitions[from]; !ok {
			continue
		}
		var to []string
		if v := strings.TrimSpace(cells[2]); v != "(none)" {
			for _, s := range strings.Split(v, ",") {
				to = append(to, strings.TrimSpace(s))
			}
		}
		doc[from] = to
	}
	for from, want := range transitions {
		got, ok := doc[from]
		if !ok {
			t.Errorf("docs/ARCHITECTURE.md has no row for %s", from)
			continue
		}
		if !slices.Equal(got, want) {
			t.Errorf("docs/ARCHITECTURE.md: %s may become %v; the code says %v", from, got, want)
		}
	}
}
