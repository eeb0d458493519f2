package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/daemon"
)

// cli runs the real agentbox binary against the test daemon.
func cli(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.cliBin, args...)
	cmd.Env = append(os.Environ(), "AGENTBOX_HOST=unix://"+env.cfg.Socket, "AGENTBOX_API_KEY="+env.key)
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running agentbox %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

func TestCLI(t *testing.T) {
	out, errOut, code := cli(t, "", "create", "--template", "busybox", "--ttl", "5m", "--memory", "256M", "--env", "GREETING=hi", "--meta", "suite=cli")
	if code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	if strings.ContainsAny(id, " \n") || id == "" {
		t.Fatalf("create printed %q, want the id alone", out)
	}
	defer cli(t, "", "rm", id)

	t.Run("exec exit code and output", func(t *testing.T) {
		out, _, code := cli(t, "", "exec", id, "--", "sh", "-c", "echo $GREETING; exit 9")
		if code != 9 || out != "hi\n" {
			t.Fatalf("exit %d out %q; want 9 and hi", code, out)
		}
	})
	t.Run("exec -i stdin", func(t *testing.T) {
		out, _, code := cli(t, "piped\n", "exec", "-i", id, "--", "cat")
		if code != 0 || out != "piped\n" {
			t.Fatalf("exit %d out %q", code, out)
		}
	})
	t.Run("exec timeout", func(t *testing.T) {
		_, _, code := cli(t, "", "exec", "--timeout", "300ms", id, "--", "sleep", "10")
		if code != 124 {
			t.Fatalf("exit %d, want 124", code)
		}
	})
	t.Run("exec cwd and env", func(t *testing.T) {
		out, _, _ := cli(t, "", "exec", "--cwd", "/tmp", "--env", "X=1", id, "--", "sh", "-c", "pwd; echo $X")
		if out != "/tmp\n1\n" {
			t.Fatalf("out %q", out)
		}
	})
	t.Run("cp both ways, files and dirs", func(t *testing.T) {
		dir := t.TempDir()
		src := filepath.Join(dir, "tree")
		_ = os.MkdirAll(filepath.Join(src, "sub"), 0o755)
		_ = os.WriteFile(filepath.Join(src, "sub", "f.txt"), []byte("content"), 0o640)
		_ = os.WriteFile(filepath.Join(dir, "one"), []byte("single"), 0o600)
		if _, e, code := cli(t, "", "cp", src, id+":/root/tree"); code != 0 {
			t.Fatalf("cp dir up: %s", e)
		}
		if _, e, code := cli(t, "", "cp", filepath.Join(dir, "one"), id+":/root/one"); code != 0 {
			t.Fatalf("cp file up: %s", e)
		}
		if got := mustSh(t, id, "cat /root/tree/sub/f.txt /root/one; stat -c %a /root/tree/sub/f.txt"); got != "contentsingle640" && got != "contentsingle\n640" {
			t.Fatalf("inside: %q", got)
		}
		back := filepath.Join(dir, "back")
		if _, e, code := cli(t, "", "cp", id+":/root/tree", back); code != 0 {
			t.Fatalf("cp dir down: %s", e)
		}
		if b, err := os.ReadFile(filepath.Join(back, "sub", "f.txt")); err != nil || string(b) != "content" {
			t.Fatalf("downloaded %q, %v", b, err)
		}
	})
	t.Run("ls inspect", func(t *testing.T) {
		out, _, code := cli(t, "", "ls")
		if code != 0 || !strings.Contains(out, id) {
			t.Fatalf("ls: %d %q", code, out)
		}
		out, _, _ = cli(t, "", "ls", "--json")
		var list []api.Sandbox
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			var wrapped api.ListSandboxesResponse
			if err2 := json.Unmarshal([]byte(out), &wrapped); err2 != nil {
				t.Fatalf("ls --json is not JSON: %v: %q", err, out)
			}
		}
		out, _, code = cli(t, "", "inspect", id)
		var sb api.Sandbox
		if err := json.Unmarshal([]byte(out), &sb); err != nil || sb.ID != id || sb.Resources.MemoryMB != 256 || sb.Metadata["suite"] != "cli" {
			t.Fatalf("inspect: %v %+v", err, sb)
		}
	})
	t.Run("ls pages", func(t *testing.T) {
		var ids []string
		for range 2 {
			out, e, code := cli(t, "", "create", "--template", "busybox", "--ttl", "5m", "--meta", "suite=cli-pages")
			if code != 0 {
				t.Fatalf("create: %s", e)
			}
			ids = append(ids, strings.TrimSpace(out))
			defer cli(t, "", "rm", strings.TrimSpace(out))
		}
		out, e, code := cli(t, "", "ls", "-q", "--limit", "1", "--meta", "suite=cli-pages")
		more := regexp.MustCompile(`more: agentbox ls --limit 1 --cursor (\S+)`).FindStringSubmatch(e)
		if code != 0 || strings.TrimSpace(out) != ids[0] || more == nil {
			t.Fatalf("first page: exit %d, out %q, stderr %q; want %s and a cursor", code, out, e, ids[0])
		}
		out, e, code = cli(t, "", "ls", "-q", "--limit", "1", "--cursor", more[1], "--meta", "suite=cli-pages")
		if code != 0 || strings.TrimSpace(out) != ids[1] || strings.Contains(e, "more:") {
			t.Fatalf("last page: exit %d, out %q, stderr %q; want %s and no cursor", code, out, e, ids[1])
		}
		if _, e, code := cli(t, "", "ls", "--limit", "1", "--cursor", "bogus"); code == 0 || !strings.Contains(e, "next_cursor") {
			t.Fatalf("a bad cursor: exit %d, stderr %q", code, e)
		}
	})
	t.Run("verbs run by agentboxd", func(t *testing.T) {
		// agentbox links none of the daemon's packages: it execs agentboxd,
		// beside it, for serve, bench and the MCP bridge.
		out, e, code := cli(t, "", "bench", "--help")
		if code != 0 || !strings.Contains(out, "--only") || !strings.Contains(out, "--density") {
			t.Fatalf("bench --help: exit %d, stdout %q, stderr %q; want agentboxd's bench flags", code, out, e)
		}
		alone := filepath.Join(t.TempDir(), "agentbox")
		b, err := os.ReadFile(env.cliBin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(alone, b, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(alone, "serve", "--config", "/nonexistent.toml")
		cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin")
		msg, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(msg), "agentboxd") {
			t.Fatalf("serve without agentboxd: %v, %q; want an error naming agentboxd", err, msg)
		}
	})
	t.Run("errors", func(t *testing.T) {
		_, e, code := cli(t, "", "exec", "nosuchsandbox", "--", "true")
		if code == 0 || !strings.Contains(e, "not found") {
			t.Fatalf("exit %d stderr %q", code, e)
		}
		_, e, code = cli(t, "", "create", "--memory", "lots")
		if code == 0 || e == "" {
			t.Fatalf("bad --memory: exit %d stderr %q", code, e)
		}
	})
}

