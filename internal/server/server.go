// Package server is agentbox's HTTP API: routing, authentication, request
// validation, error translation (errdefs classes become
// {"error": {"code", "message"}} here, and only here), and the forwarding of
// exec and file routes to the sandbox's guest agent.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/console"
	"github.com/agentbox/agentbox/internal/e2b"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/posture"
	"github.com/agentbox/agentbox/internal/registry"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/templates"
	"github.com/agentbox/agentbox/internal/tenancy"
	"github.com/agentbox/agentbox/internal/version"
)

// Options wire the server.
type Options struct {
	Service      *sandbox.Service
	Pool         *storage.Pool
	Auth         *auth.Authenticator
	Logger       *slog.Logger
	MaxBodyBytes int64
	// Store holds keys, tenants and the audit log (admin.go, audit.go).
	Store *store.Store
	// Posture says what the posture check expects (admin.go).
	Posture posture.Options
	// RateLimit and RateBurst are the per-key token bucket (ratelimit.go);
	// RateLimit 0 disables it.
	RateLimit float64
	RateBurst int
	// Usage and Events serve a sandbox's usage samples and the event
	// stream (observe.go); nil: none.
	Usage  UsageSource
	Events *events.Hub
	// Info is what GET /v1/info answers (info.go), less what changes.
	Info api.Info
	// E2BTemplateAliases maps E2B templateIDs to templates (e2b.go);
	// nil: e2b.DefaultTemplateAliases.
	E2BTemplateAliases map[string]string
	// Registry pushes and pulls templates and snapshots (templates.go,
	// state.go); nil: those routes answer unavailable.
	Registry *registry.Client
}

// Server serves the API.
type Server struct {
	svc     *sandbox.Service
	pool    *storage.Pool
	tpl     *templates.Service // every template route goes through it (templates.go)
	auth    *auth.Authenticator
	log     *slog.Logger
	maxBody int64
	mux     *http.ServeMux
	st      *store.Store
	posture posture.Options
	limiter *limiter
	usage   UsageSource
	events  *events.Hub
	info    api.Info

	// The preview proxy's transport (ports.go).
	previewOnce sync.Once
	previewRT   http.RoundTripper

	// MCP endpoints and hosted MCP servers (mcp.go).
	mcp mcpState

	// E2B's protocol under /e2b (e2b.go).
	e2b      *e2b.Handler
	e2bEntry *E2BEntry

	// Single-use WebSocket tickets (tickets.go).
	tickets ticketTable

	// The web console's static files (internal/console), served
	// without a key: every call it makes carries one.
	console http.Handler
}

// New returns the API handler.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 1 << 20
	}
	s := &Server{svc: o.Service, pool: o.Pool, auth: o.Auth, log: o.Logger, maxBody: o.MaxBodyBytes, mux: http.NewServeMux()}
	s.st, s.posture, s.limiter = o.Store, o.Posture, newLimiter(o.RateLimit, o.RateBurst)
	s.usage, s.events = o.Usage, o.Events
	s.info = o.Info
	if o.Pool != nil {
		s.tpl = templates.New(o.Pool, o.Store, o.Service, o.Logger)
		s.tpl.SetRegistry(o.Registry)
	}
	if o.Service != nil && o.Registry != nil {
		o.Service.SetRegistry(o.Registry)
	}
	s.e2b = e2b.New(e2b.Options{Logger: o.Logger, TemplateAliases: o.E2BTemplateAliases})
	s.e2bEntry = &E2BEntry{Handler: s.e2b, Auth: s.auth, Limiter: &RateLimiter{l: s.limiter}, Client: s.inProcessClient, Audit: s.audit}
	s.console = console.Handler()
	s.routes()
	return s
}

// principal is whom the request acts for (set by ServeHTTP, or by the
// in-process client of MCP). A context without one, which no route
// should see, acts for a tenant no key has: it sees nothing, and is
// never the admin.
func principal(ctx context.Context) auth.Principal {
	p, err := tenancy.From(ctx)
	if err != nil {
		return auth.Principal{Tenant: noPrincipal}
	}
	return p
}

