package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/api"
)

// GroupMCP holds an exec tool call over the daemon's MCP endpoint beside
// the REST exec it wraps (docs/mcp.md).
const GroupMCP = "mcp"

// The exec tool runs its command as a shell line, so its REST counterpart
// is the same shell line: the difference is what MCP adds.
const (
	lineMCPREST = "mcp/rest exec sh -c true"
	lineMCPTool = "mcp/exec tool true (http)"
)

// mcpLines times a REST exec of `sh -c true` and the `exec` tool call of
// `true` over streamable HTTP (one go-sdk session, as a client keeps),
// one after the other in one sandbox.
func (r *runner) mcpLines(ctx context.Context) {
	if !r.wantAny(lineMCPREST, lineMCPTool) {
		return
	}
	r.withSandbox(ctx, "mcp", func(id string) {
		n := r.opts.N * 4
		if r.want(lineMCPREST) {
			r.add(r.sample(ctx, lineMCPREST, GroupMCP, n, true, func(ctx context.Context) (time.Duration, error) {
				return timed(func() error {
					res, err := r.c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"/bin/sh", "-c", "true"}})
					if err == nil && res.ExitCode != 0 {
						err = fmt.Errorf("sh -c true exited %d", res.ExitCode)
					}
					return err
				})
			}))
		}
		if !r.want(lineMCPTool) {
			return
		}
		endpoint, hc := r.c.MCPEndpoint("/mcp")
		cl := mcp.NewClient(&mcp.Implementation{Name: "agentbox-bench", Version: "1"}, nil)
		cctx, cancel := context.WithTimeout(ctx, sampleTimeout)
		cs, err := cl.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
		cancel()
		if err != nil {
			r.note("%s skipped: connecting to /mcp: %v", lineMCPTool, err)
			return
		}
		defer cs.Close()
		r.add(r.sample(ctx, lineMCPTool, GroupMCP, n, true, func(ctx context.Context) (time.Duration, error) {
			return timed(func() error {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"sandbox_id": id, "command": "true"}})
				if err == nil && res.IsError {
					err = fmt.Errorf("the exec tool answered a tool error: %+v", res.Content)
				}
				return err
			})
		}))
	})
}
