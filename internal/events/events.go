// Package events is the daemon's lifecycle event hub: the sandbox service
// publishes what happens to sandboxes (created, paused, destroyed, ...),
// and subscribers (the API's Server-Sent Events stream, the metrics)
// receive it in order. Publishing never blocks: a subscriber that falls
// more than its buffer behind loses the oldest events it has not read and
// is told how many (Subscription.Dropped), so a slow client cannot slow a
// create.
package events

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/api"
)

// Types of events.
const (
	Created     = "created"
	Forked      = "forked" // a sandbox made by a fork; Detail names its parent
	Paused      = "paused"
	Resumed     = "resumed"
	Stopped     = "stopped"
	Snapshotted = "snapshotted" // Detail is the snapshot's id
	Reset       = "reset"
	Expired     = "expired" // its TTL ran out; destroyed follows
	Destroyed   = "destroyed"
	OOM         = "oom" // the kernel's OOM killer killed a process in it
	Failed      = "failed"
	// QuotaRejected is a request refused by its tenant's quota (no
	// sandbox: Detail says which quota).
	QuotaRejected = "quota_rejected"
)

// Types lists every event type, for validating filters.
var Types = []string{Created, Forked, Paused, Resumed, Stopped, Snapshotted, Reset, Expired, Destroyed, OOM, Failed, QuotaRejected}

// Event is one thing that happened (the API's wire type). Seq grows by
// one per event published by this daemon since it started.
type Event = api.Event

// Filter selects events; zero fields match everything.
type Filter struct {
	Types   map[string]bool
	Sandbox string
	// Tenant, when not "", keeps only that tenant's events; a tenant's
	// stream always has it set to the tenant.
	Tenant string
	// AllTenants is false for a tenant's stream: Tenant "" then means
	// the default tenant only, never everyone.
	AllTenants bool
}

// Match reports whether f selects e.
func (f *Filter) Match(e *Event) bool {
	if len(f.Types) > 0 && !f.Types[e.Type] {
		return false
	}
	if f.Sandbox != "" && f.Sandbox != e.Sandbox {
		return false
	}
	if f.AllTenants && f.Tenant == "" {
		return true
	}
	return f.Tenant == e.Tenant
}

// Hub fans events out to subscribers. The zero value is not usable: call
// New. A nil *Hub drops every event, so callers need no checks.
type Hub struct {
	seq atomic.Uint64

	mu sync.Mutex
	// subs are the live subscriptions; hooks the synchronous observers.
	subs   map[*Subscription]struct{}
	hooks  []func(*Event)
	closed bool
}

// New returns an empty hub.
func New() *Hub { return &Hub{subs: map[*Subscription]struct{}{}} }

// Observe calls fn with every event, synchronously, in the publisher's
// goroutine: fn must be quick and must not block (the metrics count
// events this way). Observers are for the daemon's own code, never for
// clients.
func (h *Hub) Observe(fn func(*Event)) {
	h.mu.Lock()
	h.hooks = append(h.hooks, fn)
	h.mu.Unlock()
}

// Publish stamps e with its sequence number and time (if unset) and hands
// it to every observer and matching subscriber. It never blocks.
func (h *Hub) Publish(e Event) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	// Under mu, so that every subscriber sees events in Seq order.
	e.Seq = h.seq.Add(1)
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	for _, fn := range h.hooks {
		fn(&e)
	}
	for s := range h.subs {
		if s.f.Match(&e) {
			s.push(e)
		}
	}
}

// Subscribe returns a subscription to the events f selects, buffering at
// most buf unread ones (at least 16). Close it when done.
func (h *Hub) Subscribe(f Filter, buf int) *Subscription {
	if buf < 16 {
		buf = 16
	}
	s := &Subscription{h: h, f: f, max: buf, ready: make(chan struct{}, 1), done: make(chan struct{})}
	h.mu.Lock()
	if h.closed {
		close(s.done)
	} else {
		h.subs[s] = struct{}{}
	}
	h.mu.Unlock()
	return s
}

// Close ends every subscription (their Done channels close) and refuses
// new ones: the daemon calls it when it shuts down, so that streams end
// instead of holding the HTTP server's shutdown.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for s := range h.subs {
		close(s.done)
		delete(h.subs, s)
	}
}

// Subscription is one subscriber's queue.
type Subscription struct {
	h     *Hub
	f     Filter
	max   int
	ready chan struct{} // has a value while queue may be non-empty
	done  chan struct{} // closed when the hub closes

	mu      sync.Mutex
	queue   []Event
	dropped uint64
}

func (s *Subscription) push(e Event) {
	s.mu.Lock()
	if len(s.queue) >= s.max {
		s.queue = s.queue[1:]
		s.dropped++
	}
	s.queue = append(s.queue, e)
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// Done is closed when the hub shuts down.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Ready has a value when Next may return events.
func (s *Subscription) Ready() <-chan struct{} { return s.ready }

// Next takes every queued event, oldest first, and the number of events
// dropped since the last call because the queue was full.
func (s *Subscription) Next() (evs []Event, dropped uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	evs, s.queue = s.queue, nil
	dropped, s.dropped = s.dropped, 0
	return evs, dropped
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.h.mu.Lock()
	delete(s.h.subs, s)
	s.h.mu.Unlock()
}
