package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/agentbox/agentbox/api"
)

// Issue 28's traps, each driven through the real CLI or API.

// TestRmFailedSandbox: rm of a failed sandbox succeeds and takes its record
// out of ls.
func TestRmFailedSandbox(t *testing.T) {
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	sb, _ := env.client.GetSandbox(ctx, id)
	if err := syscall.Kill(sb.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitState(t, id, api.StateFailed, time.Minute)
	if out, errOut, code := cli(t, "", "rm", id); code != 0 || strings.TrimSpace(out) != id {
		t.Fatalf("rm of a failed sandbox: exit %d, out %q, err %q", code, out, errOut)
	}
	out, _, _ := cli(t, "", "ls")
	if strings.Contains(out, id) {
		t.Fatalf("ls still lists the removed failed sandbox:\n%s", out)
	}
	assertNoTrace(t, id)
}

// TestOOMKilledVisible: a command the OOM killer ends says so in the exec
// result, the streamed exit event and the CLI.
func TestOOMKilledVisible(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", MemoryMB: 64})
	// The shell itself grows past 64 MiB: it is the process killed.
	hog := `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo survived ${#x}`
	res := sh(t, id, hog)
	if !res.OOMKilled || res.ExitCode != 137 {
		t.Fatalf("exec result %+v, want oom_killed and exit 137", res)
	}
	if res := sh(t, id, "kill -9 $$"); res.OOMKilled || res.ExitCode != 137 {
		t.Fatalf("a plain SIGKILL: %+v, want exit 137 without oom_killed", res)
	}
	_, errOut, code := cli(t, "", "exec", id, "--", "sh", "-c", hog)
	if code != 137 || !strings.Contains(errOut, "out of memory") {
		t.Fatalf("CLI: exit %d, stderr %q; want 137 and a message naming the memory limit", code, errOut)
	}
	if _, errOut, code := cli(t, "", "exec", id, "--", "sh", "-c", "kill -9 $$"); code != 137 || strings.Contains(errOut, "memory") {
		t.Fatalf("CLI, plain SIGKILL: exit %d, stderr %q", code, errOut)
	}
}

// TestTerminalWithoutTerminal: shell and exec -t with stdin not a terminal
// fail at once with a hint, rather than wait for the TTL.
func TestTerminalWithoutTerminal(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	for _, args := range [][]string{{"shell", id}, {"exec", "-t", id, "--", "sh"}} {
		start := time.Now()
		_, errOut, code := cli(t, "", args...)
		if code != 2 || !strings.Contains(errOut, "needs a terminal on stdin") || !strings.Contains(errOut, "agentbox exec") {
			t.Errorf("%v without a terminal: exit %d, stderr %q", args, code, errOut)
		}
		t.Logf("%v refused after %s", args, time.Since(start).Round(time.Millisecond))
	}
	if res := sh(t, id, "ls /dev/pts | grep -v ptmx | wc -l"); strings.TrimSpace(res.Stdout) != "0" {
		t.Errorf("a refused shell left a terminal open: %q", res.Stdout)
	}
}

// TestResetToTemplate: after reset --to SNAP a plain reset stays on the
// snapshot, and reset --template goes back to the template.
func TestResetToTemplate(t *testing.T) {
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	mustSh(t, id, "echo snap > /root/marker")
	snap, err := env.client.CreateSnapshot(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.DeleteSnapshot(context.Background(), snap.ID) })
	mustSh(t, id, "rm /root/marker")
	if _, e, code := cli(t, "", "reset", id, "--to", snap.ID); code != 0 {
		t.Fatalf("reset --to: %s", e)
	}
	if _, e, code := cli(t, "", "reset", id); code != 0 {
		t.Fatalf("reset: %s", e)
	}
	if got := mustSh(t, id, "cat /root/marker"); got != "snap" {
		t.Fatalf("after reset: marker %q, want the snapshot's", got)
	}
	if _, e, code := cli(t, "", "reset", id, "--template"); code != 0 {
		t.Fatalf("reset --template: %s", e)
	}
	if res := sh(t, id, "test -e /root/marker"); res.ExitCode == 0 {
		t.Fatal("reset --template kept the snapshot's file")
	}
	sb, _ := env.client.GetSandbox(ctx, id)
	if sb.Snapshot != "" || sb.Template != "busybox" {
		t.Fatalf("after reset --template: snapshot %q template %q", sb.Snapshot, sb.Template)
	}
	// A plain reset now stays on the template.
	if _, e, code := cli(t, "", "reset", id); code != 0 {
		t.Fatalf("reset: %s", e)
	}
	if res := sh(t, id, "test -e /root/marker"); res.ExitCode == 0 {
		t.Fatal("a reset after reset --template went back to the snapshot")
	}
	if _, e, code := cli(t, "", "reset", id, "--template", "--to", snap.ID); code != 2 || !strings.Contains(e, "not both") {
		t.Fatalf("reset --template --to: exit %d %q", code, e)
	}
}

