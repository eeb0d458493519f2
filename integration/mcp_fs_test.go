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

	"github.com/agentbox/agentbox/api"
)

// npmCache installs testdata/mcp/NAME/package.json's pinned packages with
// npm on the host into the build cache, once, and returns the directory.
func npmCache(t *testing.T, name string) string {
	t.Helper()
	pkg, err := os.ReadFile(filepath.Join("testdata", "mcp", name, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("/var/lib/agentbox/build", "mcp-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(filepath.Join(dir, "package.json"))
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil || string(old) != string(pkg) {
		if err := os.WriteFile(filepath.Join(dir, "package.json"), pkg, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--omit=dev")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm install in %s: %v\n%s", dir, err, out)
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
// read a file planted on the host, and is restarted after a kill.
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

	mustSh(t, id, "pkill -9 -f 'server-filesystem/dist/index[.]js'") // the pattern does not match this shell's own command line
	waitServer(t, env.client, id, "fs", func(s *api.MCPServer) bool { return s.Restarts >= 1 && s.State == api.MCPServerRunning })
	if out := mustTool(t, cs, "read_text_file", map[string]any{"path": "/data/in.txt"}); !strings.Contains(out, "sandboxed") {
		t.Errorf("read_text_file after the restart = %q", out)
	}
}
