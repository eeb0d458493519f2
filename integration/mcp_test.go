package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
)

// mcpConnect opens an MCP session, with the go-sdk client, to the daemon's
// streamable HTTP endpoint at path (over its unix socket) as c's key.
func mcpConnect(t testing.TB, c *client.Client, path string) *mcp.ClientSession {
	t.Helper()
	endpoint, hc := c.MCPEndpoint(path)
	cl := mcp.NewClient(&mcp.Implementation{Name: "agentbox-integration", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connecting to %s: %v", path, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// callTool calls a tool and returns its text and whether it is a tool
// error; a protocol error fails the test.
func callTool(t testing.TB, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

func mustTool(t testing.TB, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	out, isErr := callTool(t, cs, name, args)
	if isErr {
		t.Fatalf("%s(%v) answered a tool error: %s", name, args, out)
	}
	return out
}

var createdID = regexp.MustCompile(`created sandbox (\S+)`)

// mcpCreate makes a sandbox through the sandbox_create tool and destroys
// it (as admin) when the test ends.
func mcpCreate(t testing.TB, cs *mcp.ClientSession, args map[string]any) string {
	t.Helper()
	out := mustTool(t, cs, "sandbox_create", args)
	m := createdID.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("sandbox_create answered %q, want the id", out)
	}
	t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), m[1]) })
	return m[1]
}

