package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
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

// A hosted MCP server's tool call through the daemon, beside the same
// server over stdio on the host (the "within 3 ms").
const (
	lineMCPHosted = "mcp/hosted server tool call"
	lineMCPStdio  = "mcp/the same server over stdio (host)"
	// mcpServerTemplate has python3, which the server below is written in.
	mcpServerTemplate = "base"
)

// benchMCPServer is a stdio MCP server in Python's standard library, with
// one tool, `ping`: what a hosted server's call costs past the server's
// own work. It answers initialize with the version the client asks for.
const benchMCPServer = `import json, sys
def reply(mid, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        continue
    if method == "initialize":
        reply(mid, {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                    "serverInfo": {"name": "agentbox-bench", "version": "1"}})
    elif method == "tools/list":
        reply(mid, {"tools": [{"name": "ping", "description": "Answer pong.", "inputSchema": {"type": "object", "properties": {}}}]})
    elif method == "tools/call":
        reply(mid, {"content": [{"type": "text", "text": "pong"}]})
    elif method == "ping":
        reply(mid, {})
    else:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no method " + str(method)}}) + "\n")
        sys.stdout.flush()
`

// mcpHostedLines times the ping tool of benchMCPServer hosted in a base
// sandbox (POST /mcp-servers, called over the daemon's streamable HTTP
// bridge in one go-sdk session), then the same server run by the bench
// on the host with python3 over stdio.
func (r *runner) mcpHostedLines(ctx context.Context) {
	if !r.wantAny(lineMCPHosted, lineMCPStdio) {
		return
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		r.note("%s and %s skipped: the host has no python3 to run the server directly", lineMCPHosted, lineMCPStdio)
		return
	}
	sb, err := r.c.CreateSandbox(ctx, createReq(mcpServerTemplate))
	if err != nil {
		r.note("%s skipped: creating a %s sandbox: %v", lineMCPHosted, mcpServerTemplate, err)
		return
	}
	defer r.destroy(ctx, sb.ID)
	n := r.opts.N * 4
	ping := func(cs *mcp.ClientSession) func(ctx context.Context) (time.Duration, error) {
		return func(ctx context.Context) (time.Duration, error) {
			return timed(func() error {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ping", Arguments: map[string]any{}})
				if err == nil && res.IsError {
					err = fmt.Errorf("the ping tool answered a tool error: %+v", res.Content)
				}
				return err
			})
		}
	}
	if r.want(lineMCPHosted) {
		if cs, err := r.hostBenchServer(ctx, sb.ID); err != nil {
			r.note("%s skipped: %v", lineMCPHosted, err)
		} else {
			res := r.sample(ctx, lineMCPHosted, GroupMCP, n, true, ping(cs))
			res.Floor = lineMCPStdio
			r.add(res)
			cs.Close()
		}
	}
	if r.want(lineMCPStdio) {
		cl := mcp.NewClient(&mcp.Implementation{Name: "agentbox-bench", Version: "1"}, nil)
		cctx, cancel := context.WithTimeout(ctx, sampleTimeout)
		cs, err := cl.Connect(cctx, &mcp.CommandTransport{Command: exec.Command(python, "-c", benchMCPServer)}, nil)
		cancel()
		if err != nil {
			r.note("%s skipped: starting the server on the host: %v", lineMCPStdio, err)
			return
		}
		r.add(r.sample(ctx, lineMCPStdio, GroupBaseline, n, true, ping(cs)))
		cs.Close()
	}
}

// hostBenchServer starts benchMCPServer in sandbox id and opens a session
// to it through the daemon.
func (r *runner) hostBenchServer(ctx context.Context, id string) (*mcp.ClientSession, error) {
	if _, err := r.c.WriteFile(ctx, id, "/srv/bench_mcp.py", strings.NewReader(benchMCPServer), 0o644); err != nil {
		return nil, fmt.Errorf("writing the server into the sandbox: %w", err)
	}
	if _, err := r.c.StartMCPServer(ctx, id, api.StartMCPServerRequest{Name: "bench", Command: []string{"python3", "/srv/bench_mcp.py"}}); err != nil {
		return nil, fmt.Errorf("hosting the server: %w", err)
	}
	var srv *api.MCPServer
	for deadline := time.Now().Add(sampleTimeout); ; {
		s, err := r.c.GetMCPServer(ctx, id, "bench")
		if err != nil {
			return nil, err
		}
		if s.State == api.MCPServerRunning && len(s.Tools) > 0 {
			srv = s
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the hosted server is %s after %v (%s %s)", s.State, sampleTimeout, s.LastError, s.Stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	endpoint, hc := r.c.MCPEndpoint(srv.Endpoint)
	cl := mcp.NewClient(&mcp.Implementation{Name: "agentbox-bench", Version: "1"}, nil)
	cctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	return cl.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
}