// TestTTLLimitMessages: a TTL past the daemon's limit, or none under one,
// names limits.ttl and what to do.
func TestTTLLimitMessages(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	_, e, code := cli(t, "", "ttl", id, "none")
	if code != 1 || !strings.Contains(e, `set limits.ttl = "0"`) {
		t.Errorf("ttl none: exit %d %q", code, e)
	}
	_, e, code = cli(t, "", "ttl", id, "2d")
	if code != 1 || !strings.Contains(e, "at most 86400 (24h, limits.ttl") {
		t.Errorf("ttl 2d: exit %d %q", code, e)
	}
	if out, e, code := cli(t, "", "ttl", id, "12h"); code != 0 || !strings.Contains(out, "expires at") {
		t.Errorf("ttl 12h: exit %d %q %q", code, out, e)
	}
}

// TestEmptyAPIKeyEnv: AGENTBOX_API_KEY="" as root on the daemon's host is
// an error, never the admin key.
func TestEmptyAPIKeyEnv(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.cliBin, "ls")
	cmd.Env = append(os.Environ(), "AGENTBOX_HOST=unix://"+env.cfg.Socket, "AGENTBOX_API_KEY=")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "AGENTBOX_API_KEY is set but empty") {
		t.Fatalf("ls with AGENTBOX_API_KEY empty: %v\n%s", err, out)
	}
}

