package cli

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// fakeDaemon is an in-memory stand-in for the daemon's HTTP API: enough
// of it to drive every verb over real HTTP.
type fakeDaemon struct {
	mu        sync.Mutex
	sandboxes map[string]*api.Sandbox
	created   []api.CreateSandboxRequest
	execs     []api.ExecRequest
	files     map[string][]byte // "id:/path" -> contents
	modes     map[string]string
	archives  map[string][]string // "id:/dir" -> "name mode" of uploaded entries
	destroyed []string
	imported  []api.ImportTemplateRequest
	hang      bool // exec/stream waits for the client to leave
	// exit is the exit event /exec/stream ends with.
	exit api.ExecEvent
}

func newFakeDaemon(t *testing.T) *fakeDaemon {
	f := &fakeDaemon{
		sandboxes: map[string]*api.Sandbox{},
		files:     map[string][]byte{},
		modes:     map[string]string{},
		archives:  map[string][]string{},
	}
	zero := 0
	f.exit = api.ExecEvent{Type: api.EventExit, ExitCode: &zero}
	srv := httptest.NewServer(f.mux(t))
	t.Cleanup(srv.Close)
	t.Setenv("AGENTBOX_HOST", srv.URL)
	t.Setenv("AGENTBOX_API_KEY", "test-key")
	return f
}

func writeErr(w http.ResponseWriter, err error) {
	code, status := errdefs.Code(err)
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: err.Error()}})
}

