package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Proxy is an MCP server that offers the tools of another MCP session, the
// upstream, as its own: a call goes upstream and its answer comes back
// as is. The upstream can be replaced while clients stay connected (a
// hosted server that restarted); between upstreams a call answers with a
// tool error that says why.
type Proxy struct {
	// Server is what clients connect to; many may, at once.
	Server *mcp.Server

	mu    sync.Mutex
	up    *mcp.ClientSession // nil while there is none
	why   string             // why there is no upstream
	tools map[string]bool    // the tools now registered on Server
}

// NewProxy returns a proxy that reports impl at initialize. Calls go to
// audit, if not nil, under server's name.
func NewProxy(impl *mcp.Implementation, instructions, server string, audit func(context.Context, *mcp.CallToolRequest, Call)) *Proxy {
	p := &Proxy{
		Server: mcp.NewServer(impl, &mcp.ServerOptions{Instructions: instructions, HasTools: true}),
		why:    "the server has not started yet",
		tools:  map[string]bool{},
	}
	if audit != nil {
		p.Server.AddReceivingMiddleware(AuditCtx(server, audit))
	}
	return p
}

// SetUpstream makes cs the upstream and mirrors its tools.
func (p *Proxy) SetUpstream(ctx context.Context, cs *mcp.ClientSession) error {
	p.mu.Lock()
	p.up, p.why = cs, ""
	p.mu.Unlock()
	return p.Refresh(ctx)
}

// ClearUpstream drops the upstream; calls answer why until the next one.
// The tools stay listed, so clients need not list them again.
func (p *Proxy) ClearUpstream(why string) {
	p.mu.Lock()
	p.up, p.why = nil, why
	p.mu.Unlock()
}

// Refresh lists the upstream's tools again and registers exactly those.
func (p *Proxy) Refresh(ctx context.Context) error {
	p.mu.Lock()
	up := p.up
	p.mu.Unlock()
	if up == nil {
		return nil
	}
	seen := map[string]bool{}
	var add []*mcp.Tool
	for t, err := range up.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("listing the upstream server's tools: %w", err)
		}
		if t.InputSchema == nil {
			t.InputSchema = map[string]any{"type": "object"}
		}
		seen[t.Name] = true
		add = append(add, t)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var gone []string
	for name := range p.tools {
		if !seen[name] {
			gone = append(gone, name)
			delete(p.tools, name)
		}
	}
	if len(gone) > 0 {
		p.Server.RemoveTools(gone...)
	}
	for _, t := range add {
		p.tools[t.Name] = true
		p.Server.AddTool(t, p.forward(t.Name))
	}
	return nil
}

// Tools returns the names of the tools now offered.
func (p *Proxy) Tools() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.tools))
	for n := range p.tools {
		out = append(out, n)
	}
	return out
}

func (p *Proxy) forward(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		p.mu.Lock()
		up, why := p.up, p.why
		p.mu.Unlock()
		if up == nil {
			return failed("tool %s is unavailable: %s; try again shortly", name, why), nil
		}
		params := &mcp.CallToolParams{Name: name, Meta: upstreamMeta(req.Params.Meta)}
		if len(req.Params.Arguments) > 0 {
			params.Arguments = req.Params.Arguments
		}
		res, err := up.CallTool(ctx, params)
		if err != nil {
			return failed("tool %s: the upstream server did not answer: %v", name, err), nil
		}
		return res, nil
	}
}

// upstreamMeta is the _meta of a call as it goes upstream: the client's,
// less the protocol's own keys (io.modelcontextprotocol/...: the
// protocol version, client info and capabilities of the downstream
// connection; the upstream session negotiated its own).
func upstreamMeta(m mcp.Meta) mcp.Meta {
	if len(m) == 0 {
		return nil
	}
	out := mcp.Meta{}
	for k, v := range m {
		if !strings.HasPrefix(k, "io.modelcontextprotocol/") {
			out[k] = v
		}
	}
	return out
}
