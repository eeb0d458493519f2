package sandbox

import (
	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/store"
)

// PublishEvents makes the service publish its sandboxes' lifecycle events
// to h. Most come from the store's record writes (a state change is an
// event); the rest (snapshotted, reset, expired, quota_rejected) from one
// emit call where they happen. Call it before Start.
func (s *Service) PublishEvents(h *events.Hub) {
	s.events = h
	s.st.ObserveSandboxes(s.noteRecord)
}

// noteRecord turns a sandbox record write into the event it means, if
// any (store.SandboxObserver).
func (s *Service) noteRecord(prev string, rec *store.SandboxRecord) {
	if s.events == nil || prev == rec.State {
		return
	}
	typ, detail := "", ""
	switch rec.State {
	case api.StateRunning:
		switch prev {
		case "", api.StateCreating:
			typ = events.Created
			if rec.Parent != "" {
				typ, detail = events.Forked, "parent "+rec.Parent
			}
		case api.StatePaused, api.StateStopped:
			typ = events.Resumed
		}
	case api.StatePaused:
		typ = events.Paused
	case api.StateStopped:
		typ, detail = events.Stopped, rec.Error
	case api.StateDestroyed:
		typ = events.Destroyed
	case api.StateFailed:
		typ, detail = events.Failed, rec.Error
	}
	if typ == "" {
		return
	}
	s.events.Publish(events.Event{Type: typ, Sandbox: rec.ID, Tenant: rec.Tenant,
		Template: rec.Template, Isolation: rec.Isolation, Detail: detail})
}

// emit publishes an event about sandbox id (or none: "") of tenant.
func (s *Service) emit(typ, id, tenant, detail string) {
	if s.events == nil {
		return
	}
	e := events.Event{Type: typ, Sandbox: id, Tenant: tenant, Detail: detail}
	s.mu.Lock()
	if le := s.live[id]; le != nil {
		e.Isolation = le.drv.Name()
	}
	s.mu.Unlock()
	s.events.Publish(e)
}

// Emit publishes an event found outside the service (the usage sampler's
// oom) about a live sandbox.
func (s *Service) Emit(typ, id, detail string) {
	s.mu.Lock()
	le := s.live[id]
	s.mu.Unlock()
	if le != nil {
		s.emit(typ, id, le.tenant, detail)
	}
}

// LiveSandbox is a sandbox with a running or paused init, as the usage
// sampler and the metrics see it.
type LiveSandbox struct {
	ID, Tenant, Isolation string
	Paused                bool
}

// Live lists the live sandboxes, in no order.
func (s *Service) Live() []LiveSandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]LiveSandbox, 0, len(s.live))
	for _, e := range s.live {
		out = append(out, LiveSandbox{ID: e.id, Tenant: e.tenant, Isolation: e.drv.Name(), Paused: e.paused.Load()})
	}
	return out
}
