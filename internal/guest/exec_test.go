package guest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/proto"
	"github.com/agentbox/agentbox/internal/guest/users"
	"golang.org/x/sys/unix"
)

func TestExecExitCodes(t *testing.T) {
	g := newTestGuest(t, Config{})
	tests := []struct {
		name       string
		req        api.ExecRequest
		wantCode   int
		wantSignal string
		wantStderr string
	}{
		{"true", api.ExecRequest{Cmd: []string{"true"}}, 0, "", ""},
		{"false", api.ExecRequest{Cmd: []string{"/bin/false"}}, 1, "", ""},
		{"exit 3", api.ExecRequest{Shell: "echo oops >&2; exit 3"}, 3, "", "oops\n"},
		{"SIGKILL", api.ExecRequest{Shell: "kill -9 $$"}, 137, "SIGKILL", ""},
		{"SIGTERM", api.ExecRequest{Shell: "kill -TERM $$"}, 143, "SIGTERM", ""},
		{"missing in PATH", api.ExecRequest{Cmd: []string{"no-such-program-xyz"}}, 127, "", "no-such-program-xyz: command not found"},
		{"missing absolute", api.ExecRequest{Cmd: []string{"/no/such/program"}}, 127, "", "/no/such/program: no such file"},
		{"not executable", api.ExecRequest{Cmd: []string{"/etc/passwd"}}, 126, "", "cannot execute"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := g.mustExec(t, tt.req)
			if res.ExitCode != tt.wantCode || res.Signal != tt.wantSignal {
				t.Errorf("got exit %d signal %q, want %d %q (stderr %q)", res.ExitCode, res.Signal, tt.wantCode, tt.wantSignal, res.Stderr)
			}
			if !strings.Contains(res.Stderr, tt.wantStderr) {
				t.Errorf("stderr %q, want it to contain %q", res.Stderr, tt.wantStderr)
			}
		})
	}
}

