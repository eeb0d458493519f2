package integration

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

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
