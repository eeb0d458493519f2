package gateway

import (
	"net/http"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/e2b"
	"github.com/agentbox/agentbox/internal/server"
)

// E2B's protocol and agentbox's MCP server at the gateway (docs/cluster.md,
// "E2B and MCP through a gateway"). The gateway serves them with a node's
// own handlers (server.E2BEntry with internal/e2b, server.MCPEndpoint with
// internal/mcpserver); only their client differs: every API call they
// make goes through this gateway's routes in process, as the caller's
// principal (server.InProcessClient of g.mux), so it is placed, forwarded
// to the id's node and merged as any client's call. Nothing here talks to
// a node itself.

// fronts are the gateway's E2B and MCP doors.
type fronts struct {
	e2b *server.E2BEntry
	mcp *server.MCPEndpoint
}

// initFronts makes the E2B and MCP doors (New calls it after routes).
func (g *Gateway) initFronts() {
	h := e2b.New(e2b.Options{Logger: g.log, TemplateAliases: g.o.E2BTemplateAliases})
	// No audit at the gateway: each call the protocol makes is audited on
	// the node that serves it, as key "gateway" with the tenant.
	g.fr.e2b = &server.E2BEntry{Handler: h, Auth: g.o.Auth, Limiter: g.limiter, Client: g.inProcessClient}
	g.fr.mcp = server.NewMCPEndpoint(g.inProcessClient, nil)
}

// inProcessClient is a Go SDK client whose every request this gateway's
// routes serve in process, acting as p.
func (g *Gateway) inProcessClient(p auth.Principal) *client.Client {
	return server.InProcessClient(g.mux, p)
}

// e2bRequest reports whether r is an E2B request and returns it as the
// E2B handler takes it: E2B's host names under the preview domain
// (api.<domain>, 49983-<id>.<domain>, 49999-<id>.<domain>; any other
// <port>-<id>.<domain> stays a preview), or a path under /e2b that is not
// a preview host's.
func (g *Gateway) e2bRequest(r *http.Request) (*http.Request, bool) {
	if er, ok := server.E2BHost(r, g.o.PreviewDomain); ok {
		return er, true
	}
	if _, preview := server.PreviewTarget(r, g.o.PreviewDomain); preview {
		return nil, false
	}
	return r, e2b.Match(r)
}

// mcpRoutes are agentbox's own MCP server's routes (POST, GET and DELETE
// /mcp), one server per key as on a node. Hosted MCP servers in sandboxes
// (/v1/sandboxes/{id}/mcp-servers/...) are forwarded to the node with the
// rest of the sandbox's routes.
func (g *Gateway) mcpRoutes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"POST /mcp":   g.serveMCP,
		"GET /mcp":    g.serveMCP,
		"DELETE /mcp": g.serveMCP,
	}
}

func (g *Gateway) serveMCP(w http.ResponseWriter, r *http.Request) {
	g.fr.mcp.ServeHTTP(w, r)
}
