package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// inspectorDir installs the pinned MCP Inspector CLI and conformance suite
// (testdata/mcp/tools) and returns the Inspector CLI's build directory.
// The Inspector runs there: 1.0.3 looks for its own package.json at
// "../package.json" from its working directory.
func inspectorDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(npmCache(t, "tools"), "node_modules", "@modelcontextprotocol", "inspector-cli", "build")
}

// inspectorResult is what the Inspector CLI prints: a tools/list or a
// tools/call result.
type inspectorResult struct {
	Tools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"inputSchema"`
	} `json:"tools"`
	Content []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		MIMEType string `json:"mimeType"`
	} `json:"content"`
	IsError bool `json:"isError"`
}

func (r inspectorResult) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func (r inspectorResult) toolNames() []string {
	var names []string
	for _, tl := range r.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// runInspector runs `mcp-inspector-cli --cli ARGS...` (a server command
// or URL, then --method and its options) under the CLI's environment for
// the test daemon, and decodes what it prints.
func runInspector(t *testing.T, dir string, args ...string) inspectorResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{"cli.js", "--cli"}, args...)...)
	cmd.Dir = dir
	cmd.Env = mcpCLIEnv(env.key)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mcp-inspector-cli --cli %q: %v\nstdout: %s\nstderr: %s", args, err, out, stderr.String())
	}
	var r inspectorResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("mcp-inspector-cli --cli %q printed %q: %v", args, out, err)
	}
	return r
}

// TestMCPInspector drives agentbox with the official MCP Inspector's CLI
// (@modelcontextprotocol/inspector-cli, pinned), one process per method
// as a shell script would: `agentbox mcp` over stdio and the daemon's
// /mcp over streamable HTTP each list the tools and run exec, file_write,
// file_read and run_code in a python sandbox.
func TestMCPInspector(t *testing.T) {
	needPython(t) // run_code's kernel
	dir := inspectorDir(t)
	addr := loopbackToSocket(t)
	id := newSandbox(t, api.CreateSandboxRequest{Template: "python", MemoryMB: 1024})
	for _, c := range []struct {
		name   string
		target []string
	}{
		{"stdio", []string{env.cliBin, "mcp"}},
		{"http", []string{"http://" + addr + "/mcp", "--transport", "http", "--header", "Authorization: Bearer " + env.key}},
	} {
		t.Run(c.name, func(t *testing.T) {
			call := func(tool string, args ...string) inspectorResult {
				t.Helper()
				a := append(append([]string{}, c.target...), "--method", "tools/call", "--tool-name", tool, "--tool-arg", "sandbox_id="+id)
				for _, kv := range args {
					a = append(a, "--tool-arg", kv)
				}
				r := runInspector(t, dir, a...)
				if r.IsError {
					t.Fatalf("%s %q answered a tool error: %s", tool, args, r.text())
				}
				return r
			}
			list := runInspector(t, dir, append(append([]string{}, c.target...), "--method", "tools/list")...)
			have := map[string]bool{}
			for _, tl := range list.Tools {
				have[tl.Name] = tl.Description != "" && len(tl.InputSchema) > 2
			}
			for _, want := range []string{"sandbox_create", "sandbox_list", "sandbox_destroy", "exec", "file_read", "file_write",
				"file_list", "run_code", "desktop_screenshot", "desktop_action", "preview_url", "snapshot", "fork"} {
				if !have[want] {
					t.Errorf("tools/list lacks %s, or its description or schema: %v", want, list.toolNames())
				}
			}
			if out := call("exec", "command=echo inspector-$((6 * 7))").text(); !strings.Contains(out, "exit_code: 0") || !strings.Contains(out, "inspector-42") {
				t.Errorf("exec = %q", out)
			}
			path := "/tmp/inspector-" + c.name + ".txt"
			call("file_write", "path="+path, "content=written by the inspector over "+c.name)
			if out := call("file_read", "path="+path).text(); out != "written by the inspector over "+c.name {
				t.Errorf("file_read = %q", out)
			}
			if out := call("run_code", "code=v = 6 * 7\nprint(f'{v} over "+c.name+"')").text(); out != "42 over "+c.name+"\n" {
				t.Errorf("run_code = %q, want 42 over %s", out, c.name)
			}
		})
	}
}

// TestMCPHostEndpoint runs `agentbox mcp host` without --stdio, with the
// CLI reaching the daemon over loopback TCP as a remote user's would: it
// makes a sandbox, starts the server, prints the endpoint and returns; the
// MCP Inspector's CLI then uses that endpoint with the API key, and
// `agentbox mcp ls` and `mcp rm` manage the server.
func TestMCPHostEndpoint(t *testing.T) {
	needBase(t)
	dir := inspectorDir(t)
	addr := loopbackToSocket(t)
	src, err := os.ReadFile(filepath.Join("testdata", "mcp", "server.py"))
	if err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, env.cliBin, args...)
		cmd.Env = append(mcpCLIEnv(env.key), "AGENTBOX_HOST=http://"+addr)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("agentbox %s: %v\nstdout: %s\nstderr: %s", args[0:2], err, out, stderr.String())
		}
		return string(out), stderr.String()
	}
	out, msg := cli("mcp", "host", "--template", "base", "--egress", "none", "--name", "py", "--", "python3", "-c", string(src))
	m := regexp.MustCompile(`^http://` + regexp.QuoteMeta(addr) + `/v1/sandboxes/([^/]+)/mcp-servers/py/mcp\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("mcp host printed %q, want the endpoint (and %q)", out, msg)
	}
	id := m[1]
	t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), id) })
	if !strings.Contains(msg, "agentbox mcp rm "+id+" py") || !strings.Contains(msg, "read_file") {
		t.Errorf("mcp host said %q, want the tools and how to stop it", msg)
	}
	target := []string{strings.TrimSpace(out), "--transport", "http", "--header", "Authorization: Bearer " + env.key}
	names := runInspector(t, dir, append(target, "--method", "tools/list")...).toolNames()
	if sort.Strings(names); strings.Join(names, ",") != "fetch,list_dir,pid,read_file" {
		t.Errorf("the Inspector lists the tools %v at the printed endpoint", names)
	}
	mustSh(t, id, "mkdir -p /data && echo endpoint > /data/e.txt")
	if r := runInspector(t, dir, append(target, "--method", "tools/call", "--tool-name", "read_file", "--tool-arg", "path=/data/e.txt")...); r.IsError || r.text() != "endpoint\n" {
		t.Errorf("read_file at the printed endpoint = %q (error %v)", r.text(), r.IsError)
	}
	if ls, _ := cli("mcp", "ls", id); !regexp.MustCompile(`(?m)^py\s+running\s+0\s+/v1/sandboxes/` + id + `/mcp-servers/py/mcp$`).MatchString(ls) {
		t.Errorf("mcp ls = %q", ls)
	}
	cli("mcp", "rm", id, "py")
	if _, err := env.client.GetMCPServer(context.Background(), id, "py"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("after mcp rm the server is %v", err)
	}
}