func (f *fakeDaemon) mux(t *testing.T) http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		var req api.CreateSandboxRequest
		json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.created = append(f.created, req)
		id := "sb-" + string(rune('a'+len(f.created)-1))
		sb := &api.Sandbox{ID: id, State: api.StateRunning, Template: req.Template, CreatedAt: time.Now().Add(-2 * time.Minute), Metadata: req.Metadata}
		f.sandboxes[id] = sb
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(sb)
	})
	m.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		out := api.ListSandboxesResponse{Sandboxes: []api.Sandbox{}}
		for _, sb := range f.sandboxes {
			if s := r.URL.Query().Get("state"); s != "" && sb.State != s {
				continue
			}
			out.Sandboxes = append(out.Sandboxes, *sb)
		}
		json.NewEncoder(w).Encode(out)
	})
	m.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		sb, ok := f.sandboxes[r.PathValue("id")]
		if !ok {
			writeErr(w, errdefs.NotFound("sandbox %q not found", r.PathValue("id")))
			return
		}
		json.NewEncoder(w).Encode(sb)
	})
	m.HandleFunc("PATCH /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		var req api.UpdateSandboxRequest
		json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		defer f.mu.Unlock()
		sb, ok := f.sandboxes[r.PathValue("id")]
		if !ok {
			writeErr(w, errdefs.NotFound("sandbox %q not found", r.PathValue("id")))
			return
		}
		sb.ExpiresAt = nil
		if req.TTLSeconds != nil && *req.TTLSeconds > 0 {
			e := time.Now().Add(time.Duration(*req.TTLSeconds) * time.Second)
			sb.ExpiresAt = &e
		}
		json.NewEncoder(w).Encode(sb)
	})
	m.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		id := r.PathValue("id")
		if _, ok := f.sandboxes[id]; !ok {
			writeErr(w, errdefs.NotFound("sandbox %q not found", id))
			return
		}
		delete(f.sandboxes, id)
		f.destroyed = append(f.destroyed, id)
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("POST /v1/sandboxes/{id}/exec/stream", func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).EnableFullDuplex()
		br := bufio.NewReader(r.Body)
		var req api.ExecRequest
		line, _ := br.ReadBytes('\n')
		json.Unmarshal(line, &req)
		f.mu.Lock()
		f.execs = append(f.execs, req)
		exit, hang := f.exit, f.hang
		f.mu.Unlock()
		if hang {
			json.NewEncoder(w).Encode(api.ExecEvent{Type: api.EventStart, Pid: 7})
			http.NewResponseController(w).Flush()
			// Read the body to its end, as the guest does: net/http
			// notices the client leaving (and ends r.Context) only
			// once the body is consumed; left unread, a cancelled
			// client goes unnoticed and httptest's Close waits forever.
			io.Copy(io.Discard, br)
			<-r.Context().Done()
			return
		}
		enc := json.NewEncoder(w)
		enc.Encode(api.ExecEvent{Type: api.EventStart, Pid: 7})
		enc.Encode(api.ExecEvent{Type: api.EventStdout, Data: []byte("out:" + strings.Join(req.Cmd, "|") + "\n")})
		enc.Encode(api.ExecEvent{Type: api.EventStderr, Data: []byte("err\n")})
		if req.StdinStream {
			dec := json.NewDecoder(br)
			for {
				var fr api.StdinFrame
				if dec.Decode(&fr) != nil {
					break
				}
				if len(fr.Data) > 0 {
					enc.Encode(api.ExecEvent{Type: api.EventStdout, Data: fr.Data})
				}
				if fr.EOF {
					break
				}
			}
		}
		// The body to its end before the exit event, as the guest does:
		// left unread, net/http may panic reading the next request while
		// the full-duplex body is still being read ("invalid concurrent
		// Body.Read call") and drop the connection.
		io.Copy(io.Discard, br)
		enc.Encode(exit)
	})
	m.HandleFunc("POST /v1/templates", func(w http.ResponseWriter, r *http.Request) {
		var req api.ImportTemplateRequest
		json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.imported = append(f.imported, req)
		f.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(api.Template{Name: req.Name, Version: "v1"})
	})
	m.HandleFunc("GET /v1/templates", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.ListTemplatesResponse{Templates: []api.Template{
			{Name: "base", Version: "v3", SizeBytes: 300 << 20, CreatedAt: time.Now().Add(-3 * time.Hour)},
		}})
	})
	m.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.Health{Status: "ok", Version: "9.9.9"})
	})
	key := func(r *http.Request) string { return r.PathValue("id") + ":" + r.URL.Query().Get("path") }
	m.HandleFunc("GET /v1/sandboxes/{id}/files/stat", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		k := key(r)
		if b, ok := f.files[k]; ok {
			json.NewEncoder(w).Encode(api.FileInfo{Path: r.URL.Query().Get("path"), Type: api.FileTypeFile, Size: int64(len(b)), Mode: f.modes[k]})
			return
		}
		if _, ok := f.archives[k]; ok || strings.HasSuffix(k, ":/work") {
			json.NewEncoder(w).Encode(api.FileInfo{Path: r.URL.Query().Get("path"), Type: api.FileTypeDir, Mode: "0705"})
			return
		}
		writeErr(w, errdefs.NotFound("%s: no such file or directory", r.URL.Query().Get("path")))
	})
	m.HandleFunc("PUT /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.files[key(r)] = b
		f.modes[key(r)] = r.URL.Query().Get("mode")
		json.NewEncoder(w).Encode(api.FileInfo{Path: r.URL.Query().Get("path"), Type: api.FileTypeFile})
	})
	m.HandleFunc("GET /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		b, ok := f.files[key(r)]
		if !ok {
			writeErr(w, errdefs.NotFound("no such file"))
			return
		}
		w.Write(b)
	})
	m.HandleFunc("POST /v1/sandboxes/{id}/files/mkdir", func(w http.ResponseWriter, r *http.Request) {
		var req api.MkdirRequest
		json.NewDecoder(r.Body).Decode(&req)
		json.NewEncoder(w).Encode(api.FileInfo{Path: req.Path, Type: api.FileTypeDir, Mode: req.Mode})
	})
	m.HandleFunc("PUT /v1/sandboxes/{id}/files/archive", func(w http.ResponseWriter, r *http.Request) {
		tr := tar.NewReader(r.Body)
		var names []string
		for {
			hdr, err := tr.Next()
			if err != nil {
				break
			}
			names = append(names, hdr.Name+" "+hdr.FileInfo().Mode().String())
		}
		f.mu.Lock()
		f.archives[key(r)] = names
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("GET /v1/sandboxes/{id}/files/archive", func(w http.ResponseWriter, r *http.Request) {
		// A directory archive as the guest writes it: names relative to
		// the directory, no entry for the directory itself.
		tw := tar.NewWriter(w)
		tw.WriteHeader(&tar.Header{Name: "sub/", Typeflag: tar.TypeDir, Mode: 0o750})
		tw.WriteHeader(&tar.Header{Name: "result.txt", Typeflag: tar.TypeReg, Mode: 0o640, Size: 2})
		tw.Write([]byte("42"))
		tw.Close()
	})
	return m
}

// run runs the CLI with args and returns stdout, stderr and the status.
func run(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	root := NewRootCommand(func(ctx context.Context, configPath string) error {
		return errors.New("serve called with " + configPath)
	})
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetIn(strings.NewReader(stdin))
	code = Execute(context.Background(), root, args, &errb)
	return out.String(), errb.String(), code
}

func TestCreate(t *testing.T) {
	f := newFakeDaemon(t)
	out, errOut, code := run(t, "", "create", "--template", "py", "--ttl", "1h", "--cpu", "0.5", "--memory", "2G",
		"--disk", "512", "--pids", "64", "--isolation", "gvisor", "--env", "A=1", "--meta", "owner=me", "--meta", "x=a=b",
		"--user-limit", "inotify_watches=524288", "--user-limit", "sigpending=100")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if out != "sb-a\n" {
		t.Errorf("stdout = %q, want the id alone", out)
	}
	got := f.created[0]
	want := api.CreateSandboxRequest{Template: "py", Isolation: "gvisor", TTLSeconds: 3600, CPU: 0.5, MemoryMB: 2048, DiskMB: 512, Pids: 64,
		Env: map[string]string{"A": "1"}, Metadata: map[string]string{"owner": "me", "x": "a=b"},
		UserLimits: &api.UserLimits{InotifyWatches: 524288, Sigpending: 100}}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if !bytes.Equal(gb, wb) {
		t.Errorf("request = %s\nwant      %s", gb, wb)
	}
}

func TestUsageErrors(t *testing.T) {
	newFakeDaemon(t)
	tests := []struct {
		args    []string
		code    int
		message string
	}{
		{[]string{"create", "--memory", "lots"}, 2, `agentbox: --memory wants a size like 512M, 2G or 1GiB (plain numbers are MiB), got "lots"`},
		{[]string{"create", "--env", "FOO"}, 2, `agentbox: --env wants KEY=VALUE, got "FOO"`},
		{[]string{"create", "--ttl", "soon"}, 2, `agentbox: --ttl wants a duration like 30m, 2h or 1d, or "none" for no TTL, got "soon"`},
		{[]string{"create", "--idle-timeout", "0s"}, 2, `agentbox: --idle-timeout wants a positive duration like 90s, 15m or 2h, got "0s"`},
		{[]string{"create", "--bogus"}, 2, "agentbox: unknown flag: --bogus"},
		{[]string{"create", "--user-limit", "sigpending"}, 2, `agentbox: --user-limit wants NAME=N with N a positive whole number, e.g. inotify_watches=524288, got "sigpending"`},
		{[]string{"create", "--user-limit", "inotify=5"}, 2, `agentbox: --user-limit: unknown user limit "inotify": use inotify_instances, inotify_watches, msgqueue_bytes or sigpending`},
		{[]string{"create", "--user-limit", "sigpending=100000"}, 2, "agentbox: --user-limit.sigpending must be between 1 and 65536"},
		{[]string{"frobnicate"}, 2, `agentbox: unknown command "frobnicate" for "agentbox"`},
		{[]string{"exec", "sb-a"}, 2, "agentbox: exec wants a command after the sandbox id"},
		{[]string{"inspect"}, 2, "agentbox: agentbox inspect wants 1 argument(s), got 0"},
		{[]string{"cp", "a", "b"}, 2, `agentbox: cp wants ID:/path on one side, got two local paths "a" and "b"`},
		{[]string{"inspect", "nope"}, 1, `agentbox: sandbox "nope" not found`},
		{[]string{"serve", "--config", "/x.toml"}, 1, "agentbox: serve called with /x.toml"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, errOut, code := run(t, "", tt.args...)
			if code != tt.code || !strings.HasPrefix(errOut, tt.message) {
				t.Errorf("exit %d, stderr %q; want exit %d, stderr starting %q", code, errOut, tt.code, tt.message)
			}
		})
	}
}