func TestExecRejects(t *testing.T) {
	g := newTestGuest(t, Config{})
	f, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	tests := []struct {
		name       string
		req        api.ExecRequest
		wantStatus int
		wantMsg    string
	}{
		{"neither", api.ExecRequest{}, 400, "exec needs cmd or shell, got neither"},
		{"both", api.ExecRequest{Cmd: []string{"true"}, Shell: "true"}, 400, "not both"},
		{"empty argv0", api.ExecRequest{Cmd: []string{""}}, 400, "cmd[0] must name a program"},
		{"relative cwd", api.ExecRequest{Cmd: []string{"true"}, Cwd: "tmp"}, 400, "cwd must be an absolute path"},
		{"missing cwd", api.ExecRequest{Cmd: []string{"true"}, Cwd: "/no/such/dir"}, 400, "does not exist"},
		{"file cwd", api.ExecRequest{Cmd: []string{"true"}, Cwd: file}, 400, "not a directory"},
		{"cwd via /proc/self/fd", api.ExecRequest{Cmd: []string{"true"}, Cwd: "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))}, 400, "magic link"},
		{"cwd via /proc/self/cwd", api.ExecRequest{Cmd: []string{"true"}, Cwd: "/proc/self/cwd"}, 400, "magic link"},
		{"cwd via /proc/self/root", api.ExecRequest{Cmd: []string{"true"}, Cwd: "/proc/self/root/tmp"}, 400, "magic link"},
		{"cwd via /proc/thread-self/cwd", api.ExecRequest{Cmd: []string{"true"}, Cwd: "/proc/thread-self/cwd"}, 400, "magic link"},
		{"unknown user", api.ExecRequest{Cmd: []string{"true"}, User: "no-such-user-xyz"}, 400, "no-such-user-xyz"},
		{"negative timeout", api.ExecRequest{Cmd: []string{"true"}, TimeoutMs: -1}, 400, "timeout_ms"},
		{"stdin_stream on /exec", api.ExecRequest{Cmd: []string{"true"}, StdinStream: true}, 400, "POST /exec/stream"},
		{"bad env key", api.ExecRequest{Cmd: []string{"true"}, Env: map[string]string{"A=B": "c"}}, 400, "env key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, status, eb := g.exec(t, tt.req)
			if status != tt.wantStatus {
				t.Fatalf("status %d, want %d (%+v)", status, tt.wantStatus, eb)
			}
			if eb.Error.Code != errdefs.CodeInvalidArgument {
				t.Errorf("code %q, want %q", eb.Error.Code, errdefs.CodeInvalidArgument)
			}
			if !strings.Contains(eb.Error.Message, tt.wantMsg) {
				t.Errorf("message %q, want it to contain %q", eb.Error.Message, tt.wantMsg)
			}
		})
	}
	t.Run("bad json", func(t *testing.T) {
		resp, err := g.client.Post("http://guest/exec", "application/json", strings.NewReader("{nope"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("status %d, want 400", resp.StatusCode)
		}
	})
}

func TestExecEnv(t *testing.T) {
	t.Setenv("AGENT_SECRET_XYZ", "leak")
	g := newTestGuest(t, Config{Env: []string{"A=from-config", "B=from-config", "PATH=/usr/bin:/bin"}})
	tests := []struct {
		name string
		req  api.ExecRequest
		want string
	}{
		{"agent env does not leak", api.ExecRequest{Shell: `echo "[$AGENT_SECRET_XYZ]"`}, "[]"},
		{"config default", api.ExecRequest{Shell: `echo "$A"`}, "from-config"},
		{"request wins", api.ExecRequest{Shell: `echo "$B"`, Env: map[string]string{"B": "from-request"}}, "from-request"},
		{"config PATH kept", api.ExecRequest{Shell: `echo "$PATH"`}, "/usr/bin:/bin"},
		{"HOME USER LOGNAME", api.ExecRequest{Shell: `echo "$HOME $USER $LOGNAME"`}, "/root root root"},
		{"nobody's HOME", api.ExecRequest{Shell: `echo "$USER $HOME"`, User: "65534"}, "nobody /nonexistent"},
		{"request HOME wins", api.ExecRequest{Shell: `echo "$HOME"`, Env: map[string]string{"HOME": "/x"}}, "/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := g.mustExec(t, tt.req)
			if got := strings.TrimSpace(res.Stdout); got != tt.want {
				t.Errorf("got %q, want %q (stderr %q)", got, tt.want, res.Stderr)
			}
		})
	}
}

func TestExecCwd(t *testing.T) {
	work := t.TempDir()
	other := t.TempDir()
	g := newTestGuest(t, Config{Workdir: work})
	private := t.TempDir()
	os.Chmod(private, 0o700)
	tests := []struct {
		name string
		req  api.ExecRequest
		want string
	}{
		{"config workdir", api.ExecRequest{Cmd: []string{"pwd"}}, work},
		{"request cwd", api.ExecRequest{Cmd: []string{"pwd"}, Cwd: other}, other},
		{"path through /proc/..", api.ExecRequest{Shell: "pwd -P", Cwd: "/proc/../" + other}, other},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := g.mustExec(t, tt.req)
			if got := strings.TrimSpace(res.Stdout); got != tt.want {
				t.Errorf("got %q, want %q (stderr %q)", got, tt.want, res.Stderr)
			}
		})
	}
	t.Run("home when no workdir", func(t *testing.T) {
		g := newTestGuest(t, Config{})
		res := g.mustExec(t, api.ExecRequest{Cmd: []string{"pwd"}})
		if got := strings.TrimSpace(res.Stdout); got != "/root" {
			t.Errorf("root's cwd %q, want /root", got)
		}
		res = g.mustExec(t, api.ExecRequest{Cmd: []string{"pwd"}, User: "65534"})
		if got := strings.TrimSpace(res.Stdout); got != "/" {
			t.Errorf("nobody's cwd %q, want / (its home does not exist)", got)
		}
	})
	t.Run("user may not enter", func(t *testing.T) {
		_, status, eb := g.exec(t, api.ExecRequest{Cmd: []string{"pwd"}, Cwd: private, User: "65534"})
		if status != http.StatusForbidden || !strings.Contains(eb.Error.Message, "may not enter") {
			t.Errorf("got %d %+v, want 403 saying the user may not enter", status, eb)
		}
	})
}