// noPrincipal is a tenant name no key can have (tenant names are
// validated; this one has a NUL).
const noPrincipal = "\x00no principal"

// scope is whose sandboxes and snapshots a request may see: every
// tenant's for the admin, its own tenant's otherwise (and nothing for a
// request without a principal).
func scope(r *http.Request) tenancy.Scope {
	return principal(r.Context()).Scope()
}

func (s *Server) routes() {
	// Each file of handlers lists its own routes (adding a route to a
	// file touches only that file here; docs/ARCHITECTURE.md, "How to
	// add").
	handlers := map[string]http.HandlerFunc{}
	for _, group := range []map[string]http.HandlerFunc{
		s.sandboxHandlers(),  // server.go
		s.infoHandlers(),     // info.go
		s.poolHandlers(),     // pools.go
		s.templateHandlers(), // templates.go
		s.buildHandlers(),    // build.go
		s.stateHandlers(),    // state.go
		s.egressHandlers(),   // egress.go
		s.adminHandlers(),    // admin.go
		s.auditHandlers(),    // audit.go
		s.observeHandlers(),  // observe.go
		s.mcpRoutes(),        // mcp.go
		s.desktopHandlers(),  // desktop.go
		s.ticketHandlers(),   // tickets.go
		s.fleetHandlers(),    // fleet.go
	} {
		for pattern, h := range group {
			if _, dup := handlers[pattern]; dup {
				panic("server: two handlers for " + pattern)
			}
			handlers[pattern] = h
		}
	}
	// Every route comes from api.Routes, which a test holds against
	// api/openapi.yaml; the guest's routes are forwarded.
	for _, r := range api.Routes {
		h, ok := handlers[r.Pattern()]
		if !ok && strings.HasPrefix(r.Path, api.SandboxPrefix+"/") {
			h = s.forward
		}
		if h == nil {
			panic("server: no handler for " + r.Pattern())
		}
		s.mux.HandleFunc(r.Pattern(), h)
		delete(handlers, r.Pattern())
	}
	for pattern := range handlers {
		panic("server: a handler for " + pattern + ", which is not in api.Routes (api/routes.go)")
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errdefs.NotFound("no route for %s %s; see api/openapi.yaml", r.Method, r.URL.Path))
	})
}

// ServeHTTP authenticates every request, then routes it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if er, ok := s.e2bHost(r); ok { // E2B's host names (e2b.go)
		s.serveE2B(w, er)
		return
	}
	if t, ok := s.previewOf(r); ok { // preview URLs have their own access rules
		s.servePreview(w, r, t)
		return
	}
	if e2b.Match(r) { // E2B's SDKs carry the key elsewhere (e2b.go)
		s.serveE2B(w, r)
		return
	}
	if console.Match(r) { // static files only; the app's calls carry a key
		s.console.ServeHTTP(w, r)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	w = sw
	p, viaTicket, err := s.ticketPrincipal(r) // browsers' WebSockets (tickets.go)
	if !viaTicket {
		p, err = s.auth.Authenticate(r.Context(), r)
	}
	if err != nil {
		// Failed attempts share a bucket per remote address.
		if ok, _ := s.limiter.allow("addr:"+remoteHost(r), start); ok {
			writeError(w, err)
		} else {
			writeError(w, errdefs.Exhausted("too many requests without a valid API key from %s; slow down", remoteHost(r)))
		}
		s.audit(r, "", "", sw.status)
		return
	}
	// Admin keys are the operator's own tools, which poll: not limited.
	// The fleet gateway carries every tenant's traffic and limits keys
	// itself (internal/auth/gateway.go): not limited either.
	if ok, wait := s.limiter.allow("key:"+p.KeyID, start); !ok && !p.Admin && p.KeyID != auth.GatewayKeyID {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
		writeError(w, errdefs.Exhausted("rate limit of API key %s exceeded; retry in %v", p.KeyID, wait.Round(time.Millisecond)))
		s.audit(r, p.KeyID, p.Tenant, sw.status)
		return
	}
	metrics.NoteTenant(r.Context(), p.Tenant) // the request's log line
	// Everything the request does acts for p (internal/tenancy): the
	// template service and the pool refuse a context without it.
	r = r.WithContext(tenancy.With(r.Context(), p))
	s.mux.ServeHTTP(w, r)
	s.audit(r, p.KeyID, p.Tenant, sw.status)
	if s.log.Enabled(r.Context(), slog.LevelDebug) {
		s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "tenant", p.Tenant, "took", time.Since(start))
	}
}

