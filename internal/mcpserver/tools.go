// Package mcpserver is agentbox's Model Context Protocol server: the tools
// that let any MCP client create sandboxes, run commands and code, and
// read and write files (Tools), an audit hook on every tool call (Audit),
// and a proxy that re-exposes another MCP session's tools (Proxy), which
// carries the hosted servers of internal/mcphost and `agentbox mcp` over
// stdio. The tools act through the Go SDK (client/), so a tool call has
// exactly the rights of the API key behind it. See docs/mcp.md.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/version"
)

// Limits on what a tool returns inline; bigger answers are cut and say so.
const (
	maxFileRead   = 1 << 20
	maxExecOutput = 1 << 20
	maxListed     = 2000
)

// ServerName is the name the agentbox MCP server reports at initialize.
const ServerName = "agentbox"

// New returns an MCP server whose tools act through c. audit, if not nil,
// is told of every tool call (Audit).
func New(c *client.Client, audit func(Call)) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: ServerName, Title: "agentbox sandboxes", Version: version.Version}, &mcp.ServerOptions{
		Instructions: "Create a disposable Linux sandbox with sandbox_create, then run commands (exec), code (run_code) and file operations in it by its sandbox_id; destroy it with sandbox_destroy when done.",
	})
	t := &tools{c: c}
	t.register(s)
	if audit != nil {
		s.AddReceivingMiddleware(Audit(ServerName, audit))
	}
	return s
}

type tools struct{ c *client.Client }

// The tools' arguments. Their jsonschema tags are the descriptions MCP
// clients show the model.
type (
	createArgs struct {
		Template string   `json:"template,omitempty" jsonschema:"template to start from: base (Debian with bash, python3, node), python (numpy, pandas, matplotlib), node, busybox; default base"`
		TTL      string   `json:"ttl,omitempty" jsonschema:"destroy the sandbox after this long, a duration such as 5m, 1h; default the daemon's"`
		CPU      float64  `json:"cpu,omitempty" jsonschema:"CPU cores, e.g. 0.5 or 2"`
		Memory   string   `json:"memory,omitempty" jsonschema:"memory limit such as 512M or 2G (a plain number is MiB)"`
		Egress   string   `json:"egress,omitempty" jsonschema:"network egress: none (default, loopback only), internet, or custom with allow/deny"`
		Allow    []string `json:"allow,omitempty" jsonschema:"with egress custom: domains (example.org, *.example.org), CIDRs or addresses, optionally with :port"`
		Deny     []string `json:"deny,omitempty" jsonschema:"rules that are refused even if allowed"`
	}
	idArgs struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id, as sandbox_create or sandbox_list returned it"`
	}
	listArgs struct{}
	execArgs struct {
		SandboxID string            `json:"sandbox_id" jsonschema:"the sandbox's id"`
		Command   string            `json:"command" jsonschema:"shell command line, run by /bin/sh -c inside the sandbox"`
		Cwd       string            `json:"cwd,omitempty" jsonschema:"working directory inside the sandbox"`
		Env       map[string]string `json:"env,omitempty" jsonschema:"extra environment variables"`
		Timeout   string            `json:"timeout,omitempty" jsonschema:"kill the command (and its children) after this long, a duration such as 30s; default 60s"`
	}
	readArgs struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
		Path      string `json:"path" jsonschema:"absolute path of the file inside the sandbox"`
	}
	writeArgs struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
		Path      string `json:"path" jsonschema:"absolute path of the file inside the sandbox; parent directories are made"`
		Content   string `json:"content" jsonschema:"the file's whole new content (UTF-8 text)"`
	}
	fileListArgs struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
		Path      string `json:"path" jsonschema:"absolute path of a directory inside the sandbox"`
		Depth     int    `json:"depth,omitempty" jsonschema:"how many levels to descend; default 1"`
	}
	previewArgs struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
		Port      int    `json:"port" jsonschema:"TCP port a server listens on inside the sandbox (127.0.0.1 is fine)"`
	}
	snapshotArgs struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
		Name      string `json:"name,omitempty" jsonschema:"a name for the snapshot, to start sandboxes from it later"`
	}
	forkArgs struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
		Count     int    `json:"count,omitempty" jsonschema:"how many independent copies; default 1"`
	}
)

