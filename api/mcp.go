package api

import "time"

// MCP routes (docs/mcp.md): the daemon's own MCP server over streamable
// HTTP, and MCP servers hosted inside sandboxes.
var mcpRoutes = []Route{
	{"POST", "/mcp"},
	{"GET", "/mcp"},
	{"DELETE", "/mcp"},
	{"POST", SandboxPrefix + "/mcp-servers"},
	{"GET", SandboxPrefix + "/mcp-servers"},
	{"GET", SandboxPrefix + "/mcp-servers/{name}"},
	{"DELETE", SandboxPrefix + "/mcp-servers/{name}"},
	{"POST", SandboxPrefix + "/mcp-servers/{name}/mcp"},
	{"GET", SandboxPrefix + "/mcp-servers/{name}/mcp"},
	{"DELETE", SandboxPrefix + "/mcp-servers/{name}/mcp"},
}

func init() {
	Routes = append(Routes, mcpRoutes...)
	RequestBodies["POST /mcp"] = RawBody("MCP JSON-RPC messages, read by the MCP Go SDK's streamable HTTP handler")
	RequestBodies["POST "+SandboxPrefix+"/mcp-servers"] = (*StartMCPServerRequest)(nil)
	RequestBodies["POST "+SandboxPrefix+"/mcp-servers/{name}/mcp"] = RawBody("MCP JSON-RPC messages, read by the MCP Go SDK's streamable HTTP handler")
}

// States of a hosted MCP server.
const (
	MCPServerStarting   = "starting"
	MCPServerRunning    = "running"
	MCPServerRestarting = "restarting" // it exited; it starts again after a backoff
	MCPServerStopped    = "stopped"    // its sandbox is gone
)

// StartMCPServerRequest is the body of POST /v1/sandboxes/{id}/mcp-servers:
// a stdio MCP server to run inside the sandbox.
type StartMCPServerRequest struct {
	// Name names the server in its sandbox and in its endpoint's path:
	// 1-63 of a-z, 0-9, - and _, starting with a letter or digit.
	Name string `json:"name"`
	// Command is the server's argv (a stdio MCP server: JSON-RPC on its
	// stdin and stdout).
	Command []string          `json:"command"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
}

// MCPServer describes a hosted MCP server.
type MCPServer struct {
	Name      string            `json:"name"`
	SandboxID string            `json:"sandbox_id"`
	Command   []string          `json:"command"`
	Env       map[string]string `json:"env,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	State     string            `json:"state"`
	// Endpoint is the path of its streamable HTTP endpoint on the daemon.
	Endpoint string `json:"endpoint"`
	// Tools are the names of the tools it offers, as last listed.
	Tools []string `json:"tools"`
	// Restarts counts how often it exited and was started again.
	Restarts  int        `json:"restarts"`
	StartedAt *time.Time `json:"started_at,omitempty"` // of the running process
	// LastError says why it last stopped or failed to start; Stderr is the
	// tail of its standard error.
	LastError string `json:"last_error,omitempty"`
	Stderr    string `json:"stderr,omitempty"`
}

// ListMCPServersResponse is the body of GET /v1/sandboxes/{id}/mcp-servers.
type ListMCPServersResponse struct {
	Servers []MCPServer `json:"servers"`
}