// decode reads a JSON body of at most maxBody bytes into v, rejecting
// unknown fields and trailing data.
//
// A body whose Content-Length is over the limit is refused before a byte
// of it is read: the client that sent `Expect: 100-continue` gets the 413
// instead of a 100 Continue, and sends nothing. Any other rejected body is
// read to its end (at most maxBody bytes) before the answer, so that the
// server does not close a connection the client is still writing to: over
// TCP that close resets the connection, and the client would see the reset
// instead of the 4xx. For the same reason a client that sends an
// oversized body without waiting for 100 Continue has it read and
// dropped, up to maxDrain bytes, before the 413.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength > s.maxBody {
		if r.ContentLength <= maxDrain && !strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
			_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxDrain))
		}
		return tooLarge(s.maxBody, r.ContentLength)
	}
	body := http.MaxBytesReader(w, r.Body, s.maxBody)
	err := s.decodeBody(body, v)
	if err != nil {
		_, _ = io.Copy(io.Discard, body)
	}
	return err
}

// maxDrain bounds what decode reads of a body it refuses; past it the
// connection is closed instead.
const maxDrain = 64 << 20

// tooLargeError is a request body over the limit: 413, code
// invalid_argument (the SDKs' invalid-argument error).
type tooLargeError struct{ msg string }

func (e *tooLargeError) Error() string { return e.msg }
func (e *tooLargeError) Unwrap() error { return errdefs.ErrInvalidArgument }

func tooLarge(limit, got int64) error {
	msg := fmt.Sprintf("request body is larger than %d bytes", limit)
	if got > 0 {
		msg = fmt.Sprintf("request body of %d bytes is larger than %d bytes", got, limit)
	}
	return &tooLargeError{msg + "; send a smaller request (files go through PUT /v1/sandboxes/{id}/files)"}
}