func (t *tools) register(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_create", Description: "Create a disposable, isolated Linux sandbox and return its id. Every other tool takes that id as sandbox_id.",
		Annotations: &mcp.ToolAnnotations{Title: "Create sandbox"}}, t.create)
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_list", Description: "List the sandboxes this API key can see: id, state, template, expiry.",
		Annotations: &mcp.ToolAnnotations{Title: "List sandboxes", ReadOnlyHint: true}}, t.list)
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_destroy", Description: "Destroy a sandbox and everything in it.",
		Annotations: &mcp.ToolAnnotations{Title: "Destroy sandbox", DestructiveHint: ptr(true)}}, t.destroy)
	mcp.AddTool(s, &mcp.Tool{Name: "exec", Description: "Run a shell command in a sandbox and wait for it. Returns its exit code, stdout and stderr (each cut at 1 MiB, which the result says).",
		Annotations: &mcp.ToolAnnotations{Title: "Run a command"}}, t.exec)
	mcp.AddTool(s, &mcp.Tool{Name: "file_read", Description: "Read a text file inside a sandbox (at most 1 MiB is returned).",
		Annotations: &mcp.ToolAnnotations{Title: "Read a file", ReadOnlyHint: true}}, t.read)
	mcp.AddTool(s, &mcp.Tool{Name: "file_write", Description: "Write a file inside a sandbox, replacing it, making parent directories.",
		Annotations: &mcp.ToolAnnotations{Title: "Write a file"}}, t.write)
	mcp.AddTool(s, &mcp.Tool{Name: "file_list", Description: "List a directory inside a sandbox: type, size, mode and path of each entry.",
		Annotations: &mcp.ToolAnnotations{Title: "List files", ReadOnlyHint: true}}, t.fileList)
	mcp.AddTool(s, &mcp.Tool{Name: "run_code", Description: runCodeDescription,
		Annotations: &mcp.ToolAnnotations{Title: "Run code"}}, t.runCode)
	mcp.AddTool(s, &mcp.Tool{Name: "preview_url", Description: "Return the URL at which a server listening on a port inside the sandbox can be reached from outside.",
		Annotations: &mcp.ToolAnnotations{Title: "Preview URL", ReadOnlyHint: true}}, t.preview)
	mcp.AddTool(s, &mcp.Tool{Name: "snapshot", Description: "Take a consistent snapshot of a sandbox's files; new sandboxes can start from it.",
		Annotations: &mcp.ToolAnnotations{Title: "Snapshot"}}, t.snapshot)
	mcp.AddTool(s, &mcp.Tool{Name: "fork", Description: "Copy a running sandbox into independent children and return their ids.",
		Annotations: &mcp.ToolAnnotations{Title: "Fork"}}, t.fork)
	mcp.AddTool(s, &mcp.Tool{Name: "desktop_screenshot", Description: desktopScreenshotDescription,
		Annotations: &mcp.ToolAnnotations{Title: "Screenshot", ReadOnlyHint: true}}, t.desktopScreenshot)
	mcp.AddTool(s, &mcp.Tool{Name: "desktop_action", Description: desktopActionDescription,
		Annotations: &mcp.ToolAnnotations{Title: "Desktop action"}}, t.desktopAction)
}

func ptr[T any](v T) *T { return &v }

// text is a successful result of one text block.
func text(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// failed is a tool error: the model sees msg and can correct itself; the
// session goes on.
func failed(format string, args ...any) *mcp.CallToolResult {
	r := text(format, args...)
	r.IsError = true
	return r
}

// apiError turns an error of the API into a tool error.
func apiError(err error) (*mcp.CallToolResult, any, error) {
	return failed("%v", err), nil, nil
}

func jsonText(v any) *mcp.CallToolResult {
	b, _ := json.MarshalIndent(v, "", "  ")
	return text("%s", b)
}

func needID(id string) error {
	if id == "" {
		return errdefs.Invalid("sandbox_id is required; create a sandbox with sandbox_create or find one with sandbox_list")
	}
	return nil
}

func parseTimeout(s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, errdefs.Invalid("timeout must be a positive duration such as 30s or 5m, got %q", s)
	}
	return d, nil
}

