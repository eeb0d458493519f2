package mcpserver

import (
	"context"
	"encoding/json"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Outcomes of a tool call in Call.Outcome.
const (
	OutcomeOK        = "ok"         // the tool answered
	OutcomeToolError = "tool_error" // the tool answered with isError (a failed command, a bad path)
	OutcomeError     = "error"      // the call failed as a protocol error (unknown tool, bad arguments)
)

// Call is what the audit log keeps of one tool call: never the
// arguments' contents, only their size.
type Call struct {
	Server    string // "agentbox", or a hosted server's name
	Tool      string
	SandboxID string // the sandbox_id argument, when the tool has one
	ArgBytes  int
	Duration  time.Duration
	Outcome   string
}

// Audit is a receiving middleware that reports every tools/call of server
// to record once it is answered.
func Audit(server string, record func(Call)) mcp.Middleware {
	return AuditCtx(server, func(_ context.Context, _ *mcp.CallToolRequest, c Call) { record(c) })
}

// AuditCtx is Audit with the call's context and request, for a recorder
// that needs to know who called (the request's HTTP header, in
// req.Extra).
func AuditCtx(server string, record func(context.Context, *mcp.CallToolRequest, Call)) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			ctr, ok := req.(*mcp.CallToolRequest)
			if method != "tools/call" || !ok || ctr.Params == nil {
				return next(ctx, method, req)
			}
			start := time.Now()
			res, err := next(ctx, method, req)
			c := Call{Server: server, Tool: ctr.Params.Name, ArgBytes: len(ctr.Params.Arguments), Duration: time.Since(start), Outcome: OutcomeOK}
			var args struct {
				SandboxID string `json:"sandbox_id"`
			}
			if json.Unmarshal(ctr.Params.Arguments, &args) == nil {
				c.SandboxID = args.SandboxID
			}
			switch r, _ := res.(*mcp.CallToolResult); {
			case err != nil:
				c.Outcome = OutcomeError
			case r != nil && r.IsError:
				c.Outcome = OutcomeToolError
			}
			record(ctx, ctr, c)
			return res, err
		}
	}
}
