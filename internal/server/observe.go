package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/usage"
)

// sandboxMetrics answers GET /v1/sandboxes/{id}/metrics: the sandbox's
// usage samples of the last hour (since= keeps those after a time).
func (s *Server) sandboxMetrics(w http.ResponseWriter, r *http.Request) {
	sb, err := s.svc.Get(r.Context(), scope(r), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	var since time.Time
	if v := r.URL.Query().Get("since"); v != "" {
		if since, err = time.Parse(time.RFC3339Nano, v); err != nil {
			writeError(w, errdefs.Invalid("since must be an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", v))
			return
		}
	}
	out := api.SandboxMetrics{Sandbox: sb.ID, Limits: sb.Resources, Samples: []api.UsageSample{}}
	if s.usage != nil {
		out.IntervalSeconds = s.usage.Interval().Seconds()
		out.Samples = s.usage.Samples(sb.ID, since)
	}
	writeJSON(w, http.StatusOK, out)
}

// eventStream answers GET /v1/events: the lifecycle events as
// Server-Sent Events (one "data:" line of api.Event JSON each, its seq
// as the id), filtered by type=, sandbox= and (admins) tenant=. A
// tenant's key sees its own tenant's events only.
func (s *Server) eventStream(w http.ResponseWriter, r *http.Request) {
	if s.events == nil {
		writeError(w, errdefs.New(errdefs.ErrUnavailable, "this daemon publishes no events"))
		return
	}
	p := principal(r.Context())
	f := events.Filter{Tenant: p.Tenant, AllTenants: p.Admin}
	for k, vs := range r.URL.Query() {
		switch k {
		case "type":
			f.Types = map[string]bool{}
			for _, v := range vs {
				for _, t := range strings.Split(v, ",") {
					if !validEventType(t) {
						writeError(w, errdefs.Invalid("unknown event type %q; use one of %s", t, strings.Join(events.Types, ", ")))
						return
					}
					f.Types[t] = true
				}
			}
		case "sandbox":
			f.Sandbox = vs[0]
		case "tenant":
			if !p.Admin {
				if vs[0] != p.Tenant {
					writeError(w, errdefs.New(errdefs.ErrPermissionDenied, "a tenant's key sees its own events only; leave tenant= out"))
					return
				}
				continue
			}
			f.Tenant, f.AllTenants = vs[0], false
		default:
			writeError(w, errdefs.Invalid("unknown query parameter %q; use type=, sandbox= or tenant=", k))
			return
		}
	}
	sub := s.events.Subscribe(f, 1024)
	defer sub.Close()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	// A comment first, so the client knows it is subscribed.
	fmt.Fprint(w, ": subscribed\n\n")
	_ = rc.Flush()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-sub.Done(): // the daemon is shutting down
			return
		case <-keepalive.C:
			fmt.Fprint(w, ": keepalive\n\n")
		case <-sub.Ready():
			evs, dropped := sub.Next()
			if dropped > 0 {
				fmt.Fprintf(w, "event: dropped\ndata: {\"dropped\":%d}\n\n", dropped)
			}
			for _, e := range evs {
				b, _ := json.Marshal(e)
				fmt.Fprintf(w, "id: %d\ndata: %s\n\n", e.Seq, b)
			}
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

func validEventType(t string) bool {
	for _, v := range events.Types {
		if t == v {
			return true
		}
	}
	return false
}

// UsageSource is what the server reads of the usage sampler.
type UsageSource interface {
	Interval() time.Duration
	Samples(id string, since time.Time) []api.UsageSample
	OOM(id string) (kills int64, last time.Time)
}

var _ UsageSource = (*usage.Sampler)(nil)

// observeHandlers are the routes this file serves (registered by routes,
// server.go, from api.Routes).
func (s *Server) observeHandlers() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET /v1/sandboxes/{id}/metrics": s.sandboxMetrics,
		"GET /v1/events":                 s.eventStream,
	}
}