func (t *tools) create(ctx context.Context, _ *mcp.CallToolRequest, in createArgs) (*mcp.CallToolResult, any, error) {
	req := api.CreateSandboxRequest{Template: in.Template, CPU: in.CPU}
	if in.TTL != "" {
		d, err := time.ParseDuration(in.TTL)
		if err != nil || d <= 0 {
			return failed("ttl must be a positive duration such as 5m or 2h, got %q", in.TTL), nil, nil
		}
		req.TTLSeconds = int64((d + time.Second - 1) / time.Second)
	}
	if in.Memory != "" {
		mb, err := parseMB(in.Memory)
		if err != nil {
			return apiError(err)
		}
		req.MemoryMB = mb
	}
	if in.Egress != "" || len(in.Allow) > 0 || len(in.Deny) > 0 {
		req.Network = &api.Network{Egress: in.Egress, Allow: in.Allow, Deny: in.Deny}
	}
	sb, err := t.c.CreateSandbox(ctx, req)
	if err != nil {
		return apiError(err)
	}
	return text("created sandbox %s (template %s, %s)%s", sb.ID, sb.Template, sb.Isolation, expiry(sb)), nil, nil
}

func expiry(sb *api.Sandbox) string {
	if sb.ExpiresAt == nil {
		return ""
	}
	return ", expires " + sb.ExpiresAt.UTC().Format(time.RFC3339)
}

// parseMB reads "512M", "2G", "1GiB" or a plain number of MiB.
func parseMB(s string) (int64, error) {
	v := strings.ToUpper(strings.TrimSpace(s))
	v = strings.TrimSuffix(strings.TrimSuffix(v, "B"), "I")
	mult := int64(1)
	switch {
	case strings.HasSuffix(v, "G"):
		mult, v = 1024, strings.TrimSuffix(v, "G")
	case strings.HasSuffix(v, "M"):
		v = strings.TrimSuffix(v, "M")
	}
	var n int64
	if _, err := fmt.Sscan(v, &n); err != nil || n <= 0 || fmt.Sprint(n) != v {
		return 0, errdefs.Invalid("memory must be a size such as 512M or 2G, got %q", s)
	}
	return n * mult, nil
}

func (t *tools) list(ctx context.Context, _ *mcp.CallToolRequest, _ listArgs) (*mcp.CallToolResult, any, error) {
	list, err := t.c.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		return apiError(err)
	}
	if len(list) == 0 {
		return text("no sandboxes; create one with sandbox_create"), nil, nil
	}
	var b strings.Builder
	for _, sb := range list {
		fmt.Fprintf(&b, "%s %s template=%s%s\n", sb.ID, sb.State, sb.Template, expiry(&sb))
	}
	return text("%s", b.String()), nil, nil
}

func (t *tools) destroy(ctx context.Context, _ *mcp.CallToolRequest, in idArgs) (*mcp.CallToolResult, any, error) {
	if err := needID(in.SandboxID); err != nil {
		return apiError(err)
	}
	if err := t.c.DestroySandbox(ctx, in.SandboxID); err != nil {
		return apiError(err)
	}
	return text("destroyed sandbox %s", in.SandboxID), nil, nil
}

func (t *tools) exec(ctx context.Context, _ *mcp.CallToolRequest, in execArgs) (*mcp.CallToolResult, any, error) {
	if err := needID(in.SandboxID); err != nil {
		return apiError(err)
	}
	if strings.TrimSpace(in.Command) == "" {
		return failed("command is required: a shell command line such as \"ls -la /root\""), nil, nil
	}
	timeout, err := parseTimeout(in.Timeout, time.Minute)
	if err != nil {
		return apiError(err)
	}
	res, err := t.c.Exec(ctx, in.SandboxID, api.ExecRequest{Shell: in.Command, Cwd: in.Cwd, Env: in.Env,
		TimeoutMs: timeout.Milliseconds(), MaxOutputBytes: maxExecOutput})
	if err != nil {
		return apiError(err)
	}
	return execResult(res)
}

