package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

func TestEvents(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	for _, id := range []string{"e1", "e2"} {
		if err := s.CreateSandbox(ctx, &SandboxRecord{ID: id, Tenant: "t", State: api.StateRunning}); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 5; i++ {
		if err := s.AddEvent(ctx, Event{SandboxID: "e1", Time: t0.Add(time.Duration(i) * time.Second), Kind: "state", Message: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddEvent(ctx, Event{SandboxID: "e2", Kind: "created"}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		id    string
		limit int
		want  []string
	}{
		{"all", "e1", 0, []string{"0", "1", "2", "3", "4"}},
		{"last two, oldest first", "e1", 2, []string{"3", "4"}},
		{"limit above count", "e1", 50, []string{"0", "1", "2", "3", "4"}},
		{"other sandbox", "e2", 0, []string{""}},
		{"unknown sandbox", "zz", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := s.Events(ctx, tt.id, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range evs {
				got = append(got, e.Message)
				if e.SandboxID != tt.id || e.ID == 0 || e.Time.IsZero() {
					t.Errorf("bad event %+v", e)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	evs, _ := s.Events(ctx, "e1", 1)
	if want := t0.Add(4 * time.Second); !evs[0].Time.Equal(want) {
		t.Errorf("event time %v, want %v", evs[0].Time, want)
	}

	if err := s.AddEvent(ctx, Event{SandboxID: "ghost", Kind: "x"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("AddEvent(unknown sandbox) = %v, want ErrNotFound", err)
	}
	if err := s.AddEvent(ctx, Event{SandboxID: "e1"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("AddEvent(no kind) = %v, want ErrInvalidArgument", err)
	}

	// Deleting a sandbox deletes its events.
	if err := s.DeleteSandbox(ctx, "e1"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.r.QueryRowContext(ctx, "SELECT count(*) FROM events WHERE sandbox_id = 'e1'").Scan(&n); err != nil || n != 0 {
		t.Errorf("events left after delete: %d, %v", n, err)
	}
}
