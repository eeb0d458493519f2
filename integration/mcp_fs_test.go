package integration

import (
	"archive/tar"
	"context"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

// npmCache installs testdata/mcp/NAME's pinned packages (its package.json
// and committed package-lock.json) with npm ci on the host into the build
// cache, once per lockfile, and returns the directory. Node.js and npm are
// installed first where they are missing.
func npmCache(t *testing.T, name string) string {
	t.Helper()
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			cmd := exec.Command(filepath.Join(env.repo, "scripts", "install-test-deps.sh"))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("installing Node.js and npm (scripts/install-test-deps.sh): %v\n%s", err, out)
			}
			break
		}
	}
	src := filepath.Join("testdata", "mcp", name)
	dir := filepath.Join("/var/lib/agentbox/build", "mcp-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	same := true
	for _, f := range []string{"package.json", "package-lock.json"} {
		want, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if old, _ := os.ReadFile(filepath.Join(dir, f)); string(old) != string(want) {
			same = false
			if err := os.WriteFile(filepath.Join(dir, f), want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// npm ci writes this marker last: a cache whose install was cut short
	// is installed again.
	done := filepath.Join(dir, "node_modules", ".package-lock.json")
	if _, err := os.Stat(done); err != nil || !same {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--omit=dev")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	return dir
}

// mcpTarDir streams dir as a tar archive (regular files, directories and
// symlinks).
func mcpTarDir(dir string) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == dir {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			link := ""
			if fi.Mode()&fs.ModeSymlink != 0 {
				if link, err = os.Readlink(p); err != nil {
					return err
				}
			}
			h, err := tar.FileInfoHeader(fi, link)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			h.Name = filepath.ToSlash(rel)
			h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if fi.Mode().IsRegular() {
				f, err := os.Open(p)
				if err != nil {
					return err
				}
				defer f.Close()
				_, err = io.Copy(tw, f)
				return err
			}
			return nil
		})
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr
}

// TestMCPHostedFilesystemServer hosts a real third-party server,
// @modelcontextprotocol/server-filesystem (installed with npm on the host,
// uploaded into a base sandbox with egress none: the sandbox never reaches
// a registry), allowed the whole of "/" so that only the sandbox stands
// between it and the host. It lists and reads the sandbox's files, cannot
// read a file planted on the host, and is restarted after a kill. The
// go-sdk client and the MCP Inspector's CLI both drive it.
func TestMCPHostedFilesystemServer(t *testing.T) {
	needBase(t)
	ctx := context.Background()
	dir := npmCache(t, "fs")
	id := newSandbox(t, api.CreateSandboxRequest{Template: "base", MemoryMB: 1024, DiskMB: 1024})
	mustSh(t, id, "mkdir -p /opt/mcp-fs /data && echo sandboxed > /data/in.txt")
	arch := mcpTarDir(dir) // node_modules and package.json, as npm left them
	defer arch.Close()
	if err := env.client.UploadArchive(ctx, id, "/opt/mcp-fs", arch); err != nil {
		t.Fatal(err)
	}
	_, err := env.client.StartMCPServer(ctx, id, api.StartMCPServerRequest{Name: "fs",
		Command: []string{"node", "/opt/mcp-fs/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "/"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := waitServer(t, env.client, id, "fs", func(s *api.MCPServer) bool {
		if s.Restarts > 0 {
			t.Fatalf("server-filesystem did not start: %s\n%s", s.LastError, s.Stderr)
		}
		return s.State == api.MCPServerRunning
	})
	cs := mcpConnect(t, env.client, srv.Endpoint)
	if out := mustTool(t, cs, "list_directory", map[string]any{"path": "/data"}); !strings.Contains(out, "in.txt") {
		t.Errorf("list_directory /data = %q", out)
	}
	if out := mustTool(t, cs, "read_text_file", map[string]any{"path": "/data/in.txt"}); !strings.Contains(out, "sandboxed") {
		t.Errorf("read_text_file /data/in.txt = %q", out)
	}
	planted := filepath.Join(t.TempDir(), "planted-on-host.txt")
	if err := os.WriteFile(planted, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, isErr := callTool(t, cs, "read_text_file", map[string]any{"path": planted}); !isErr || strings.Contains(out, "host secret") {
		t.Errorf("server-filesystem read a file planted on the host: %q (error %v)", out, isErr)
	}

	// The MCP Inspector's CLI, over the endpoint, as a client on the host
	// would use it.
	url := "http://" + loopbackToSocket(t) + srv.Endpoint
	insp := func(args ...string) inspectorResult {
		t.Helper()
		return runInspector(t, inspectorDir(t), append([]string{url, "--transport", "http", "--header", "Authorization: Bearer " + env.key, "--method"}, args...)...)
	}
	if names := strings.Join(insp("tools/list").toolNames(), ","); !strings.Contains(names, "list_directory") || !strings.Contains(names, "read_text_file") {
		t.Errorf("the Inspector lists the tools %s", names)
	}
	if r := insp("tools/call", "--tool-name", "list_directory", "--tool-arg", "path=/data"); r.IsError || !strings.Contains(r.text(), "in.txt") {
		t.Errorf("the Inspector's list_directory /data = %q (error %v)", r.text(), r.IsError)
	}
	if r := insp("tools/call", "--tool-name", "read_text_file", "--tool-arg", "path=/data/in.txt"); r.IsError || !strings.Contains(r.text(), "sandboxed") {
		t.Errorf("the Inspector's read_text_file /data/in.txt = %q (error %v)", r.text(), r.IsError)
	}
	if r := insp("tools/call", "--tool-name", "read_text_file", "--tool-arg", "path="+planted); !r.IsError || strings.Contains(r.text(), "host secret") {
		t.Errorf("through the Inspector server-filesystem read a file planted on the host: %q (error %v)", r.text(), r.IsError)
	}

	mustSh(t, id, "pkill -9 -f 'server-filesystem/dist/index[.]js'") // the pattern does not match this shell's own command line
	waitServer(t, env.client, id, "fs", func(s *api.MCPServer) bool { return s.Restarts >= 1 && s.State == api.MCPServerRunning })
	if out := mustTool(t, cs, "read_text_file", map[string]any{"path": "/data/in.txt"}); !strings.Contains(out, "sandboxed") {
		t.Errorf("read_text_file after the restart = %q", out)
	}
}