func TestExecUser(t *testing.T) {
	g := newTestGuest(t, Config{})
	tests := []struct {
		user, want string
	}{
		{"", "0 0"},
		{"root", "0 0"},
		{"65534", "65534 65534"},
		{"nobody", "65534 65534"},
	}
	for _, tt := range tests {
		t.Run("user="+tt.user, func(t *testing.T) {
			res := g.mustExec(t, api.ExecRequest{Shell: "echo $(id -u) $(id -g)", User: tt.user})
			if got := strings.TrimSpace(res.Stdout); got != tt.want {
				t.Errorf("id: got %q, want %q (stderr %q)", got, tt.want, res.Stderr)
			}
		})
	}
	t.Run("supplementary groups dropped", func(t *testing.T) {
		res := g.mustExec(t, api.ExecRequest{Shell: "id -G", User: "65534"})
		if got := strings.TrimSpace(res.Stdout); got != "65534" {
			t.Errorf("id -G as nobody: %q, want only 65534", got)
		}
	})
	t.Run("default user from config", func(t *testing.T) {
		g := newTestGuest(t, Config{User: "65534"})
		res := g.mustExec(t, api.ExecRequest{Shell: "id -u"})
		if got := strings.TrimSpace(res.Stdout); got != "65534" {
			t.Errorf("id -u: %q, want 65534", got)
		}
	})
}

func TestExecStdin(t *testing.T) {
	g := newTestGuest(t, Config{})
	big := make([]byte, 1<<20+17) // past the pipe's capacity: written by a goroutine
	rand.Read(big)
	tests := []struct {
		name  string
		stdin []byte
	}{
		{"none", nil},
		{"small", []byte("hello\nworld\n")},
		{"big binary", big},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := g.mustExec(t, api.ExecRequest{Cmd: []string{"cat"}, Stdin: tt.stdin, MaxOutputBytes: 4 << 20})
			got := []byte(res.Stdout)
			if res.Encoding == "base64" {
				got, _ = base64.StdEncoding.DecodeString(res.Stdout)
			}
			if !bytes.Equal(got, tt.stdin) {
				t.Errorf("cat gave %d bytes, want the %d of stdin", len(got), len(tt.stdin))
			}
		})
	}
	t.Run("stdin ignored by the program", func(t *testing.T) {
		res := g.mustExec(t, api.ExecRequest{Cmd: []string{"true"}, Stdin: big})
		if res.ExitCode != 0 {
			t.Errorf("exit %d", res.ExitCode)
		}
	})
}