// TestDockerHabits: names and id prefixes wherever an id goes, ls -q and
// its columns, rm -f and --all, --version, template inspect as JSON,
// tenant sizes, ps on a multi-line command.
func TestDockerHabits(t *testing.T) {
	tag := "habits-" + randHex(3)
	name := "web-" + randHex(3)
	out, e, code := cli(t, "", "create", "--template", "busybox", "--name", name, "--meta", "suite="+tag)
	if code != 0 {
		t.Fatalf("create --name: %s", e)
	}
	id := strings.TrimSpace(out)
	t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), id) })
	if _, e, code := cli(t, "", "create", "--template", "busybox", "--name", name); code != 1 || !strings.Contains(e, "already named") {
		t.Fatalf("a second sandbox with the same name: exit %d %q", code, e)
	}
	for _, ref := range []string{name, id[:6]} {
		if out, e, code := cli(t, "", "exec", ref, "--", "echo", "hi"); code != 0 || out != "hi\n" {
			t.Fatalf("exec by %q: exit %d %q %q", ref, code, out, e)
		}
	}
	if _, e, code := cli(t, "", "cp", "-", name+":/tmp/f"); code != 0 {
		t.Fatalf("cp to NAME:/path: %s", e)
	}
	out, _, _ = cli(t, "", "inspect", name)
	if !strings.Contains(out, `"id": "`+id+`"`) {
		t.Fatalf("inspect by name: %s", out)
	}

	out, _, _ = cli(t, "", "ls", "-q", "--meta", "suite="+tag)
	if out != id+"\n" {
		t.Fatalf("ls -q: %q, want the id alone", out)
	}
	out, _, _ = cli(t, "", "ls", "--meta", "suite="+tag)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "NAME") || !strings.Contains(lines[0], "ISOLATION") ||
		!strings.Contains(lines[1], name) || !strings.Contains(lines[1], "container") || !strings.Contains(lines[1], " in ") {
		t.Fatalf("ls table:\n%s", out)
	}

	// ps keeps one row per process whatever the command holds.
	if _, e, code := cli(t, "", "exec", "-d", name, "--", "sh", "-c", "sleep 100\necho two"); code != 0 {
		t.Fatalf("exec -d: %s", e)
	}
	out, _, _ = cli(t, "", "ps", name)
	if rows := strings.Split(strings.TrimSpace(out), "\n"); len(rows) != 2 || !strings.Contains(rows[1], `sleep 100\necho two`) {
		t.Fatalf("ps with a multi-line command:\n%s", out)
	}

	// exec -d --tag: logs and kill take the tag.
	if _, e, code := cli(t, "", "exec", "-d", "--tag", "printer", name, "--", "sh", "-c", "echo one; echo two; echo three; sleep 100"); code != 0 {
		t.Fatalf("exec -d --tag: %s", e)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		out, _, _ = cli(t, "", "logs", "--tail", "2", name, "printer")
		if out == "two\nthree\n" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out != "two\nthree\n" {
		t.Fatalf("logs --tail 2 of a tagged process: %q", out)
	}
	if _, e, code := cli(t, "", "kill", name, "printer"); code != 0 {
		t.Fatalf("kill by tag: %s", e)
	}

	if _, e, code := cli(t, "", "rm", "-f", "nosuchsandbox"); code != 0 {
		t.Fatalf("rm -f of a missing sandbox: exit %d %q", code, e)
	}
	if _, _, code := cli(t, "", "rm", "nosuchsandbox"); code != 1 {
		t.Fatalf("rm of a missing sandbox: exit %d, want 1", code)
	}
	out2, _, _ := cli(t, "", "create", "--template", "busybox", "--meta", "suite="+tag)
	out, e, code = cli(t, "", "rm", "--all", "--meta", "suite="+tag)
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, strings.TrimSpace(out2)) {
		t.Fatalf("rm --all --meta: exit %d %q %q", code, out, e)
	}
	if out, _, _ := cli(t, "", "ls", "-q", "--meta", "suite="+tag); out != "" {
		t.Fatalf("after rm --all: %q", out)
	}

	out, _, code = cli(t, "", "--version")
	if code != 0 || !strings.HasPrefix(out, "agentbox ") {
		t.Fatalf("--version: %d %q", code, out)
	}
	out, _, _ = cli(t, "", "template", "inspect", "busybox")
	var tpl api.Template
	if err := json.Unmarshal([]byte(out), &tpl); err != nil || tpl.Name != "busybox" {
		t.Fatalf("template inspect is not JSON: %v\n%s", err, out)
	}
	tenant := "t" + randHex(3)
	if _, e, code := cli(t, "", "tenant", "create", tenant, "--memory", "1G", "--disk", "10G"); code != 0 {
		t.Fatalf("tenant create --memory 1G: %s", e)
	}
	t.Cleanup(func() { cli(t, "", "tenant", "rm", tenant) })
	got, err := env.client.GetTenant(context.Background(), tenant)
	if err != nil || got.Quotas.MemoryMB != 1024 || got.Quotas.DiskMB != 10240 {
		t.Fatalf("tenant quotas: %+v %v", got, err)
	}
}