func TestCLIRun(t *testing.T) {
	before, _ := env.client.ListSandboxes(context.Background(), clientListAll())
	out, e, code := cli(t, "", "run", "--template", "busybox", "--", "uname", "-a")
	if code != 0 || !strings.HasPrefix(out, "Linux sbx-") {
		t.Fatalf("run uname -a: exit %d out %q err %q", code, out, e)
	}
	_, _, code = cli(t, "", "run", "--template", "busybox", "--", "sh", "-c", "exit 4")
	if code != 4 {
		t.Fatalf("run exit code %d, want 4", code)
	}
	after, _ := env.client.ListSandboxes(context.Background(), clientListAll())
	if len(after) != len(before) {
		t.Fatalf("run left sandboxes behind: %d before, %d after", len(before), len(after))
	}
}

func TestBasePython(t *testing.T) {
	needBase(t)
	out, e, code := cli(t, "", "run", "--template", "base", "--", "python3", "-c", "print(sum(range(101)))")
	if code != 0 || out != "5050\n" {
		t.Fatalf("exit %d out %q err %q", code, out, e)
	}
	id := newSandbox(t, api.CreateSandboxRequest{Template: "base"})
	for _, c := range []string{"pip3 --version", "python3 -m venv /tmp/v && /tmp/v/bin/python -c 'import sys; print(sys.prefix)'", "node -e 'console.log(6*7)'", "npm --version", "git --version", "curl --version", "id user"} {
		mustSh(t, id, c)
	}
}

// TestDaemonRestart stops the daemon and starts a new one on the same
// state: running sandboxes are re-adopted, keep their files and
// processes, and answer; a sandbox whose init died meanwhile is cleaned
// up and marked failed.
func TestDaemonRestart(t *testing.T) {
	ctx := context.Background()
	keep := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	lost := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	mustSh(t, keep, "echo kept > /root/state; sleep 1000 &")
	lostSb, _ := env.client.GetSandbox(ctx, lost)

	restartDaemon(t, func() {
		// While the daemon is down, the lost sandbox's init dies.
		if p, err := os.FindProcess(lostSb.Pid); err == nil {
			_ = p.Kill()
		}
		time.Sleep(200 * time.Millisecond)
	})

	if got := mustSh(t, keep, "cat /root/state; ps | grep -q '[s]leep 1000' && echo sleeper"); got != "kept\nsleeper" {
		t.Fatalf("after restart: %q", got)
	}
	sb, err := env.client.GetSandbox(ctx, lost)
	if err != nil || sb.State != api.StateFailed {
		t.Fatalf("lost sandbox: %+v, %v; want failed", sb, err)
	}
	assertNoTrace(t, lost)
}

// restartDaemon stops the shared test daemon, runs between, and starts a
// new daemon on the same config.
func restartDaemon(t *testing.T, between func()) {
	t.Helper()
	env.stop()
	between()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Serve(ctx, &env.cfg, testLogger()) }()
	env.stop = func() { cancel(); <-done }
	if err := waitForDaemon(done); err != nil {
		t.Fatalf("restarted daemon: %v", err)
	}
}

// restartAsFleetNode restarts the test daemon as fleet node id: the
// fleet key secret in a file of dir, listening on a free loopback port.
// It returns the key file and the listen address; the test's cleanup
// restarts the daemon as it was (no node id, no key, no listener).
func restartAsFleetNode(t *testing.T, dir, id, secret string) (keyFile, addr string) {
	t.Helper()
	keyFile = filepath.Join(dir, "fleet.key")
	if err := os.WriteFile(keyFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	ln.Close()
	restartDaemon(t, func() {
		env.cfg.NodeID, env.cfg.Fleet.GatewayKeyFile, env.cfg.Listen = id, keyFile, addr
	})
	t.Cleanup(func() {
		restartDaemon(t, func() { env.cfg.NodeID, env.cfg.Fleet.GatewayKeyFile, env.cfg.Listen = "", "", "" })
	})
	return keyFile, addr
}