func TestExecExitStatus(t *testing.T) {
	f := newFakeDaemon(t)
	run(t, "", "create")
	three := 3
	tests := []struct {
		name    string
		exit    api.ExecEvent
		code    int
		message string
	}{
		{"success", api.ExecEvent{Type: api.EventExit, ExitCode: new(int)}, 0, ""},
		{"failure", api.ExecEvent{Type: api.EventExit, ExitCode: &three}, 3, ""},
		{"signal", api.ExecEvent{Type: api.EventExit, Signal: "SIGKILL"}, 137, ""},
		{"sigterm", api.ExecEvent{Type: api.EventExit, Signal: "SIGTERM"}, 143, ""},
		{"timeout", api.ExecEvent{Type: api.EventExit, TimedOut: true, Signal: "SIGKILL"}, 124, "agentbox: the command timed out after 2s and was killed"},
		{"error", api.ExecEvent{Type: api.EventError, Error: &api.ErrorDetail{Code: errdefs.CodeInvalidArgument, Message: `no user "bob" in the sandbox`}}, 1, `agentbox: no user "bob" in the sandbox`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.mu.Lock()
			f.exit = tt.exit
			f.mu.Unlock()
			out, errOut, code := run(t, "", "exec", "--timeout", "2s", "sb-a", "--", "echo hi")
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, errOut)
			}
			if tt.exit.Type == api.EventExit && out != "out:echo hi\n" {
				t.Errorf("stdout = %q", out)
			}
			if !strings.HasPrefix(errOut, "err\n") {
				t.Errorf("stderr = %q, want the command's stderr first", errOut)
			}
			if tt.message != "" && !strings.Contains(errOut, tt.message) {
				t.Errorf("stderr = %q, want %q", errOut, tt.message)
			}
		})
	}
	last := f.execs[len(f.execs)-1]
	if len(last.Cmd) != 1 || last.Cmd[0] != "echo hi" || last.TimeoutMs != 2000 || last.StdinStream {
		t.Errorf("exec request = %+v; want one argv element, a 2s timeout and no stdin", last)
	}
}