func TestExecOutput(t *testing.T) {
	g := newTestGuest(t, Config{})
	t.Run("truncation", func(t *testing.T) {
		res := g.mustExec(t, api.ExecRequest{Shell: "head -c 100000 /dev/zero | tr '\\0' a; echo done >&2", MaxOutputBytes: 1000})
		if !res.Truncated || len(res.Stdout) != 1000 || res.ExitCode != 0 {
			t.Errorf("got truncated=%v len=%d exit=%d, want true 1000 0", res.Truncated, len(res.Stdout), res.ExitCode)
		}
		if res.Stderr != "done\n" {
			t.Errorf("stderr %q: the process must keep running past the cap", res.Stderr)
		}
	})
	t.Run("default cap 16 MiB", func(t *testing.T) {
		res := g.mustExec(t, api.ExecRequest{Shell: "head -c 20000000 /dev/zero | tr '\\0' a"})
		if !res.Truncated || len(res.Stdout) != 16<<20 {
			t.Errorf("got truncated=%v len=%d, want true %d", res.Truncated, len(res.Stdout), 16<<20)
		}
	})
	t.Run("50 MiB binary", func(t *testing.T) {
		want := make([]byte, 50<<20)
		rand.Read(want)
		f := filepath.Join(t.TempDir(), "blob")
		os.WriteFile(f, want, 0o644)
		res := g.mustExec(t, api.ExecRequest{Cmd: []string{"cat", f}, MaxOutputBytes: 64 << 20})
		if res.Encoding != "base64" {
			t.Fatalf("encoding %q, want base64 for binary output", res.Encoding)
		}
		got, err := base64.StdEncoding.DecodeString(res.Stdout)
		if err != nil || !bytes.Equal(got, want) || res.Truncated {
			t.Errorf("got %d bytes (err %v, truncated %v), want the file's %d", len(got), err, res.Truncated, len(want))
		}
	})
	t.Run("background holder of stdout does not hang the exec", func(t *testing.T) {
		start := time.Now()
		// Waiting for the sleeper would take 30 s; a loaded 2-core host
		// takes well under 15 s to run two echos.
		res := g.mustExec(t, api.ExecRequest{Shell: "echo before; sleep 30 & echo after"})
		if el := time.Since(start); el > 15*time.Second {
			t.Errorf("exec took %v: it waited for the background sleep", el)
		}
		if res.Stdout != "before\nafter\n" {
			t.Errorf("stdout %q", res.Stdout)
		}
	})
	t.Run("no fds beyond 0 1 2", func(t *testing.T) {
		// ls opens the directory itself as fd 3.
		res := g.mustExec(t, api.ExecRequest{Cmd: []string{"ls", "/proc/self/fd"}})
		if got := strings.Fields(res.Stdout); strings.Join(got, " ") != "0 1 2 3" {
			t.Errorf("child's fds %v, want 0 1 2 (3 is ls's own)", got)
		}
	})
	t.Run("own session", func(t *testing.T) {
		res := g.mustExec(t, api.ExecRequest{Shell: "ps -o sid=,pgid=,pid= -p $$"})
		f := strings.Fields(res.Stdout)
		if len(f) != 3 || f[0] != f[2] || f[1] != f[2] {
			t.Errorf("sid pgid pid = %v, want all equal", f)
		}
	})
}

func TestExecTimeoutKillsGroup(t *testing.T) {
	// Without cgroups: the process group and session go.
	g := newTestGuest(t, Config{})
	dir := t.TempDir()
	start := time.Now()
	res := g.mustExec(t, api.ExecRequest{
		Shell:     fmt.Sprintf("trap '' TERM; sleep 300 & echo $! > %s/pid; sleep 300", dir),
		TimeoutMs: 300,
	})
	// Without the kill the exec lasts 300 s; the margin is for a loaded host.
	if el := time.Since(start); el > 30*time.Second {
		t.Errorf("exec took %v with a 300 ms timeout", el)
	}
	if !res.TimedOut || res.Signal != "SIGKILL" || res.ExitCode != 137 {
		t.Errorf("got timed_out=%v signal=%q exit=%d, want true SIGKILL 137", res.TimedOut, res.Signal, res.ExitCode)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "pid"))
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("background pid %q: %v", b, err)
	}
	waitGone(t, pid)
}

