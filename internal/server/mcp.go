package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/mcphost"
	"github.com/agentbox/agentbox/internal/mcpserver"
	"github.com/agentbox/agentbox/internal/store"
)

// The daemon's MCP endpoints (docs/mcp.md): its own tools at /mcp, and
// MCP servers hosted in sandboxes (internal/mcphost).

// mcpSessionTimeout closes an MCP session that has seen no request for
// this long.
const mcpSessionTimeout = 30 * time.Minute

// Headers the daemon sets on a request it hands to a hosted server's
// endpoint, so the audit middleware knows the caller; a client's own
// values are removed first.
const (
	hdrKeyID  = "X-Agentbox-Key-Id"
	hdrTenant = "X-Agentbox-Tenant"
	hdrRemote = "X-Agentbox-Remote"
)

type mcpState struct {
	once sync.Once
	host *mcphost.Manager
	// own is agentbox's own MCP server at /mcp.
	own *MCPEndpoint
}

func (s *Server) mcpInit() *mcpState {
	s.mcp.once.Do(func() {
		s.mcp.host = mcphost.New(s.log)
		s.mcp.own = NewMCPEndpoint(s.inProcessClient, s.auditMCP)
	})
	return &s.mcp
}

// MCPEndpoint serves agentbox's own MCP server (internal/mcpserver,
// docs/mcp.md) over streamable HTTP at /mcp, one server per API key: a
// key's sessions live in its own handler, so a session id is worthless
// with another key. A daemon and a fleet gateway serve it alike; only the
// client its tools call through differs (InProcessClient of the daemon's
// routes or of the gateway's).
type MCPEndpoint struct {
	client func(auth.Principal) *client.Client
	audit  func(keyID, tenant, remote string, c mcpserver.Call)

	mu    sync.Mutex
	byKey map[string]*mcp.StreamableHTTPHandler
}

// NewMCPEndpoint returns the endpoint whose tools call the API through
// client(p) for the request's principal p, and report each tool call to
// audit (nil: not recorded).
func NewMCPEndpoint(client func(auth.Principal) *client.Client, audit func(keyID, tenant, remote string, c mcpserver.Call)) *MCPEndpoint {
	return &MCPEndpoint{client: client, audit: audit, byKey: map[string]*mcp.StreamableHTTPHandler{}}
}

// ServeHTTP serves one request of the MCP transport (POST, GET or DELETE
// /mcp) for the principal the request's context carries (tenancy.With,
// set after authentication).
func (m *MCPEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := principal(r.Context())
	m.mu.Lock()
	h, ok := m.byKey[p.KeyID]
	if !ok {
		var record func(mcpserver.Call)
		if m.audit != nil {
			remote := r.RemoteAddr
			record = func(c mcpserver.Call) { m.audit(p.KeyID, p.Tenant, remote, c) }
		}
		// One server serves all of the key's sessions: the handler asks
		// for it on every request (to check the protocol version), and
		// building one (13 tools, their schemas) costs milliseconds.
		srv := mcpserver.New(m.client(p), record)
		h = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
			&mcp.StreamableHTTPOptions{SessionTimeout: mcpSessionTimeout})
		m.byKey[p.KeyID] = h
	}
	m.mu.Unlock()
	h.ServeHTTP(w, r)
}

// Close stops the MCP servers hosted in sandboxes: their processes end with
// their exec streams.
func (s *Server) Close() {
	s.mcpInit().host.Close()
}

func (s *Server) mcpRoutes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"POST /mcp":   s.serveMCP,
		"GET /mcp":    s.serveMCP,
		"DELETE /mcp": s.serveMCP,

		"POST /v1/sandboxes/{id}/mcp-servers":              s.startMCPServer,
		"GET /v1/sandboxes/{id}/mcp-servers":               s.listMCPServers,
		"GET /v1/sandboxes/{id}/mcp-servers/{name}":        s.getMCPServer,
		"DELETE /v1/sandboxes/{id}/mcp-servers/{name}":     s.stopMCPServer,
		"POST /v1/sandboxes/{id}/mcp-servers/{name}/mcp":   s.serveHostedMCP,
		"GET /v1/sandboxes/{id}/mcp-servers/{name}/mcp":    s.serveHostedMCP,
		"DELETE /v1/sandboxes/{id}/mcp-servers/{name}/mcp": s.serveHostedMCP,
	}
}

