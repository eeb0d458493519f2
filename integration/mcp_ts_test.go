package integration

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

// tsClientDir installs the pinned MCP TypeScript SDK (testdata/mcp/ts)
// into the build cache once, and returns the directory with client.mjs in
// it.
func tsClientDir(t *testing.T) string {
	t.Helper()
	dir := npmCache(t, "ts")
	script, err := os.ReadFile(filepath.Join("testdata", "mcp", "ts", "client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "client.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// loopbackToSocket serves the daemon's unix socket on a loopback TCP port
// (the test daemon listens on the socket only; Node's fetch wants TCP) and
// returns its address.
func loopbackToSocket(t *testing.T) string {
	t.Helper()
	ln := serveTCP(t, "tcp4", "127.0.0.1:0", func(c net.Conn) {
		go func() {
			defer c.Close()
			u, err := net.Dial("unix", env.cfg.Socket)
			if err != nil {
				return
			}
			defer u.Close()
			go func() { _, _ = io.Copy(u, c); u.(*net.UnixConn).CloseWrite() }()
			_, _ = io.Copy(c, u)
		}()
	})
	return ln.Addr().String()
}

type tsResult struct {
	Server    string   `json:"server"`
	Tools     []string `json:"tools"`
	ID        string   `json:"id"`
	Exec      string   `json:"exec"`
	ExecError bool     `json:"execError"`
	Read      string   `json:"read"`
	BadError  bool     `json:"badError"`
	After     string   `json:"after"`
	Destroy   string   `json:"destroy"`
	List      string   `json:"list"`
	IsError   bool     `json:"isError"`

	CodeState   string   `json:"codeState"`
	CodeImages  []string `json:"codeImages"`
	CodeError   string   `json:"codeError"`
	CodeIsError bool     `json:"codeIsError"`
}

func runTSClient(t *testing.T, dir string, args ...string) tsResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{"client.mjs"}, args...)...)
	cmd.Dir = dir
	cmd.Env = mcpCLIEnv(env.key)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client.mjs %s: %v\nstdout: %s\nstderr: %s", args[0], err, out, stderr.String())
	}
	var r tsResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("node client.mjs %s printed %q: %v", args[0], out, err)
	}
	return r
}

// TestMCPTypeScriptClient drives agentbox with the official MCP
// TypeScript SDK's client: `agentbox mcp` over stdio, the daemon's /mcp
// over streamable HTTP (each: a sandbox's tools, and run_code on the
// python template), and a hosted server's endpoint.
func TestMCPTypeScriptClient(t *testing.T) {
	needPython(t) // run_code's kernel
	dir := tsClientDir(t)
	addr := loopbackToSocket(t)
	for _, c := range []struct{ name, target string }{
		{"stdio", env.cliBin},
		{"http", "http://" + addr + "/mcp"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runTSClient(t, dir, c.name, c.target, env.key)
			if r.Server != "agentbox" || len(r.Tools) < 13 {
				t.Errorf("server %q with tools %v", r.Server, r.Tools)
			}
			if !strings.Contains(r.Exec, "ts-42") || r.ExecError {
				t.Errorf("exec = %q (error %v)", r.Exec, r.ExecError)
			}
			if r.Read != "from typescript" {
				t.Errorf("file_read = %q", r.Read)
			}
			if !r.BadError || !strings.Contains(r.After, "still") {
				t.Errorf("exec without a command: error %v; the call after it = %q", r.BadError, r.After)
			}
			if !strings.Contains(r.Destroy, "destroyed") {
				t.Errorf("sandbox_destroy = %q", r.Destroy)
			}
			if r.CodeState != "ts-42\n" {
				t.Errorf("run_code print(x) after x = 6 * 7 = %q, want ts-42", r.CodeState)
			}
			if strings.Join(r.CodeImages, ",") != "image/png PNG" {
				t.Errorf("run_code of a plot gave images %q, want one PNG", r.CodeImages)
			}
			if !r.CodeIsError || !strings.Contains(r.CodeError, "ZeroDivisionError") {
				t.Errorf("run_code 1 / 0 = %q (error %v), want a tool error with the traceback", r.CodeError, r.CodeIsError)
			}
		})
	}
	t.Run("hosted", func(t *testing.T) {
		needBase(t) // the test server is python
		id := newSandbox(t, api.CreateSandboxRequest{Template: "base"})
		mustSh(t, id, "mkdir -p /data && touch /data/a /data/b")
		srv := hostTestServer(t, env.client, id, "ts")
		r := runTSClient(t, dir, "hosted", "http://"+addr+srv.Endpoint, env.key)
		sort.Strings(r.Tools)
		if strings.Join(r.Tools, ",") != "fetch,list_dir,pid,read_file" || r.List != "a\nb" || r.IsError {
			t.Errorf("hosted server through the TypeScript client: %+v", r)
		}
	})
}