// waitGone fails unless pid is dead within a second (it may be a zombie
// for a moment before the reaper gets to it).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for i := 0; alive(pid); i++ {
		if i == 100 {
			t.Fatalf("pid %d still alive", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestReaperReapsOrphans(t *testing.T) {
	g := newTestGuest(t, Config{})
	// The orphan re-parents to us (child subreaper, as PID 1 would be) and
	// must not stay a zombie.
	res := g.mustExec(t, api.ExecRequest{Shell: "sleep 0.2 >/dev/null 2>&1 & echo $!"})
	pid, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			t.Fatalf("orphan %d not reaped: %s", pid, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestExecConcurrent(t *testing.T) {
	g := newTestGuest(t, Config{})
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			res := g.mustExec(t, api.ExecRequest{Shell: fmt.Sprintf("echo %d; echo e%d >&2", i, i)})
			if res.Stdout != fmt.Sprintf("%d\n", i) || res.Stderr != fmt.Sprintf("e%d\n", i) || res.ExitCode != 0 {
				t.Errorf("exec %d: got %q %q exit %d", i, res.Stdout, res.Stderr, res.ExitCode)
			}
		})
	}
	wg.Wait()
}

func TestPing(t *testing.T) {
	g := newTestGuest(t, Config{Version: "v-test"})
	resp, err := g.client.Get("http://guest/ping")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info proto.Info
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	if info.Version != "v-test" || info.Pid != os.Getpid() || info.Uptime == "" {
		t.Errorf("got %+v", info)
	}
}

func TestExecClientGoneKillsGroup(t *testing.T) {
	g := newTestGuest(t, Config{})
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	body, _ := json.Marshal(api.ExecRequest{Shell: fmt.Sprintf("sleep 300 & echo $! > %s/pid; wait", dir)})
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://guest/exec", bytes.NewReader(body))
	if resp, err := g.client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("exec of sleep 300 answered before the client gave up")
	}
	var pid int
	for i := 0; ; i++ {
		b, _ := os.ReadFile(filepath.Join(dir, "pid"))
		if pid, _ = strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 || i == 100 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if pid == 0 {
		t.Fatal("no background pid written")
	}
	waitGone(t, pid)
}

// FuzzExecRequest feeds arbitrary bodies to the request checks: they may
// reject, never panic, and what they accept has a program to run.
func FuzzExecRequest(f *testing.F) {
	f.Add([]byte(`{"cmd":["ls","-l"],"env":{"A":"b"},"cwd":"/tmp","timeout_ms":5}`))
	f.Add([]byte(`{"shell":"echo hi","stdin":"aGk=","max_output_bytes":10}`))
	f.Add([]byte(`{"cmd":[""],"env":{"A=B":"\u0000"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req api.ExecRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		for _, streaming := range []bool{false, true} {
			if validate(&req, streaming) != nil {
				continue
			}
			if len(req.Cmd) == 0 && req.Shell == "" {
				t.Fatalf("accepted a request with nothing to run: %s", body)
			}
		}
		env, err := buildEnv([]string{"X=1", "junk"}, req.Env, users.User{Name: "u", Home: "/h"})
		if err != nil {
			return
		}
		for _, kv := range env {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsRune(kv, 0) {
				t.Fatalf("bad env entry %q from %s", kv, body)
			}
		}
	})
}

// Every process the agent starts, from whichever of its threads, has no
// capabilities: each forking thread empties its bounding set first
// (harden.DropBoundingSetOnThread in the reaper). Concurrent execs run
// on many threads; as root here, a thread that skipped the drop would
// hand its child a full set.
func TestExecsStartWithoutCapabilities(t *testing.T) {
	requireRoot(t)
	g := newTestGuest(t, Config{})
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		bad []string
	)
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := g.mustExec(t, api.ExecRequest{Shell: "grep -E '^Cap(Bnd|Eff|Prm|Amb|Inh)' /proc/self/status"})
			for _, l := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
				if !strings.HasSuffix(l, "\t0000000000000000") {
					mu.Lock()
					bad = append(bad, l)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("exec'd processes have capabilities (%d lines), e.g. %q", len(bad), bad[0])
	}
}

// TestOutputPipeSize: an exec's output pipes hold outputPipeSize, so the
// writer runs ahead of a stream by that much and one read can take it all;
// stdin's pipe keeps the kernel's default.
func TestOutputPipeSize(t *testing.T) {
	for _, parentReads := range []bool{true, false} {
		r, w, err := pipe(parentReads)
		if err != nil {
			t.Fatal(err)
		}
		got, err := unix.FcntlInt(uintptr(r), unix.F_GETPIPE_SZ, 0)
		unix.Close(r)
		unix.Close(w)
		if err != nil {
			t.Fatal(err)
		}
		want := 64 << 10
		if parentReads {
			want = outputPipeSize
		}
		if got != want {
			t.Errorf("pipe(parentReads=%v) holds %d bytes, want %d", parentReads, got, want)
		}
	}
}