// TestMCPTools drives agentbox's MCP tools over streamable HTTP with the
// go-sdk client: the tool list, a sandbox's life, exec, files, run_code,
// a tool error that leaves the session working, and the audit log.
func TestMCPTools(t *testing.T) {
	needBase(t)
	cs := mcpConnect(t, env.client, "/mcp")
	ctx := context.Background()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]*mcp.Tool{}
	for _, tl := range tools.Tools {
		have[tl.Name] = tl
	}
	for _, want := range []string{"sandbox_create", "sandbox_list", "sandbox_destroy", "exec", "file_read", "file_write",
		"file_list", "run_code", "desktop_screenshot", "desktop_action", "preview_url", "snapshot", "fork"} {
		tl, ok := have[want]
		if !ok {
			t.Errorf("tool %s missing; have %v", want, tools.Tools)
			continue
		}
		if tl.Description == "" || tl.InputSchema == nil {
			t.Errorf("tool %s has no description or schema", want)
		}
	}

	id := mcpCreate(t, cs, map[string]any{"template": "base", "ttl": "5m", "memory": "512M"})
	sb, err := env.client.GetSandbox(ctx, id)
	if err != nil || sb.Template != "base" || sb.Resources.MemoryMB != 512 || sb.ExpiresAt == nil {
		t.Fatalf("sandbox made by sandbox_create = %+v, %v; want base, 512 MiB, a TTL", sb, err)
	}
	if out := mustTool(t, cs, "sandbox_list", nil); !strings.Contains(out, id) {
		t.Errorf("sandbox_list = %q, want %s in it", out, id)
	}

	out := mustTool(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "echo out; echo err >&2; pwd", "cwd": "/tmp", "env": map[string]any{"X": "1"}})
	if !strings.Contains(out, "exit_code: 0") || !strings.Contains(out, "out\n/tmp") || !strings.Contains(out, "--- stderr ---\nerr") {
		t.Errorf("exec = %q", out)
	}
	out, isErr := callTool(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "exit 3"})
	if !isErr || !strings.Contains(out, "exit_code: 3") {
		t.Errorf("exec exit 3 = %q (error %v), want a tool error with exit_code: 3", out, isErr)
	}
	out, isErr = callTool(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "sleep 30", "timeout": "500ms"})
	if !isErr || !strings.Contains(out, "timed out") {
		t.Errorf("exec past its timeout = %q (error %v), want timed out", out, isErr)
	}

	mustTool(t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "/root/dir/hello.txt", "content": "héllo\n"})
	if got := mustTool(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "/root/dir/hello.txt"}); got != "héllo\n" {
		t.Errorf("file_read = %q", got)
	}
	if got := string(readAll(t, id, "/root/dir/hello.txt")); got != "héllo\n" {
		t.Errorf("the REST API reads %q from the file file_write wrote", got)
	}
	if got := mustTool(t, cs, "file_list", map[string]any{"sandbox_id": id, "path": "/root/dir"}); !strings.Contains(got, "/root/dir/hello.txt") {
		t.Errorf("file_list = %q", got)
	}
	if out, isErr := callTool(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "/nope"}); !isErr || !strings.Contains(out, "no such file") {
		t.Errorf("file_read of a missing file = %q (error %v), want a tool error", out, isErr)
	}

	// run_code needs a Jupyter kernel: base has none, and the tool error
	// names the template that has one.
	for _, lang := range []string{"python", "javascript"} {
		out, isErr = callTool(t, cs, "run_code", map[string]any{"sandbox_id": id, "language": lang, "code": "1"})
		if !isErr || !strings.Contains(out, "no "+lang+" kernel") || !strings.Contains(out, `"python"`) || !strings.Contains(out, "template base") {
			t.Errorf("run_code %s in base = %q (error %v), want a tool error naming the missing kernel and the python template", lang, out, isErr)
		}
	}
	testMCPRunCode(t, cs)

	// A capability the sandbox lacks is a tool error, not a broken session.
	out, isErr = callTool(t, cs, "desktop_screenshot", map[string]any{"sandbox_id": id})
	if !isErr || !strings.Contains(out, "no working desktop") || !strings.Contains(out, `template "desktop"`) {
		t.Errorf("desktop_screenshot = %q (error %v), want a tool error saying there is no desktop and which template has one", out, isErr)
	}
	bb := mcpCreate(t, cs, map[string]any{"template": "busybox"})
	out, isErr = callTool(t, cs, "run_code", map[string]any{"sandbox_id": bb, "language": "python", "code": "print(1)"})
	if !isErr || !strings.Contains(out, "no python kernel") {
		t.Errorf("run_code python in busybox = %q (error %v), want a tool error naming the missing kernel", out, isErr)
	}
	out, isErr = callTool(t, cs, "exec", map[string]any{"sandbox_id": "sb-nope", "command": "true"})
	if !isErr || !strings.Contains(out, "not found") {
		t.Errorf("exec in a missing sandbox = %q (error %v)", out, isErr)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "no_such_tool"}); err == nil {
		t.Error("calling an unknown tool succeeded")
	}
	if _, isErr := callTool(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "true"}); isErr {
		t.Error("the session does not work after tool errors")
	}

	mustTool(t, cs, "sandbox_destroy", map[string]any{"sandbox_id": bb})
	if sb, err := env.client.GetSandbox(ctx, bb); !errors.Is(err, errdefs.ErrNotFound) && (err != nil || sb.State != api.StateDestroyed) {
		t.Errorf("sandbox_destroy left %s: %+v, %v", bb, sb, err)
	}

	// The audit log has the calls: tool, sandbox, size, outcome; never the
	// arguments' contents.
	entries, err := env.client.Audit(ctx, 500)
	if err != nil {
		t.Fatal(err)
	}
	var sawExec, sawErr bool
	for _, e := range entries {
		if e.Method != "MCP" {
			continue
		}
		if strings.Contains(e.Path, "héllo") || strings.Contains(e.Path, "echo out") {
			t.Errorf("the audit log holds a tool's arguments: %+v", e)
		}
		if strings.HasPrefix(e.Path, "/mcp/agentbox/exec?arg_bytes=") && e.SandboxID == id && e.Status == 200 && strings.Contains(e.Path, "outcome=ok") {
			sawExec = true
		}
		if strings.HasPrefix(e.Path, "/mcp/agentbox/exec?") && strings.Contains(e.Path, "outcome=tool_error") && e.Status == 422 {
			sawErr = true
		}
	}
	if !sawExec || !sawErr {
		t.Errorf("the audit log lacks the exec tool calls (ok %v, tool error %v)", sawExec, sawErr)
	}
}

