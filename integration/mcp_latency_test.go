package integration

import (
	"context"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/api"
)

// mcpP50 runs f n times and returns the median duration.
func mcpP50(t *testing.T, n int, f func()) time.Duration {
	t.Helper()
	d := make([]time.Duration, n)
	for i := range d {
		start := time.Now()
		f()
		d[i] = time.Since(start)
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[n/2]
}

// TestMCPLatency measures, and prints, what MCP adds: an exec tool call of
// `true` over streamable HTTP against the REST exec, and a hosted server's
// tool through the daemon against the same server over stdio on the host.
// It judges no timing (machine speed is no verdict); it fails only if a
// call fails. Figures: go test -count=1 -run TestMCPLatency -v ./integration/
func TestMCPLatency(t *testing.T) {
	needBase(t)
	ctx := context.Background()
	const n = 200
	id := newSandbox(t, api.CreateSandboxRequest{Template: "base"})
	rest := mcpP50(t, n, func() {
		if _, err := env.client.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	})
	restShell := mcpP50(t, n, func() {
		if _, err := env.client.Exec(ctx, id, api.ExecRequest{Shell: "true"}); err != nil {
			t.Fatal(err)
		}
	})
	cs := mcpConnect(t, env.client, "/mcp")
	tool := mcpP50(t, n, func() { mustTool(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "true"}) })
	// preview_url reads the sandbox and nothing else: the MCP transport and
	// the tool machinery without the exec.
	bare := mcpP50(t, n, func() { mustTool(t, cs, "preview_url", map[string]any{"sandbox_id": id, "port": 8000}) })
	get := mcpP50(t, n, func() {
		if _, err := env.client.GetSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("a tool that only reads the sandbox (preview_url) p50 %v; REST GET of the sandbox p50 %v", bare, get)
	t.Logf("exec of true: REST p50 %v (argv), %v (shell), MCP exec tool call over HTTP (a shell line) p50 %v (+%v over REST shell)", rest, restShell, tool, tool-restShell)

	srv := hostTestServer(t, env.client, id, "lat")
	hosted := mcpConnect(t, env.client, srv.Endpoint)
	viaDaemon := mcpP50(t, n, func() { mustTool(t, hosted, "pid", nil) })
	cmd := exec.Command("python3", filepath.Join("testdata", "mcp", "server.py"))
	direct, err := mcp.NewClient(&mcp.Implementation{Name: "direct"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	onHost := mcpP50(t, n, func() { mustTool(t, direct, "pid", nil) })
	t.Logf("hosted server's pid tool: through the daemon p50 %v, over stdio on the host p50 %v (+%v)", viaDaemon, onHost, viaDaemon-onHost)
}
