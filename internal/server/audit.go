package server

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// statusWriter records the status a handler answered. Unwrap lets
// http.ResponseController reach the connection (flush, full duplex).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return c, brw, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// stateChanging says whether a request is recorded in the audit log:
// every method but GET, HEAD and OPTIONS, and a GET that asks for a
// WebSocket (a terminal session types into the sandbox). The entry of a
// WebSocket session is written when the session ends, with status 101.
func stateChanging(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return isWebSocket(r)
	}
	return true
}

// isWebSocket reports whether r asks to upgrade to a WebSocket.
func isWebSocket(r *http.Request) bool {
	for _, v := range r.Header.Values("Upgrade") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "websocket") {
				return true
			}
		}
	}
	return false
}

// audit records one state-changing call. It runs after the handler, so the
// entry is in the log once the caller has the answer; a failure to write
// it is logged, never shown to the caller.
func (s *Server) audit(r *http.Request, keyID, tenant string, status int) {
	if s.st == nil || !stateChanging(r) {
		return
	}
	if keyID != "" && isMCPTransport(r) && status < 400 {
		// Each tool call it carries has an entry of its own (mcp.go); a
		// refused transport request (no session, no such server) has
		// one like any refused call.
		return
	}
	if status == 0 {
		status = http.StatusOK
	}
	rec := store.AuditRecord{
		Time:      time.Now(),
		KeyID:     keyID,
		Tenant:    tenant,
		Method:    r.Method,
		Path:      truncate(r.URL.Path, 512),
		SandboxID: sandboxOf(r.URL.Path),
		Status:    status,
		Remote:    r.RemoteAddr,
	}
	if err := s.st.AppendAudit(context.WithoutCancel(r.Context()), []store.AuditRecord{rec}); err != nil {
		s.log.Warn("writing audit log", "err", err, "method", r.Method, "path", rec.Path)
	}
}

// sandboxOf is the sandbox id in a /v1/sandboxes/{id}... path, or "".
func sandboxOf(path string) string {
	rest, ok := strings.CutPrefix(path, "/v1/sandboxes/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return truncate(id, 64)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// listAudit serves GET /v1/audit?limit=N[&tenant=T] (admin only), newest
// first.
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r, "reading the audit log") {
		return
	}
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			writeError(w, errdefs.Invalid("limit must be a number between 1 and 10000, got %q", v))
			return
		}
		limit = n
	}
	scope := tenancy.AllTenants()
	if t := r.URL.Query().Get("tenant"); t != "" {
		scope = tenancy.Only(t)
	}
	recs, err := s.st.ListAudit(r.Context(), scope, limit)
	if err != nil {
		writeError(w, err)
		return
	}
	out := api.ListAuditResponse{Entries: []api.AuditEntry{}}
	for _, a := range recs {
		out.Entries = append(out.Entries, api.AuditEntry{ID: a.ID, Time: a.Time, KeyID: a.KeyID, Tenant: a.Tenant,
			Method: a.Method, Path: a.Path, SandboxID: a.SandboxID, Status: a.Status, Remote: a.Remote})
	}
	writeJSON(w, http.StatusOK, out)
}

// auditHandlers are the routes this file serves (registered by routes,
// server.go, from api.Routes).
func (s *Server) auditHandlers() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET /v1/audit": s.listAudit,
	}
}