func TestExecFlagsAndStdin(t *testing.T) {
	f := newFakeDaemon(t)
	run(t, "", "create")
	out, errOut, code := run(t, "line1\nline2\n", "exec", "-i", "--env", "K=V", "--cwd", "/work", "--user", "1000", "sb-a", "--", "cat", "-n")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if out != "out:cat|-n\nline1\nline2\n" {
		t.Errorf("stdout = %q, want the command's output then the echoed stdin", out)
	}
	req := f.execs[0]
	if !req.StdinStream || req.Cwd != "/work" || req.User != "1000" || req.Env["K"] != "V" {
		t.Errorf("exec request = %+v", req)
	}
}

func TestRunDestroys(t *testing.T) {
	f := newFakeDaemon(t)
	seven := 7
	f.exit = api.ExecEvent{Type: api.EventExit, ExitCode: &seven}
	out, errOut, code := run(t, "", "run", "--template", "base", "--memory", "256M", "--", "python3", "-c", "exit(7)")
	if code != 7 {
		t.Errorf("exit %d, want the command's 7 (stderr %q)", code, errOut)
	}
	if out != "out:python3|-c|exit(7)\n" {
		t.Errorf("stdout = %q", out)
	}
	if len(f.destroyed) != 1 || f.destroyed[0] != "sb-a" || len(f.sandboxes) != 0 {
		t.Errorf("destroyed %v, left %v; want sb-a destroyed", f.destroyed, f.sandboxes)
	}
	if f.created[0].MemoryMB != 256 {
		t.Errorf("create request = %+v", f.created[0])
	}
}