// testMCPRunCode drives run_code on the python template's kernel: state
// kept between calls, the stdout and stderr streams, a named context with
// its own state, a matplotlib plot as PNG image content, an exception as
// a tool error with its traceback, and a timeout, both leaving the state
// intact.
func testMCPRunCode(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	needPython(t)
	id := mcpCreate(t, cs, map[string]any{"template": "python", "memory": "1G"})
	mustTool(t, cs, "run_code", map[string]any{"sandbox_id": id, "code": "x = 41"})
	if out := mustTool(t, cs, "run_code", map[string]any{"sandbox_id": id, "code": "x + 1"}); out != "42" {
		t.Errorf("run_code x + 1 after x = 41 = %q, want 42", out)
	}
	out := mustTool(t, cs, "run_code", map[string]any{"sandbox_id": id, "language": "python", "timeout": "30s",
		"code": "import sys\nprint(sum(range(x + 60)))\nprint('e', file=sys.stderr)"})
	if !strings.Contains(out, "5050") || !strings.Contains(out, "--- stderr ---\ne") {
		t.Errorf("run_code with stdout and stderr = %q", out)
	}

	// A named context is its own kernel, made on first use.
	if out, isErr := callTool(t, cs, "run_code", map[string]any{"sandbox_id": id, "context": "other", "code": "x"}); !isErr || !strings.Contains(out, "NameError") {
		t.Errorf("x in a new context = %q (error %v), want a NameError", out, isErr)
	}
	mustTool(t, cs, "run_code", map[string]any{"sandbox_id": id, "context": "other", "code": "y = 'other'"})
	if out := mustTool(t, cs, "run_code", map[string]any{"sandbox_id": id, "context": "other", "code": "y"}); out != "'other'" {
		t.Errorf("y in context other = %q, want 'other'", out)
	}

	// A plot is image content holding a PNG.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"sandbox_id": id,
		"code": "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"}})
	if err != nil {
		t.Fatal(err)
	}
	var pngs int
	for _, c := range res.Content {
		if img, ok := c.(*mcp.ImageContent); ok {
			cfg, err := png.DecodeConfig(bytes.NewReader(img.Data))
			if img.MIMEType != "image/png" || err != nil || cfg.Width < 100 || cfg.Height < 100 {
				t.Errorf("image content %s of %d bytes: %+v, %v; want a PNG of a figure", img.MIMEType, len(img.Data), cfg, err)
			}
			pngs++
		}
	}
	if res.IsError || pngs != 1 {
		t.Errorf("a plot gave %d images (error %v), want one PNG: %+v", pngs, res.IsError, res.Content)
	}

	// An exception is a tool error with the traceback; the state stays.
	out, isErr := callTool(t, cs, "run_code", map[string]any{"sandbox_id": id, "code": "def f():\n    return 1 / 0\nf()"})
	if !isErr || !strings.Contains(out, "ZeroDivisionError: division by zero") || !strings.Contains(out, "1 / 0") {
		t.Errorf("run_code raising = %q (error %v), want a tool error with the traceback", out, isErr)
	}
	if out := mustTool(t, cs, "run_code", map[string]any{"sandbox_id": id, "code": "x"}); out != "41" {
		t.Errorf("x after an exception = %q, want 41", out)
	}

	// At its timeout a cell is interrupted, and the state stays.
	out, isErr = callTool(t, cs, "run_code", map[string]any{"sandbox_id": id, "timeout": "1s", "code": "import time\ntime.sleep(60)"})
	if !isErr || !strings.Contains(out, "timed out after 1s") || !strings.Contains(out, "state is kept") || !strings.Contains(out, "KeyboardInterrupt") {
		t.Errorf("run_code past its timeout = %q (error %v), want a tool error saying it timed out and kept the state", out, isErr)
	}
	if out := mustTool(t, cs, "run_code", map[string]any{"sandbox_id": id, "code": "x"}); out != "41" {
		t.Errorf("x after a timeout = %q, want 41", out)
	}
}

