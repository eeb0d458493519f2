package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/agentbox/agentbox/api"
)

// MCPEndpoint returns the URL of an MCP endpoint of the daemon (path is
// "/mcp", or a hosted server's "/v1/sandboxes/ID/mcp-servers/NAME/mcp")
// and an HTTP client that reaches it and sends the client's API key, for
// an MCP client's streamable HTTP transport (docs/mcp.md).
func (c *Client) MCPEndpoint(path string) (string, *http.Client) {
	hc := *c.hc
	hc.Transport = bearer{key: c.apiKey, ua: c.ua, next: c.hc.Transport}
	return c.base + path, &hc
}

// bearer adds the API key and user agent to every request.
type bearer struct {
	key, ua string
	next    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.key != "" {
		r.Header.Set("Authorization", "Bearer "+b.key)
	}
	r.Header.Set("User-Agent", b.ua)
	next := b.next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(r)
}

// StartMCPServer starts a stdio MCP server inside sandbox id as a
// supervised process; its endpoint (MCPEndpoint of the answer's Endpoint)
// serves it over streamable HTTP. See docs/mcp.md.
func (c *Client) StartMCPServer(ctx context.Context, id string, req api.StartMCPServerRequest) (*api.MCPServer, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var out api.MCPServer
	if err := c.doJSON(ctx, "POST", sandboxPath(id, "/mcp-servers"), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListMCPServers returns the MCP servers hosted in sandbox id.
func (c *Client) ListMCPServers(ctx context.Context, id string) ([]api.MCPServer, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var out api.ListMCPServersResponse
	if err := c.doJSON(ctx, "GET", sandboxPath(id, "/mcp-servers"), nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Servers, nil
}

// GetMCPServer describes MCP server name of sandbox id.
func (c *Client) GetMCPServer(ctx context.Context, id, name string) (*api.MCPServer, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var out api.MCPServer
	if err := c.doJSON(ctx, "GET", sandboxPath(id, "/mcp-servers/"+url.PathEscape(name)), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// StopMCPServer stops MCP server name of sandbox id and forgets it.
func (c *Client) StopMCPServer(ctx context.Context, id, name string) error {
	if err := checkID(id); err != nil {
		return err
	}
	return c.doJSON(ctx, "DELETE", sandboxPath(id, "/mcp-servers/"+url.PathEscape(name)), nil, nil, nil)
}