// TestInfo: agentbox info names every tier with whether it runs, the
// defaults and limits, and for the admin where data and logs are.
func TestInfo(t *testing.T) {
	out, e, code := cli(t, "", "info", "--json")
	if code != 0 {
		t.Fatalf("info: %s", e)
	}
	var got struct {
		Daemon api.Info         `json:"daemon"`
		Pools  []api.PoolStatus `json:"pools"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("info --json: %v\n%s", err, out)
	}
	d := got.Daemon
	h, _ := env.client.Health(context.Background())
	var avail []string
	for _, tr := range d.Tiers {
		if tr.Available {
			avail = append(avail, tr.Name)
		} else if tr.Error == "" {
			t.Errorf("tier %s is unavailable without a reason", tr.Name)
		}
	}
	if strings.Join(avail, ",") != strings.Join(h.Drivers, ",") {
		t.Errorf("available tiers %v, the daemon runs %v", avail, h.Drivers)
	}
	if d.Defaults.TTLSeconds != int64(env.cfg.Defaults.TTL/time.Second) || d.Limits.MemoryMB != env.cfg.Limits.MemoryMB ||
		d.DataDir != env.cfg.DataDir || d.Socket != env.cfg.Socket || d.Log == "" || d.DefaultTemplate != env.cfg.DefaultTemplate {
		t.Errorf("info: %+v", d)
	}
	out, _, _ = cli(t, "", "info")
	for _, want := range []string{"Tiers:", "container", "Defaults:", "ttl 10m", "Limits:", "ttl 24h", "Pools:", "Data:", env.cfg.DataDir, "Log:"} {
		if !strings.Contains(out, want) {
			t.Errorf("info lacks %q:\n%s", want, out)
		}
	}
}

// TestBuildHints: a package step in a build without network, and a step
// whose user may not enter the working directory (docs/templates.md's
// example did), fail saying what to do.
func TestBuildHints(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ spec, want string }{
		{"from: busybox\nsteps:\n  - apt: [curl]\n", "put `network: internet` at the top of the spec"},
		{"from: busybox\nsteps:\n  - workdir: /root\n  - run: id\n    as: nobody\n", "may not enter cwd \"/root\" (mode 0700, owner 0:0); pick a directory that user can use"},
	} {
		spec := filepath.Join(dir, "spec.yaml")
		if err := os.WriteFile(spec, []byte(tc.spec), 0o644); err != nil {
			t.Fatal(err)
		}
		_, e, code := cli(t, "", "template", "build", spec, "--name", "hint-"+randHex(3), "-q")
		if code == 0 || !strings.Contains(e, tc.want) {
			t.Errorf("build of\n%s: exit %d, stderr %q; want a hint %q", tc.spec, code, e, tc.want)
		}
	}
}

// TestShellWarnsBeforeTTL: a shell in a sandbox with a minute left says
// so, with the command that extends it.
func TestShellWarnsBeforeTTL(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", TTLSeconds: 60})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.cliBin, "shell", id)
	cmd.Env = append(os.Environ(), "AGENTBOX_HOST=unix://"+env.cfg.Socket, "AGENTBOX_API_KEY="+env.key)
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 100, Rows: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var (
		mu  sync.Mutex
		out bytes.Buffer
	)
	go func() { // ends when ptmx is closed
		b := make([]byte, 4096)
		for {
			n, err := ptmx.Read(b)
			mu.Lock()
			out.Write(b[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	text := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(text(), "agentbox ttl "+id) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	ptmx.Write([]byte("exit 0\r"))
	_ = cmd.Wait()
	if got := text(); !strings.Contains(got, "expires in") || !strings.Contains(got, "agentbox ttl "+id) {
		t.Fatalf("no TTL warning in the shell's output:\n%q", got)
	}
}

// TestCpTrailingSlash: cp FILE ID:/dir/ copies into the directory, as
// docker cp does.
func TestCpTrailingSlash(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	mustSh(t, id, "mkdir -p /root/dir")
	local := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(local, []byte("n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{id + ":/root/dir/", id + ":/root/new/"} {
		if _, e, code := cli(t, "", "cp", local, dst); code != 0 {
			t.Fatalf("cp %s: exit %d %q", dst, code, e)
		}
	}
	if got := mustSh(t, id, "cat /root/dir/notes.txt /root/new/notes.txt"); got != "n\nn" {
		t.Fatalf("copied files: %q", got)
	}
}

// TestAttachCLI: agentbox attach connects this terminal to a terminal
// session by its pid, takes this terminal's size and exits with the
// session's status; without a terminal it is refused at once.
func TestAttachCLI(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	sess, err := env.client.CreatePTY(context.Background(), id, api.CreatePTYRequest{Cmd: []string{"sh"}, Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(sess.Pid)
	if _, e, code := cli(t, "", "attach", id, pid); code != 2 || !strings.Contains(e, "attach needs a terminal") {
		t.Fatalf("attach without a terminal: exit %d %q", code, e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.cliBin, "attach", id, pid)
	cmd.Env = append(os.Environ(), "AGENTBOX_HOST=unix://"+env.cfg.Socket, "AGENTBOX_API_KEY="+env.key)
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 90, Rows: 33})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&out, ptmx); close(done) }()
	ptmx.Write([]byte("stty size; echo attached-$((2+3)); exit 5\r"))
	err = cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 5 {
		t.Fatalf("attach: %v, want exit status 5", err)
	}
	ptmx.Close()
	<-done
	if got := out.String(); !strings.Contains(got, "33 90") || !strings.Contains(got, "attached-5") {
		t.Fatalf("attach output %q, want the terminal's size and the command's output", got)
	}
}