// TestMCPTenants runs sessions of two tenants at once: each sees only its
// own sandboxes, and cannot reach the other's through any tool or a
// hosted server's endpoint.
func TestMCPTenants(t *testing.T) {
	_, ca, _ := tenantKey(t, "mcpa", nil)
	_, cb, _ := tenantKey(t, "mcpb", nil)
	sa, sb := mcpConnect(t, ca, "/mcp"), mcpConnect(t, cb, "/mcp")
	var ida, idb string
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); ida = mcpCreateQuiet(t, sa) }()
	go func() { defer wg.Done(); idb = mcpCreateQuiet(t, sb) }()
	wg.Wait()
	if ida == "" || idb == "" {
		t.Fatal("a create failed")
	}
	for _, c := range []struct {
		cs         *mcp.ClientSession
		own, other string
	}{{sa, ida, idb}, {sb, idb, ida}} {
		list := mustTool(t, c.cs, "sandbox_list", nil)
		if !strings.Contains(list, c.own) || strings.Contains(list, c.other) {
			t.Errorf("sandbox_list = %q; want %s and not %s", list, c.own, c.other)
		}
		for tool, args := range map[string]map[string]any{
			"exec":            {"sandbox_id": c.other, "command": "id"},
			"file_read":       {"sandbox_id": c.other, "path": "/etc/hostname"},
			"run_code":        {"sandbox_id": c.other, "code": "1"},
			"sandbox_destroy": {"sandbox_id": c.other},
		} {
			out, isErr := callTool(t, c.cs, tool, args)
			if !isErr || !strings.Contains(out, "not found") {
				t.Errorf("%s on the other tenant's sandbox = %q (error %v), want not found", tool, out, isErr)
			}
		}
	}
	if _, err := env.client.GetSandbox(context.Background(), idb); err != nil {
		t.Errorf("tenant b's sandbox is gone: %v", err)
	}
	// A hosted server's routes are the sandbox owner's only.
	if _, err := ca.ListMCPServers(context.Background(), idb); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("tenant a lists tenant b's MCP servers: %v", err)
	}
	endpoint, hc := ca.MCPEndpoint("/v1/sandboxes/" + idb + "/mcp-servers/x/mcp")
	resp, err := hc.Post(endpoint, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("tenant a's POST to tenant b's hosted endpoint = %d, want 404", resp.StatusCode)
	}
	// A session belongs to its key: tenant a's session id does not work
	// with tenant b's key.
	sid := sa.ID()
	endpoint, hc = cb.MCPEndpoint("/mcp")
	req, _ := newJSONRequest(endpoint, `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`)
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("tenant a's session id with tenant b's key = %d, want 404", resp.StatusCode)
	}
}

func mcpCreateQuiet(t testing.TB, cs *mcp.ClientSession) string {
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "sandbox_create", Arguments: map[string]any{"template": "busybox"}})
	if err != nil || res.IsError {
		t.Errorf("sandbox_create: %v %+v", err, res)
		return ""
	}
	m := createdID.FindStringSubmatch(res.Content[0].(*mcp.TextContent).Text)
	if m == nil {
		return ""
	}
	t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), m[1]) })
	return m[1]
}

// mcpCLIEnv is the environment under which the CLI reaches the test daemon.
func mcpCLIEnv(key string) []string {
	return append(os.Environ(), "AGENTBOX_HOST=unix://"+env.cfg.Socket, "AGENTBOX_API_KEY="+key)
}

// TestMCPStdio drives `agentbox mcp` as an MCP client that launches
// commands does: the go-sdk client runs the CLI and talks on its stdin
// and stdout.
func TestMCPStdio(t *testing.T) {
	cmd := exec.Command(env.cliBin, "mcp")
	cmd.Env = mcpCLIEnv(env.key)
	cl := mcp.NewClient(&mcp.Implementation{Name: "agentbox-integration", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := cl.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got := cs.InitializeResult().ServerInfo.Name; got != "agentbox" {
		t.Errorf("server name over stdio = %q, want agentbox", got)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) < 13 {
		t.Fatalf("tools over stdio: %v, %d", err, len(tools.Tools))
	}
	id := mcpCreate(t, cs, map[string]any{"template": "busybox"})
	if out := mustTool(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "echo via-stdio"}); !strings.Contains(out, "via-stdio") {
		t.Errorf("exec over stdio = %q", out)
	}
	mustTool(t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "/tmp/s.txt", "content": "stdio file"})
	if got := mustTool(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "/tmp/s.txt"}); got != "stdio file" {
		t.Errorf("file_read over stdio = %q", got)
	}
}