func TestLsInspectRmTTL(t *testing.T) {
	f := newFakeDaemon(t)
	run(t, "", "create", "--template", "base")
	run(t, "", "create", "--template", "py")

	out, _, code := run(t, "", "ttl", "sb-a", "10m")
	if code != 0 || !strings.HasPrefix(out, "sb-a expires at ") {
		t.Errorf("ttl: exit %d, %q", code, out)
	}
	out, _, code = run(t, "", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "EXPIRES") {
		t.Fatalf("ls: exit %d\n%s", code, out)
	}
	for _, l := range lines[1:] {
		switch {
		case strings.HasPrefix(l, "sb-a"):
			if !strings.Contains(l, "base") || !strings.Contains(l, "2m") || !strings.Contains(l, "in 9m") {
				t.Errorf("ls row %q, want template base, age 2m, expiry in 9m", l)
			}
		case strings.HasPrefix(l, "sb-b"):
			if !strings.Contains(l, "never") {
				t.Errorf("ls row %q, want no expiry", l)
			}
		}
	}
	out, _, _ = run(t, "", "ls", "--json")
	var list []api.Sandbox
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 {
		t.Errorf("ls --json = %q (%v)", out, err)
	}
	out, _, _ = run(t, "", "ls", "--json", "--state", "paused")
	if strings.TrimSpace(out) != "[]" {
		t.Errorf("empty ls --json = %q, want []", out)
	}
	out, _, _ = run(t, "", "inspect", "sb-b")
	var sb api.Sandbox
	if err := json.Unmarshal([]byte(out), &sb); err != nil || sb.ID != "sb-b" || !strings.Contains(out, "\n  \"id\"") {
		t.Errorf("inspect = %q (%v)", out, err)
	}

	out, errOut, code := run(t, "", "rm", "sb-a", "missing", "sb-b")
	if code != 1 {
		t.Errorf("rm with one failure: exit %d, want 1", code)
	}
	if out != "sb-a\nsb-b\n" || !strings.Contains(errOut, `agentbox: missing: sandbox "missing" not found`) {
		t.Errorf("rm: stdout %q, stderr %q", out, errOut)
	}
	if len(f.sandboxes) != 0 {
		t.Errorf("left %v after rm", f.sandboxes)
	}
}

func TestCp(t *testing.T) {
	f := newFakeDaemon(t)
	run(t, "", "create")
	dir := t.TempDir()

	// A file into an existing sandbox directory keeps its name and mode.
	mustWrite(t, filepath.Join(dir, "tool.sh"), "echo", 0o750)
	if _, errOut, code := run(t, "", "cp", filepath.Join(dir, "tool.sh"), "sb-a:/work"); code != 0 {
		t.Fatalf("upload file: %s", errOut)
	}
	if string(f.files["sb-a:/work/tool.sh"]) != "echo" || f.modes["sb-a:/work/tool.sh"] != "0750" {
		t.Errorf("uploaded %q mode %q", f.files["sb-a:/work/tool.sh"], f.modes["sb-a:/work/tool.sh"])
	}

	// A directory to a new path: its contents land under that path.
	src := filepath.Join(dir, "proj")
	os.MkdirAll(filepath.Join(src, "bin"), 0o755)
	mustWrite(t, filepath.Join(src, "bin", "run"), "x", 0o755)
	if _, errOut, code := run(t, "", "cp", src, "sb-a:/srv/proj"); code != 0 {
		t.Fatalf("upload dir: %s", errOut)
	}
	got := strings.Join(f.archives["sb-a:/srv/proj"], ",")
	if got != "bin/ drwxr-xr-x,bin/run -rwxr-xr-x" {
		t.Errorf("uploaded archive = %q", got)
	}

	// A file back out, to a local directory and to stdout.
	if _, errOut, code := run(t, "", "cp", "sb-a:/work/tool.sh", dir+"/"); code != 0 {
		t.Fatalf("download file: %s", errOut)
	}
	if fi, err := os.Stat(filepath.Join(dir, "tool.sh")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("downloaded file: %v %v", fi, err)
	}
	out, _, code := run(t, "", "cp", "sb-a:/work/tool.sh", "-")
	if code != 0 || out != "echo" {
		t.Errorf("cp to stdout: %d %q", code, out)
	}

	// A directory back out: into an existing local directory, under its
	// base name.
	dl := t.TempDir()
	if _, errOut, code := run(t, "", "cp", "sb-a:/work", dl); code != 0 {
		t.Fatalf("download dir: %s", errOut)
	}
	if b, err := os.ReadFile(filepath.Join(dl, "work", "result.txt")); err != nil || string(b) != "42" {
		t.Errorf("downloaded dir: %q %v", b, err)
	}
	if fi, _ := os.Stat(filepath.Join(dl, "work", "sub")); fi == nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("downloaded subdirectory: %v, want mode 0750", fi)
	}
	if fi, _ := os.Stat(filepath.Join(dl, "work")); fi.Mode().Perm() != 0o705 {
		t.Errorf("downloaded dir mode %v, want the sandbox's 0705", fi.Mode().Perm())
	}

	// Missing remote file: the API's message.
	_, errOut, code := run(t, "", "cp", "sb-a:/nope", dir)
	if code != 1 || !strings.Contains(errOut, "/nope: no such file or directory") {
		t.Errorf("missing: exit %d %q", code, errOut)
	}
}

