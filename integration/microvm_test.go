package integration

// The microvm tier end to end (its first milestone, docs/microvm.md): a
// QEMU VM with Debian's guest kernel serving the same guest protocol, the
// accelerator in inspect, re-adoption after a daemon restart, snapshots
// of the files alone refused with a clear error, and destroy leaving
// nothing on the host (memory snapshots: microvm_memory_test.go). Few tests on
// purpose: each VM boots in seconds under emulation (no /dev/kvm here).

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/drivers/microvm"
)

// needMicrovm fails when the daemon does not offer the microvm tier,
// saying why (its trial boot's error, or what is not installed).
func needMicrovm(t *testing.T) {
	t.Helper()
	h, err := env.client.Health(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(h.Drivers, "microvm") {
		return
	}
	why := "see the daemon's warning"
	if info, err := env.client.Info(context.Background()); err == nil {
		for _, tr := range info.Tiers {
			if tr.Name == "microvm" {
				why = tr.Error
			}
		}
	}
	t.Fatalf("the daemon does not offer the microvm tier (tiers %v): %s; scripts/install-deps.sh installs what it needs (make test does)", h.Drivers, why)
}

// TestMicrovmCLI is the acceptance line through the real CLI.
func TestMicrovmCLI(t *testing.T) {
	needMicrovm(t)
	needBase(t)
	out, errOut, code := cli(t, "", "run", "--isolation", "microvm", "--template", "base", "--", "python3", "-c", "print(sum(range(101)))")
	if code != 0 || strings.TrimSpace(out) != "5050" {
		t.Fatalf("agentbox run --isolation microvm: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestMicrovm(t *testing.T) {
	needMicrovm(t)
	ctx := context.Background()
	start := time.Now()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Isolation: "microvm"})
	t.Logf("create to an answering agent: %v", time.Since(start).Round(time.Millisecond))
	sb, err := env.client.GetSandbox(ctx, id)
	if err != nil || sb.Isolation != "microvm" {
		t.Fatalf("isolation %q, %v", sb.Isolation, err)
	}
	if sb.Accelerator != "kvm" && sb.Accelerator != "tcg" {
		t.Errorf("accelerator %q, want kvm or tcg", sb.Accelerator)
	}
	// inspect, through the CLI, shows it too.
	out, errOut, code := cli(t, "", "inspect", id)
	var shown api.Sandbox
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || shown.Accelerator != sb.Accelerator {
		t.Errorf("agentbox inspect: exit %d, %q, %q", code, out, errOut)
	}

	// The guest's own kernel, not the host's.
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	hostRel := string(bytes.TrimRight(uts.Release[:], "\x00"))
	if got := mustSh(t, id, "uname -r"); got != microvm.KernelRelease || got == hostRel {
		t.Errorf("uname -r %q; want the guest kernel %s (the host runs %s)", got, microvm.KernelRelease, hostRel)
	}
	// Files in and out through the agent, and exec as another user.
	body := "hello from the host " + randHex(8)
	if _, err := env.client.WriteFile(ctx, id, "/tmp/x/hello.txt", strings.NewReader(body), 0o644); err != nil {
		t.Fatalf("write: %v", err)
	}
	if got := string(readAll(t, id, "/tmp/x/hello.txt")); got != body {
		t.Errorf("read back %q", got)
	}
	if out := mustSh(t, id, "cat /tmp/x/hello.txt; echo; id -u"); out != body+"\n0" {
		t.Errorf("in the sandbox: %q", out)
	}
	if res := execReq(t, id, api.ExecRequest{Shell: "id -un", User: "user"}); strings.TrimSpace(res.Stdout) != "user" {
		t.Errorf("exec as user: %+v", res)
	}

	// A daemon restart: the old daemon's sessions close with it, the VM
	// runs on, and the new daemon adopts it over a new one.
	mustSh(t, id, "sleep 600 >/dev/null 2>&1 &")
	restartDaemon(t, func() {})
	if out := mustSh(t, id, "cat /tmp/x/hello.txt; echo; ps -o args | grep -c '^sleep 600'"); out != body+"\n1" {
		t.Errorf("after a daemon restart: %q, want the file and the sleeper", out)
	}

	// Pause stops the VM (QEMU frozen in its cgroups, memory kept):
	// the sleeper is there again after the resume, and an exec works.
	if _, err := env.client.PauseSandbox(ctx, id); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if sb, err := env.client.GetSandbox(ctx, id); err != nil || sb.State != api.StatePaused {
		t.Fatalf("after pause: %+v %v", sb, err)
	}
	if _, err := env.client.ResumeSandbox(ctx, id); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if out := mustSh(t, id, "ps -o args | grep -c '^sleep 600'"); out != "1" {
		t.Errorf("after pause and resume: %q sleepers, want 1", out)
	}

	// Reset: a new VM on an empty writable layer, same id (the service's
	// full path: the old VM destroyed, a new one booted).
	mustSh(t, id, "echo gone > /root/reset-marker")
	if _, err := env.client.ResetSandbox(ctx, id, ""); err != nil {
		t.Fatalf("reset: %v", err)
	}
	if out := mustSh(t, id, "cat /root/reset-marker 2>/dev/null || echo absent; cat /tmp/x/hello.txt 2>/dev/null || echo absent"); out != "absent\nabsent" {
		t.Errorf("after a reset: %q, want the writable layer empty", out)
	}
	if sb, err = env.client.GetSandbox(ctx, id); err != nil || sb.Pid <= 0 {
		t.Fatalf("after a reset: %+v %v", sb, err)
	}

	// A snapshot of the files alone is refused, saying so (the tier
	// snapshots with memory: microvm_memory_test.go).
	const memOnly = "with memory only"
	if _, err := env.client.CreateSnapshot(ctx, id, ""); err == nil || !strings.Contains(err.Error(), memOnly) {
		t.Errorf("snapshot: %v, want %q", err, memOnly)
	}
	// A sandbox with egress: the VM's NIC takes the veth end's address
	// (its packets redirected through a tap; the conformance suite's
	// netns-at-create test connects out through it).
	if net, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", Isolation: "microvm",
		Network: &api.Network{Egress: api.EgressInternet}}); err != nil {
		t.Errorf("create with egress internet: %v", err)
	} else {
		out := mustSh(t, net.ID, "ip -4 -o addr show | grep -v ' lo ' | wc -l; ip route | grep -c '^default via'")
		if out != "1\n1" {
			t.Errorf("a microvm with egress: %q, want one IPv4 address besides lo and a default route", out)
		}
		if err := env.client.DestroySandbox(ctx, net.ID); err != nil {
			t.Errorf("destroy: %v", err)
		}
	}

	// Destroy leaves no QEMU process, socket, cgroup or run dir.
	if sb.Pid <= 0 {
		t.Fatalf("no host pid for the VM: %+v", sb)
	}
	runDir := filepath.Join(env.cfg.RunDir, "sandboxes", id)
	if _, err := os.Stat(filepath.Join(runDir, "vm", "agent.sock")); err != nil {
		t.Fatalf("no agent socket in %s: %v", runDir, err)
	}
	if err := env.client.DestroySandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left []string
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(sb.Pid) + "/cmdline"); err == nil && bytes.Contains(b, []byte("qemu")) {
			left = append(left, "qemu process "+strconv.Itoa(sb.Pid))
		}
		for _, c := range []string{"memory", "cpu", "pids"} {
			if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", c, env.cfg.CgroupParent, id)); err == nil {
				left = append(left, c+" cgroup")
			}
		}
		if _, err := os.Stat(runDir); err == nil {
			left = append(left, "run dir "+runDir)
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("destroy left %v", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMicrovmBenchLines: the microvm lines of `agentbox bench` run
// against the test daemon (a few samples each, every one without error)
// and say which accelerator ran them.
func TestMicrovmBenchLines(t *testing.T) {
	needMicrovm(t)
	rep := benchLines(t, `\(microvm\)$`, 3, 5*time.Minute, []string{"create/busybox (microvm)", "exec/true (microvm)", "fork/memory per child (microvm)"})
	if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "accelerator") }) {
		t.Errorf("no note names the accelerator: %q", rep.Notes)
	}
}