func (s *Server) decodeBody(body io.Reader, v any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &mbe):
			return tooLarge(s.maxBody, 0)
		case errors.Is(err, io.EOF):
			return errdefs.Invalid("request body is empty; send a JSON object")
		case errors.As(err, &se):
			return errdefs.Invalid("request body is not valid JSON: %v (at byte %d)", se, se.Offset)
		case errors.As(err, &te):
			return errdefs.Invalid("field %q must be %s, got %s", te.Field, te.Type, te.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return errdefs.Invalid("request body has an %s; see api/openapi.yaml", strings.TrimPrefix(err.Error(), "json: "))
		default:
			return errdefs.Invalid("reading request body: %v", err)
		}
	}
	if dec.More() {
		return errdefs.Invalid("request body has data after the JSON object")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	code, status := errdefs.Code(err)
	if tl := (*tooLargeError)(nil); errors.As(err, &tl) {
		status = http.StatusRequestEntityTooLarge
	}
	msg := err.Error()
	if status == http.StatusInternalServerError && msg == "" {
		msg = "internal error"
	}
	writeJSON(w, status, api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg, RequestID: w.Header().Get(metrics.RequestIDHeader)}})
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, api.Health{
		Status:    "ok",
		Version:   version.Version,
		Drivers:   s.svc.DriverNames(),
		Sandboxes: s.svc.LiveCount(),
	})
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSandboxRequest
	if err := s.decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Node != "" && req.Node != s.info.NodeID {
		// Placement on a named node is a gateway's (docs/cluster.md).
		writeError(w, errdefs.Invalid("node %q: this is node %q; name a node only through a fleet gateway", req.Node, s.info.NodeID))
		return
	}
	sb, err := s.svc.Create(r.Context(), principal(r.Context()).Tenant, &req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, sb)
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := sandbox.ListFilter{Metadata: map[string]string{}}
	for k, vs := range q {
		switch {
		case k == "state":
			for _, v := range vs {
				f.States = append(f.States, strings.Split(v, ",")...)
			}
		case k == "all":
			f.All = vs[0] == "true" || vs[0] == "1"
		case k == "limit":
			n, err := strconv.Atoi(vs[0])
			if err != nil || n < 1 || n > sandbox.MaxListLimit {
				writeError(w, errdefs.Invalid("limit must be a number from 1 to %d, got %q", sandbox.MaxListLimit, vs[0]))
				return
			}
			f.Limit = n
		case k == "cursor":
			f.Cursor = vs[0]
		case strings.HasPrefix(k, "metadata."):
			f.Metadata[strings.TrimPrefix(k, "metadata.")] = vs[0]
		default:
			writeError(w, errdefs.Invalid("unknown query parameter %q; use state=, all=, limit=, cursor= or metadata.KEY=", k))
			return
		}
	}
	for _, st := range f.States {
		switch st {
		case api.StateCreating, api.StateRunning, api.StatePaused, api.StateStopped,
			api.StateDestroying, api.StateDestroyed, api.StateFailed:
		default:
			writeError(w, errdefs.Invalid("unknown state %q", st))
			return
		}
	}
	if f.Cursor != "" && f.Limit == 0 {
		writeError(w, errdefs.Invalid("cursor needs limit: pass the same limit= as the request that gave the cursor"))
		return
	}
	list, next, err := s.svc.ListPage(r.Context(), scope(r), f)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.ListSandboxesResponse{Sandboxes: list, NextCursor: next})
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.svc.Get(r.Context(), scope(r), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	if s.usage != nil {
		if n, last := s.usage.OOM(sb.ID); n > 0 {
			sb.OOMKills = n
			if !last.IsZero() {
				sb.LastOOMAt = &last
			}
		}
	}
	writeJSON(w, http.StatusOK, sb)
}

func (s *Server) updateSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.UpdateSandboxRequest
	if err := s.decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if req.TTLSeconds == nil {
		sb, err := s.svc.Get(r.Context(), scope(r), id)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, sb)
		return
	}
	sb, err := s.svc.SetTTL(r.Context(), scope(r), id, *req.TTLSeconds)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sb)
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	if err := s.svc.Destroy(r.Context(), scope(r), r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	tpls, err := s.tpl.List(r.Context()) // the public ones and the tenant's own
	if err != nil {
		writeError(w, err)
		return
	}
	out := api.ListTemplatesResponse{Templates: []api.Template{}}
	for _, t := range tpls {
		out.Templates = append(out.Templates, t.API())
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	t, err := s.tpl.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (s *Server) importTemplate(w http.ResponseWriter, r *http.Request) {
	// Refused before the body is read: it names the daemon's host files.
	if !principal(r.Context()).Admin {
		writeError(w, errdefs.New(errdefs.ErrPermissionDenied, "importing a template from a host directory needs an admin key"))
		return
	}
	var req api.ImportTemplateRequest
	if err := s.decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	t, err := s.tpl.ImportHost(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, t.API())
}

// sandboxHandlers are the routes this file serves (registered by routes,
// server.go, from api.Routes).
func (s *Server) sandboxHandlers() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET /v1/health":            s.health,
		"POST /v1/sandboxes":        s.createSandbox,
		"GET /v1/sandboxes":         s.listSandboxes,
		"GET /v1/sandboxes/{id}":    s.getSandbox,
		"PATCH /v1/sandboxes/{id}":  s.updateSandbox,
		"DELETE /v1/sandboxes/{id}": s.deleteSandbox,
		"GET /v1/templates":         s.listTemplates,
		"GET /v1/templates/{name}":  s.getTemplate,
		"POST /v1/templates":        s.importTemplate,
	}
}