// hostTestServer puts testdata/mcp/server.py into sandbox id and hosts it
// as name; it returns when the server runs.
func hostTestServer(t *testing.T, c *client.Client, id, name string) *api.MCPServer {
	t.Helper()
	ctx := context.Background()
	src, err := os.Open(filepath.Join("testdata", "mcp", "server.py"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, err := c.WriteFile(ctx, id, "/srv/server.py", src, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartMCPServer(ctx, id, api.StartMCPServerRequest{Name: name, Command: []string{"python3", "/srv/server.py"}, Cwd: "/srv"}); err != nil {
		t.Fatal(err)
	}
	return waitServer(t, c, id, name, func(s *api.MCPServer) bool { return s.State == api.MCPServerRunning })
}

func waitServer(t *testing.T, c *client.Client, id, name string, ok func(*api.MCPServer) bool) *api.MCPServer {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s, err := c.GetMCPServer(context.Background(), id, name)
		if err != nil {
			t.Fatal(err)
		}
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("MCP server %s: %+v", name, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMCPHostedServer hosts an untrusted stdio MCP server (testdata) in a
// sandbox with no egress and drives it through the daemon's endpoint: it
// sees the sandbox's files and not the host's, reaches no network until
// the sandbox's egress allows it, restarts after its process is killed,
// serves two clients at once, and its calls are audited.
func TestMCPHostedServer(t *testing.T) {
	needBase(t)
	ctx := context.Background()
	ti := newTestInternet(t)
	id := newSandbox(t, api.CreateSandboxRequest{Template: "base", MemoryMB: 512})
	srv := hostTestServer(t, env.client, id, "tools")
	if want := "/v1/sandboxes/" + id + "/mcp-servers/tools/mcp"; srv.Endpoint != want {
		t.Errorf("endpoint = %q, want %q", srv.Endpoint, want)
	}
	if strings.Join(srv.Tools, ",") != "fetch,list_dir,pid,read_file" {
		t.Errorf("tools = %v", srv.Tools)
	}
	cs := mcpConnect(t, env.client, srv.Endpoint)
	cs2 := mcpConnect(t, env.client, srv.Endpoint)

	mustSh(t, id, "mkdir -p /data && echo inside > /data/in.txt")
	if got := mustTool(t, cs, "list_dir", map[string]any{"path": "/data"}); got != "in.txt" {
		t.Errorf("list_dir /data = %q", got)
	}
	if got := mustTool(t, cs2, "read_file", map[string]any{"path": "/data/in.txt"}); got != "inside\n" {
		t.Errorf("read_file from a second client = %q", got)
	}
	planted := filepath.Join(t.TempDir(), "host-secret.txt")
	if err := os.WriteFile(planted, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, isErr := callTool(t, cs, "read_file", map[string]any{"path": planted}); !isErr || strings.Contains(out, "host secret") {
		t.Errorf("the hosted server read a file planted on the host: %q", out)
	}

	url := fmt.Sprintf("http://%s:8080/", ti.pub)
	if out, isErr := callTool(t, cs, "fetch", map[string]any{"url": url}); !isErr || strings.Contains(out, "hello from") {
		t.Errorf("with egress none the hosted server fetched %s: %q", url, out)
	}
	if _, err := env.client.SetEgress(ctx, id, api.EgressInternet, nil, nil); err != nil {
		t.Fatal(err)
	}
	if out := mustTool(t, cs, "fetch", map[string]any{"url": url}); !strings.Contains(out, "hello from") {
		t.Errorf("with egress internet fetch = %q", out)
	}

	// Kill the server's process: it is started again, and the same
	// client session works on.
	pid := mustTool(t, cs, "pid", nil)
	mustSh(t, id, "kill -9 "+pid)
	s := waitServer(t, env.client, id, "tools", func(s *api.MCPServer) bool {
		return s.Restarts >= 1 && s.State == api.MCPServerRunning
	})
	if !strings.Contains(s.LastError, "killed by SIGKILL") {
		t.Errorf("last error after the kill = %q, want killed by SIGKILL", s.LastError)
	}
	if got := mustTool(t, cs, "pid", nil); got == pid {
		t.Errorf("pid after the restart = %s, the killed one", got)
	}
	if got := mustTool(t, cs, "read_file", map[string]any{"path": "/data/in.txt"}); got != "inside\n" {
		t.Errorf("read_file after the restart = %q", got)
	}

	entries, err := env.client.Audit(ctx, 200)
	if err != nil {
		t.Fatal(err)
	}
	saw := false
	for _, e := range entries {
		if e.Method == "MCP" && strings.HasPrefix(e.Path, "/mcp/tools/read_file?") && e.SandboxID == id {
			saw = true
		}
	}
	if !saw {
		t.Error("the audit log lacks the hosted server's read_file calls")
	}

	if list, err := env.client.ListMCPServers(ctx, id); err != nil || len(list) != 1 {
		t.Errorf("list = %v, %v", list, err)
	}
	if _, err := env.client.StartMCPServer(ctx, id, api.StartMCPServerRequest{Name: "tools", Command: []string{"true"}}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a second server named tools = %v, want already exists", err)
	}
	if _, err := env.client.StartMCPServer(ctx, id, api.StartMCPServerRequest{Name: "Bad/Name", Command: []string{"true"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a bad name = %v, want invalid", err)
	}
	if err := env.client.StopMCPServer(ctx, id, "tools"); err != nil {
		t.Fatal(err)
	}
	if out := mustSh(t, id, "ps -eo args | grep -c '[s]erver.py' || true"); strings.TrimSpace(out) != "0" {
		t.Errorf("after DELETE %s server processes remain", out)
	}
	if _, err := env.client.GetMCPServer(ctx, id, "tools"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("get after DELETE = %v", err)
	}
}

// TestMCPHostCLI runs `agentbox mcp host --stdio` as a command-launching
// client would, with the go-sdk client on its stdin and stdout: a fresh
// sandbox hosts the server, and is destroyed when the client goes away.
func TestMCPHostCLI(t *testing.T) {
	needBase(t)
	tag := randHex(4)
	// The server's source reaches the sandbox through its command line:
	// the sandbox is made by the CLI itself.
	src, err := os.ReadFile(filepath.Join("testdata", "mcp", "server.py"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(env.cliBin, "mcp", "host", "--template", "base", "--egress", "none", "--meta", "mcp-test="+tag, "--name", "py", "--stdio",
		"--", "python3", "-c", string(src))
	cmd.Env = mcpCLIEnv(env.key)
	cl := mcp.NewClient(&mcp.Implementation{Name: "agentbox-integration", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs, err := cl.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustTool(t, cs, "list_dir", map[string]any{"path": "/"}); !strings.Contains(got, "etc") {
		t.Errorf("list_dir / = %q", got)
	}
	host, _ := os.Hostname()
	if got := mustTool(t, cs, "read_file", map[string]any{"path": "/etc/hostname"}); strings.TrimSpace(got) == host {
		t.Errorf("the hosted server read the host's hostname %q", got)
	}
	mine := client.ListOptions{Metadata: map[string]string{"mcp-test": tag}}
	if list, _ := env.client.ListSandboxes(ctx, mine); len(list) != 1 {
		t.Fatalf("sandboxes of mcp host while it runs: %v", list)
	}
	cs.Close() // the client goes away: the CLI destroys its sandbox
	deadline := time.Now().Add(time.Minute)
	for {
		list, _ := env.client.ListSandboxes(ctx, mine)
		if len(list) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox of mcp host --stdio outlived its client: %v", list)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func newJSONRequest(url, body string) (*http.Request, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, err
}

// TestMCPDesktop drives a desktop sandbox through the MCP tools alone, as
// a computer-use client would: desktop_screenshot starts the display on
// first use and returns a PNG of the screen with its size, desktop_action
// moves and clicks and returns a screenshot after.
func TestMCPDesktop(t *testing.T) {
	needDesktopTemplate(t)
	cs := mcpConnect(t, env.client, "/mcp")
	id := mcpCreate(t, cs, map[string]any{"template": "desktop"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	images := func(res *mcp.CallToolResult) (pics []*mcp.ImageContent, text string) {
		for _, c := range res.Content {
			switch c := c.(type) {
			case *mcp.ImageContent:
				pics = append(pics, c)
			case *mcp.TextContent:
				text += c.Text
			}
		}
		return pics, text
	}
	checkPNG := func(what string, img *mcp.ImageContent, w, h int) {
		t.Helper()
		if img.MIMEType != "image/png" {
			t.Fatalf("%s: MIME type %q, want image/png", what, img.MIMEType)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(img.Data))
		if err != nil || cfg.Width != w || cfg.Height != h {
			t.Fatalf("%s: a %dx%d PNG (%v), want %dx%d", what, cfg.Width, cfg.Height, err, w, h)
		}
	}

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "desktop_screenshot", Arguments: map[string]any{"sandbox_id": id}})
	if err != nil || res.IsError {
		t.Fatalf("desktop_screenshot: %v %+v", err, res)
	}
	pics, text := images(res)
	if len(pics) != 1 || text != "screen 1024x768 pixels" {
		t.Fatalf("desktop_screenshot gave %d images and %q, want one and the screen's size", len(pics), text)
	}
	checkPNG("desktop_screenshot", pics[0], 1024, 768)

	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "desktop_screenshot", Arguments: map[string]any{"sandbox_id": id, "scale": "0.5"}})
	if err != nil || res.IsError {
		t.Fatalf("desktop_screenshot at scale 0.5: %v %+v", err, res)
	}
	pics, text = images(res)
	if len(pics) != 1 || !strings.Contains(text, "image 512x384 of a screen 1024x768") {
		t.Fatalf("desktop_screenshot at scale 0.5 gave %d images and %q", len(pics), text)
	}
	checkPNG("desktop_screenshot at scale 0.5", pics[0], 512, 384)

	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "desktop_action", Arguments: map[string]any{"sandbox_id": id,
		"actions":    []map[string]any{{"type": "move", "x": 300, "y": 200}, {"type": "click", "x": 120, "y": 90}, {"type": "key", "keys": "Escape"}},
		"screenshot": true}})
	if err != nil || res.IsError {
		t.Fatalf("desktop_action: %v %+v", err, res)
	}
	pics, text = images(res)
	if text != "done: move, click, key; the pointer is at 120,90" || len(pics) != 1 {
		t.Fatalf("desktop_action gave %q and %d images", text, len(pics))
	}
	checkPNG("desktop_action's screenshot", pics[0], 1024, 768)

	// One action, given as action, and a bad one: tool errors, not a
	// broken session.
	if out := mustTool(t, cs, "desktop_action", map[string]any{"sandbox_id": id, "action": map[string]any{"type": "move", "x": 5, "y": 6}}); out != "done: move; the pointer is at 5,6" {
		t.Errorf("desktop_action with one action = %q", out)
	}
	if out, isErr := callTool(t, cs, "desktop_action", map[string]any{"sandbox_id": id, "actions": []map[string]any{{"type": "fly"}}}); !isErr || !strings.Contains(out, "fly") {
		t.Errorf("desktop_action of an unknown type = %q (error %v), want a tool error naming it", out, isErr)
	}
	if out, isErr := callTool(t, cs, "desktop_action", map[string]any{"sandbox_id": id}); !isErr || !strings.Contains(out, "no action given") {
		t.Errorf("desktop_action without actions = %q (error %v)", out, isErr)
	}
}
