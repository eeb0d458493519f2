package sandbox

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/closer"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/tenancy"
	"github.com/agentbox/agentbox/internal/tracing"
)

// Idle timeout. A sandbox created with idle_timeout has its on_timeout
// (destroy or pause) applied once nobody has used it for that long. Use is
// any request to its guest agent (exec, files, processes, PTY: the
// transport Guest hands out counts them from start to the end of their
// response, so a long exec or an attached terminal is activity the whole
// time) and preview traffic (every read or write on a proxied
// connection). The clock is in memory: it stops while the sandbox is
// paused, starts again on resume, reset and cold start, and a restarted
// daemon starts it afresh for every sandbox it re-adopts.

// maxIdleTimeout bounds idle_timeout (30 days, in seconds).
const maxIdleTimeout = 30 * 24 * 3600

// activity is a live sandbox's idle clock.
type activity struct {
	last atomic.Int64 // unix nanoseconds of the last use
	busy atomic.Int32 // guest requests whose response is still open
}

func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

// idleFor reports how long the sandbox has been unused as of now; zero
// while a request is in flight.
func (a *activity) idleFor(now time.Time) time.Duration {
	if a.busy.Load() > 0 {
		return 0
	}
	return now.Sub(time.Unix(0, a.last.Load()))
}

// begin counts a request in flight; the returned func ends it (once).
func (a *activity) begin() func() {
	a.busy.Add(1)
	a.touch()
	var once sync.Once
	return func() {
		once.Do(func() {
			a.touch()
			a.busy.Add(-1)
		})
	}
}

// activeTransport is the guest transport Guest hands out: it counts each
// request as activity until its response body is closed.
type activeTransport struct{ e *entry }

func (t activeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	act := t.e.act.begin()
	// The service's span of a forwarded request (an exec, a file): the
	// guest's span is its child; both end with the answer's body.
	ctx, sp := tracing.Start(r.Context(), "sandbox.Forward")
	end := act
	if sp.IsRecording() {
		sp.SetAttributes(attribute.String("agentbox.sandbox", t.e.id))
		r = r.WithContext(ctx)
		end = func() { act(); sp.End() }
	}
	resp, err := tracing.RoundTrip(t.e.guest, r)
	if err != nil {
		tracing.End(sp, err)
		act()
		return nil, err
	}
	resp.Body = closer.Body(resp.Body, end) // an upgraded one stays writable
	return resp, nil
}

// activeConn is a proxied preview connection: its traffic is activity.
// It is not "busy" while open, since the proxy pools idle connections.
type activeConn struct {
	net.Conn
	a *activity
}

func (c *activeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.a.touch()
	}
	return n, err
}

func (c *activeConn) Write(p []byte) (int, error) {
	c.a.touch()
	return c.Conn.Write(p)
}

// CloseWrite passes the half-close on, as bufferedConn does.
func (c *activeConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// idleTimeout is rec's idle timeout (0: none).
func idleTimeout(spec *api.CreateSandboxRequest) time.Duration {
	return time.Duration(spec.IdleTimeoutSeconds) * time.Second
}

// reapIdle applies on_timeout to the running sandboxes idle for longer
// than their idle timeout. Paused sandboxes are left alone.
func (s *Service) reapIdle() {
	now := time.Now()
	var due []*entry
	s.mu.Lock()
	for _, e := range s.live {
		if e.idle > 0 && !e.paused.Load() && e.act.idleFor(now) >= e.idle {
			due = append(due, e)
		}
	}
	s.mu.Unlock()
	if len(due) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, e := range due {
		// Touched since the scan: not idle any more.
		if e.act.idleFor(time.Now()) < e.idle {
			continue
		}
		rec, err := s.st.GetSandbox(ctx, e.id)
		if err != nil {
			continue
		}
		if rec.Spec.OnTimeout == api.OnTimeoutPause {
			s.log.Info("idle timeout; pausing (on_timeout: pause)", "sandbox", e.id, "idle_timeout", e.idle)
			s.emit(events.Expired, e.id, e.tenant, "idle timeout")
			if _, err := s.pauseOnTimeout(ctx, e.id); err != nil { // to disk on gvisor (memsnap.go)
				// Do not retry every tick: the clock starts again.
				e.act.touch()
				s.log.Warn("idle reaper: pause failed", "sandbox", e.id, "err", err)
			}
			continue
		}
		s.log.Info("idle timeout; destroying", "sandbox", e.id, "idle_timeout", e.idle)
		s.emit(events.Expired, e.id, e.tenant, "idle timeout")
		if err := s.Destroy(ctx, tenancy.AllTenants(), e.id); err != nil {
			e.act.touch()
			s.log.Warn("idle reaper: destroy failed", "sandbox", e.id, "err", err)
		}
	}
}