// isMCPTransport reports whether r is a request of an MCP endpoint's
// transport (/mcp or a hosted server's .../mcp), whose tool calls the MCP
// middleware audits one by one.
func isMCPTransport(r *http.Request) bool {
	return r.URL.Path == "/mcp" || strings.HasPrefix(r.URL.Path, "/v1/sandboxes/") && strings.HasSuffix(r.URL.Path, "/mcp") && strings.Contains(r.URL.Path, "/mcp-servers/")
}

// serveMCP serves agentbox's own MCP server to the caller's key.
func (s *Server) serveMCP(w http.ResponseWriter, r *http.Request) {
	s.mcpInit().own.ServeHTTP(w, r)
}

// auditMCP writes one tool call to the audit log: method MCP, the path
// /mcp/SERVER/TOOL with the arguments' size, the duration and the outcome
// as its query, and status 200 (ok), 422 (the tool answered with an
// error) or 400 (the call failed).
func (s *Server) auditMCP(keyID, tenant, remote string, c mcpserver.Call) {
	if s.st == nil {
		return
	}
	status := http.StatusOK
	switch c.Outcome {
	case mcpserver.OutcomeToolError:
		status = http.StatusUnprocessableEntity
	case mcpserver.OutcomeError:
		status = http.StatusBadRequest
	}
	rec := store.AuditRecord{
		Time: time.Now(), KeyID: keyID, Tenant: tenant, Method: "MCP",
		Path: truncate(fmt.Sprintf("/mcp/%s/%s?arg_bytes=%d&duration_ms=%.1f&outcome=%s",
			c.Server, c.Tool, c.ArgBytes, float64(c.Duration.Microseconds())/1000, c.Outcome), 512),
		SandboxID: truncate(c.SandboxID, 64), Status: status, Remote: remote,
	}
	if err := s.st.AppendAudit(context.Background(), []store.AuditRecord{rec}); err != nil {
		s.log.Warn("writing audit log", "err", err, "mcp_tool", c.Tool)
	}
}

func (s *Server) startMCPServer(w http.ResponseWriter, r *http.Request) {
	var req api.StartMCPServerRequest
	if err := s.decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if _, err := s.svc.Get(r.Context(), scope(r), id); err != nil {
		writeError(w, err)
		return
	}
	p := principal(r.Context())
	info, err := s.mcpInit().host.Start(id, req, s.inProcessClient(p), func(_ context.Context, call *mcp.CallToolRequest, c mcpserver.Call) {
		var h http.Header
		if call.Extra != nil {
			h = call.Extra.Header
		}
		c.SandboxID = id
		s.auditMCP(h.Get(hdrKeyID), h.Get(hdrTenant), h.Get(hdrRemote), c)
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, info)
}

func (s *Server) listMCPServers(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.svc.Get(r.Context(), scope(r), id); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.ListMCPServersResponse{Servers: s.mcpInit().host.List(id)})
}

// hosted finds the hosted server of the request's path, if the caller may
// see its sandbox.
func (s *Server) hosted(r *http.Request) (*mcphost.Hosted, error) {
	id := r.PathValue("id")
	if _, err := s.svc.Get(r.Context(), scope(r), id); err != nil {
		return nil, err
	}
	return s.mcpInit().host.Get(id, r.PathValue("name"))
}

func (s *Server) getMCPServer(w http.ResponseWriter, r *http.Request) {
	h, err := s.hosted(r)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, h.Info())
}

func (s *Server) stopMCPServer(w http.ResponseWriter, r *http.Request) {
	if _, err := s.hosted(r); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := s.mcpInit().host.Stop(ctx, r.PathValue("id"), r.PathValue("name")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// serveHostedMCP serves a hosted server's streamable HTTP endpoint.
func (s *Server) serveHostedMCP(w http.ResponseWriter, r *http.Request) {
	h, err := s.hosted(r)
	if err != nil {
		writeError(w, err)
		return
	}
	p := principal(r.Context())
	r.Header.Del(hdrKeyID)
	r.Header.Del(hdrTenant)
	r.Header.Del(hdrRemote)
	r.Header.Set(hdrKeyID, p.KeyID)
	r.Header.Set(hdrTenant, p.Tenant)
	r.Header.Set(hdrRemote, r.RemoteAddr)
	h.ServeHTTP(w, r)
}