func TestTemplatesAndVersion(t *testing.T) {
	f := newFakeDaemon(t)
	dir := t.TempDir()
	t.Chdir(dir)
	os.Mkdir("rootfs", 0o755)
	out, errOut, code := run(t, "", "template", "import", "py", "--rootfs", "rootfs", "--user", "agent", "--workdir", "/home/agent", "--env", "LANG=C.UTF-8")
	if code != 0 || out != "py v1\n" {
		t.Fatalf("import: exit %d, %q %q", code, out, errOut)
	}
	got := f.imported[0]
	if got.Rootfs != filepath.Join(dir, "rootfs") || got.User != "agent" || got.Workdir != "/home/agent" || got.Env["LANG"] != "C.UTF-8" {
		t.Errorf("import request = %+v; want an absolute rootfs", got)
	}
	if _, errOut, code := run(t, "", "template", "import", "py"); code != 2 || !strings.Contains(errOut, "--rootfs") {
		t.Errorf("import without --rootfs: exit %d, %q", code, errOut)
	}
	out, _, _ = run(t, "", "template", "ls")
	if !strings.Contains(out, "NAME") || !strings.Contains(out, "base") || !strings.Contains(out, "300.0MiB") || !strings.Contains(out, "3h ago") || !strings.Contains(out, "(public)") {
		t.Errorf("template ls = %q", out)
	}
	out, _, _ = run(t, "", "version")
	if !strings.HasPrefix(out, "client: ") || !strings.Contains(out, "daemon: 9.9.9") {
		t.Errorf("version = %q", out)
	}
	_, errOut, code = run(t, "", "exec", "sb-a", "ls", "-la")
	if code != 2 || !strings.Contains(errOut, "put -- before the command") {
		t.Errorf("exec without --: exit %d, %q", code, errOut)
	}
}

func TestRunDestroysOnInterrupt(t *testing.T) {
	f := newFakeDaemon(t)
	f.hang = true
	root := NewRootCommand(nil)
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel) // Ctrl-C
	code := Execute(ctx, root, []string{"run", "--", "sleep", "1000"}, &errb)
	if code != 130 || !strings.Contains(errb.String(), "agentbox: interrupted") {
		t.Errorf("exit %d, stderr %q; want 130 and a note", code, errb.String())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.destroyed) != 1 || len(f.sandboxes) != 0 {
		t.Errorf("destroyed %v, left %v; want the sandbox destroyed after the interrupt", f.destroyed, f.sandboxes)
	}
}
