package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
)

// buildProtocol0Guest builds this tree's cmd/agentbox-guest with the one
// line that reports its protocol version taken out: what an agent of
// protocol 0 (internal/guest/proto), one from before the guest protocol
// was versioned, answers. It stands in for such an agent. (This test
// built the agent of commit 6298eae until the uid ranges' views left the
// host's mount table: a daemon now hands an init its views as
// descriptors, which an agent that old does not attach, so it can no
// longer boot a new sandbox under this daemon. A sandbox booted by an
// older daemon and agent keeps the mounts its init made; that case is
// not run here.)
func buildProtocol0Guest(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	copyTree := exec.Command("sh", "-c", fmt.Sprintf("tar -C %q --exclude=./.git --exclude=./bin --exclude=node_modules -c . | tar -x -C %q", env.repo, src))
	if out, err := copyTree.CombinedOutput(); err != nil {
		t.Fatalf("copying the tree: %v\n%s", err, out)
	}
	f := filepath.Join(src, "internal", "guest", "server.go")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	const line = "Protocol: proto.Version,"
	if strings.Count(string(b), line) != 1 {
		t.Fatalf("internal/guest/server.go no longer has exactly one %q; update this test", line)
	}
	if err := os.WriteFile(f, []byte(strings.Replace(string(b), line, "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(filepath.Dir(env.cfg.GuestBinary), "agentbox-guest-protocol0")
	cmd := exec.Command("go", "build", "-buildvcs=false", "-o", bin, "./cmd/agentbox-guest")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building a protocol-0 guest agent: %v\n%s", err, out)
	}
	return bin
}

// TestGuestFromOlderCommit: a daemon upgraded under live sandboxes keeps
// serving them. Sandboxes are booted with a guest agent that reports no
// protocol version (protocol 0, as agents from before it was versioned:
// buildProtocol0Guest); the
// daemon restarts with this build's agent and re-adopts them; exec,
// streaming exec, files and background processes still work on them
// through this build's daemon, their records carry no error, and a
// sandbox created after the upgrade gets the new agent.
func TestGuestFromOlderCommit(t *testing.T) {
	ctx := context.Background()
	old := buildProtocol0Guest(t)
	current := env.cfg.GuestBinary
	t.Cleanup(func() {
		if env.cfg.GuestBinary != current {
			restartDaemon(t, func() { env.cfg.GuestBinary = current })
		}
	})
	restartDaemon(t, func() { env.cfg.GuestBinary = old })

	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Env: map[string]string{"GREETING": "hi"}})
	mustSh(t, id, "echo before > /root/state; sleep 1000 &")
	sb, err := env.client.GetSandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", sb.Pid)); err != nil || !strings.HasSuffix(exe, filepath.Base(old)) {
		t.Fatalf("the sandbox's init runs %q (%v), want the old agent %s", exe, err, old)
	}

	restartDaemon(t, func() { env.cfg.GuestBinary = current })

	sb, err = env.client.GetSandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != api.StateRunning || sb.Error != "" {
		t.Fatalf("after the upgrade the old agent's sandbox is %s with error %q; want running, no error", sb.State, sb.Error)
	}
	if got := mustSh(t, id, "cat /root/state; echo $GREETING; ps | grep -q '[s]leep 1000' && echo sleeper"); got != "before\nhi\nsleeper" {
		t.Fatalf("exec on the old agent after the upgrade: %q", got)
	}
	// Files, both ways, through the new daemon.
	if _, err := env.client.WriteFile(ctx, id, "/root/up.txt", strings.NewReader("uploaded"), 0o644); err != nil {
		t.Fatalf("write file: %v", err)
	}
	if got := string(readAll(t, id, "/root/up.txt")); got != "uploaded" {
		t.Fatalf("read back %q", got)
	}
	// Streaming exec and a background process.
	var out strings.Builder
	ev, err := env.client.ExecStream(ctx, id, api.ExecRequest{Shell: "echo streamed"}, nil, &out, &out)
	if err != nil || ev == nil || ev.ExitCode == nil || *ev.ExitCode != 0 || out.String() != "streamed\n" {
		t.Fatalf("streaming exec: %q, exit %+v, %v", out.String(), ev, err)
	}
	p, err := env.client.StartProcess(ctx, id, api.StartProcessRequest{Shell: "echo bg; sleep 0.1"})
	if err != nil {
		t.Fatalf("start process: %v", err)
	}
	if res, err := env.client.WaitProcess(ctx, id, fmt.Sprint(p.Pid), 30000); err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("wait process: %+v, %v", res, err)
	}

	// A sandbox created now gets this build's agent.
	fresh := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	fsb, err := env.client.GetSandbox(ctx, fresh)
	if err != nil {
		t.Fatal(err)
	}
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", fsb.Pid)); err != nil || exe != current {
		t.Fatalf("a sandbox created after the upgrade runs %q (%v), want %s", exe, err, current)
	}
	mustSh(t, fresh, "true")
}
