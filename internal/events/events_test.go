package events

import (
	"fmt"
	"testing"
)

func TestSubscribersGetEventsInOrder(t *testing.T) {
	h := New()
	a := h.Subscribe(Filter{AllTenants: true}, 0)
	defer a.Close()
	b := h.Subscribe(Filter{AllTenants: true}, 0)
	defer b.Close()
	var observed []string
	h.Observe(func(e *Event) { observed = append(observed, e.Type) })
	types := []string{Created, Paused, Resumed, Destroyed}
	for _, typ := range types {
		h.Publish(Event{Type: typ, Sandbox: "s1", Tenant: "t"})
	}
	for name, s := range map[string]*Subscription{"a": a, "b": b} {
		<-s.Ready()
		got, dropped := s.Next()
		if dropped != 0 || len(got) != len(types) {
			t.Fatalf("%s: got %d events, %d dropped; want %d, 0", name, len(got), dropped, len(types))
		}
		for i, e := range got {
			if e.Type != types[i] || e.Seq != uint64(i+1) || e.Time.IsZero() {
				t.Errorf("%s: event %d = %+v, want %s with seq %d and a time", name, i, e, types[i], i+1)
			}
		}
	}
	if fmt.Sprint(observed) != fmt.Sprint(types) {
		t.Errorf("observer saw %v, want %v", observed, types)
	}
}

func TestFilter(t *testing.T) {
	tests := []struct {
		name string
		f    Filter
		e    Event
		want bool
	}{
		{"admin sees all", Filter{AllTenants: true}, Event{Tenant: "x"}, true},
		{"admin one tenant", Filter{AllTenants: true, Tenant: "x"}, Event{Tenant: "y"}, false},
		{"tenant own", Filter{Tenant: "x"}, Event{Tenant: "x"}, true},
		{"tenant other", Filter{Tenant: "x"}, Event{Tenant: "y"}, false},
		{"default tenant never sees others", Filter{}, Event{Tenant: "y"}, false},
		{"type", Filter{AllTenants: true, Types: map[string]bool{Created: true}}, Event{Type: Destroyed}, false},
		{"sandbox", Filter{AllTenants: true, Sandbox: "a"}, Event{Sandbox: "b"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f.Match(&tt.e); got != tt.want {
				t.Errorf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

// A subscriber that does not read loses the oldest events, is told how
// many, and never blocks the publisher.
func TestSlowSubscriberDrops(t *testing.T) {
	h := New()
	s := h.Subscribe(Filter{AllTenants: true}, 16)
	defer s.Close()
	for i := 0; i < 100; i++ {
		h.Publish(Event{Type: Created})
	}
	got, dropped := s.Next()
	if len(got) != 16 || dropped != 84 || got[0].Seq != 85 || got[15].Seq != 100 {
		t.Fatalf("got %d events (seq %d..%d), %d dropped; want the last 16 and 84 dropped", len(got), got[0].Seq, got[len(got)-1].Seq, dropped)
	}
	s.Close()
	h.Publish(Event{Type: Created}) // a closed subscription gets nothing
	if got, _ := s.Next(); len(got) != 0 {
		t.Errorf("closed subscription got %d events", len(got))
	}
}

func TestNilHubDrops(t *testing.T) {
	var h *Hub
	h.Publish(Event{Type: Created}) // must not panic
}

// Close ends every stream and refuses new ones.
func TestCloseEndsSubscriptions(t *testing.T) {
	h := New()
	s := h.Subscribe(Filter{AllTenants: true}, 0)
	h.Close()
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed by Close")
	}
	h.Publish(Event{Type: Created})
	if got, _ := s.Next(); len(got) != 0 {
		t.Errorf("a closed hub delivered %d events", len(got))
	}
	select {
	case <-h.Subscribe(Filter{}, 0).Done():
	default:
		t.Error("a subscription after Close is not done")
	}
	h.Close() // twice is fine
}