// execResult is an exec's answer as one text block: the exit status line,
// then stdout and stderr.
func execResult(res *api.ExecResult) (*mcp.CallToolResult, any, error) {
	stdout, stderr, err := client.DecodeOutput(res)
	if err != nil {
		return apiError(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "exit_code: %d", res.ExitCode)
	if res.Signal != "" {
		fmt.Fprintf(&b, " (killed by %s)", res.Signal)
	}
	if res.TimedOut {
		b.WriteString(" (timed out: killed)")
	}
	if res.Truncated {
		b.WriteString(" (output truncated at 1 MiB per stream)")
	}
	fmt.Fprintf(&b, "\n--- stdout ---\n%s", stdout)
	if len(stderr) > 0 {
		fmt.Fprintf(&b, "\n--- stderr ---\n%s", stderr)
	}
	r := text("%s", b.String())
	r.IsError = res.ExitCode != 0 || res.TimedOut
	return r, nil, nil
}

func (t *tools) read(ctx context.Context, _ *mcp.CallToolRequest, in readArgs) (*mcp.CallToolResult, any, error) {
	if err := needID(in.SandboxID); err != nil {
		return apiError(err)
	}
	rc, err := t.c.ReadFile(ctx, in.SandboxID, in.Path)
	if err != nil {
		return apiError(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxFileRead+1))
	if err != nil {
		return apiError(err)
	}
	if len(b) > maxFileRead {
		return text("%s\n[cut: the file is larger than 1 MiB; read the rest with exec, e.g. tail -c +%d]", b[:maxFileRead], maxFileRead+1), nil, nil
	}
	return text("%s", b), nil, nil
}

func (t *tools) write(ctx context.Context, _ *mcp.CallToolRequest, in writeArgs) (*mcp.CallToolResult, any, error) {
	if err := needID(in.SandboxID); err != nil {
		return apiError(err)
	}
	fi, err := t.c.WriteFile(ctx, in.SandboxID, in.Path, strings.NewReader(in.Content), 0o644)
	if err != nil {
		return apiError(err)
	}
	return text("wrote %d bytes to %s", fi.Size, fi.Path), nil, nil
}

func (t *tools) fileList(ctx context.Context, _ *mcp.CallToolRequest, in fileListArgs) (*mcp.CallToolResult, any, error) {
	if err := needID(in.SandboxID); err != nil {
		return apiError(err)
	}
	depth := in.Depth
	if depth <= 0 {
		depth = 1
	}
	list, err := t.c.ListFiles(ctx, in.SandboxID, in.Path, depth)
	if err != nil {
		return apiError(err)
	}
	var b strings.Builder
	for i, f := range list {
		if i == maxListed {
			fmt.Fprintf(&b, "[%d more entries not shown; list a subdirectory]\n", len(list)-i)
			break
		}
		fmt.Fprintf(&b, "%-7s %s %10d %s\n", f.Type, f.Mode, f.Size, f.Path)
	}
	if len(list) == 0 {
		b.WriteString("(empty directory)\n")
	}
	return text("%s", b.String()), nil, nil
}

func (t *tools) preview(ctx context.Context, _ *mcp.CallToolRequest, in previewArgs) (*mcp.CallToolResult, any, error) {
	if err := needID(in.SandboxID); err != nil {
		return apiError(err)
	}
	if in.Port < 1 || in.Port > 65535 {
		return failed("port must be 1-65535, got %d", in.Port), nil, nil
	}
	u, err := t.c.PreviewURL(ctx, in.SandboxID, in.Port)
	if err != nil {
		return apiError(err)
	}
	return text("%s", u), nil, nil
}

func (t *tools) snapshot(ctx context.Context, _ *mcp.CallToolRequest, in snapshotArgs) (*mcp.CallToolResult, any, error) {
	if err := needID(in.SandboxID); err != nil {
		return apiError(err)
	}
	snap, err := t.c.CreateSnapshot(ctx, in.SandboxID, in.Name)
	if err != nil {
		return apiError(err)
	}
	return jsonText(snap), nil, nil
}

func (t *tools) fork(ctx context.Context, _ *mcp.CallToolRequest, in forkArgs) (*mcp.CallToolResult, any, error) {
	if err := needID(in.SandboxID); err != nil {
		return apiError(err)
	}
	n := in.Count
	if n <= 0 {
		n = 1
	}
	kids, err := t.c.ForkSandbox(ctx, in.SandboxID, n)
	if err != nil {
		return apiError(err)
	}
	var ids bytes.Buffer
	for _, k := range kids {
		ids.WriteString(k.ID + "\n")
	}
	return text("forked %s into %d sandbox(es):\n%s", in.SandboxID, len(kids), ids.String()), nil, nil
}
