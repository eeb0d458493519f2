package integration

// The gvisor tier end to end: a runsc sandbox serving the same guest
// protocol, its kernel is gVisor's, and destroy leaves nothing on the host.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

// needGvisor fails (not skips) when runsc is installed but the daemon does
// not offer the tier; it skips only on hosts without runsc at all.
func needGvisor(t *testing.T) {
	t.Helper()
	h, err := env.client.Health(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(h.Drivers, "gvisor") {
		return
	}
	if _, err := os.Stat("/usr/local/lib/agentbox/runsc"); err == nil {
		t.Fatalf("runsc is installed but the daemon does not offer gvisor (tiers %v): see its warning", h.Drivers)
	}
	t.Fatal("runsc is not installed: run scripts/install-runsc.sh (make test does); the gvisor tier is unavailable on this host")
}

func TestGvisor(t *testing.T) {
	needGvisor(t)
	needBase(t)
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: "gvisor"})
	sb, err := env.client.GetSandbox(ctx, id)
	if err != nil || sb.Isolation != "gvisor" {
		t.Fatalf("isolation %q, %v", sb.Isolation, err)
	}
	if out := mustSh(t, id, "python3 -c 'print(sum(range(101)))'"); out != "5050" {
		t.Errorf("python3: %q", out)
	}
	if out := mustSh(t, id, "uname -a; dmesg 2>&1 | head -3"); !strings.Contains(out, "gvisor") || !strings.Contains(out, "gVisor") {
		t.Errorf("uname/dmesg do not show gVisor: %q", out)
	}
	// Files round trip, and exec as the unprivileged user.
	body := "hello from the host " + randHex(8)
	if _, err := env.client.WriteFile(ctx, id, "/tmp/x/hello.txt", strings.NewReader(body), 0o644); err != nil {
		t.Fatalf("write: %v", err)
	}
	if got := string(readAll(t, id, "/tmp/x/hello.txt")); got != body {
		t.Errorf("read back %q", got)
	}
	if out := mustSh(t, id, "cat /tmp/x/hello.txt; echo; id -u; ls -ld /root | awk '{print $3}'"); out != body+"\n0\nroot" {
		t.Errorf("in the sandbox: %q", out)
	}
	if res := execReq(t, id, api.ExecRequest{Shell: "id -un", User: "user"}); strings.TrimSpace(res.Stdout) != "user" {
		t.Errorf("exec as user: %+v", res)
	}
	// No network but loopback.
	if out := mustSh(t, id, "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '"); strings.TrimSpace(out) != "lo" {
		t.Errorf("interfaces: %q; want only lo", out)
	}

	// A timeout kills the exec's whole tree, setsid and double forks
	// included (per-exec cgroups in gVisor's own pids hierarchy).
	res := execReq(t, id, api.ExecRequest{Shell: "setsid sleep 300 & (sleep 301 &); sleep 302", TimeoutMs: 1000})
	if !res.TimedOut {
		t.Errorf("exec did not time out: %+v", res)
	}
	// Polled: the kill reaches a busy host's processes in its own time.
	left := ""
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if left = mustSh(t, id, "ps -o args | grep -c '^sleep 30[012]' || true"); left == "0" || time.Now().After(deadline) {
			break
		}
	}
	if left != "0" {
		t.Errorf("%s sleepers outlived the exec's timeout by a minute", left)
	}
	// Pause (runsc pause) and resume keep the sandbox and its files.
	if _, err := env.client.PauseSandbox(ctx, id); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if _, err := env.client.ResumeSandbox(ctx, id); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if got := string(readAll(t, id, "/tmp/x/hello.txt")); got != body {
		t.Errorf("after pause and resume: %q", got)
	}

	runDir := filepath.Join(env.cfg.RunDir, "sandboxes", id)
	if _, err := os.Stat(filepath.Join(runDir, "runsc")); err != nil {
		t.Fatalf("no runsc state in %s: %v", runDir, err)
	}
	if !hostHas(t, "/proc/self/mountinfo", runDir) {
		t.Errorf("no root overlay mounted under %s", runDir)
	}
	if err := env.client.DestroySandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	// Nothing is left: no runsc process of the sandbox, no mount, no cgroup.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		if out, _ := exec.Command("pgrep", "-f", "runsc.*"+id).Output(); len(strings.TrimSpace(string(out))) > 0 {
			left = append(left, "runsc processes "+strings.Fields(string(out))[0])
		}
		if hostHas(t, "/proc/self/mountinfo", runDir) {
			left = append(left, "a mount under "+runDir)
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

// TestGvisorCLI is the acceptance line through the real CLI.
func TestGvisorCLI(t *testing.T) {
	needGvisor(t)
	needBase(t)
	out, errOut, code := cli(t, "", "run", "--isolation", "gvisor", "--template", "base", "--", "python3", "-c", "print(sum(range(101)))")
	if code != 0 || strings.TrimSpace(out) != "5050" {
		t.Fatalf("agentbox run --isolation gvisor: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestGvisorCreateLatency measures create (until the guest answers) on the
// gvisor tier: 10 creates of busybox, p50 and max logged.
func TestGvisorCreateLatency(t *testing.T) {
	needGvisor(t)
	ctx := context.Background()
	var ds []time.Duration
	for range 10 {
		start := time.Now()
		sb, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", Isolation: "gvisor"})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		ds = append(ds, time.Since(start))
		if err := env.client.DestroySandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	t.Logf("gvisor create (10, busybox): p50 %v, min %v, max %v; all %v", ds[len(ds)/2], ds[0], ds[len(ds)-1], ds)
}

// TestGvisorExecsStartWithoutCapabilities: every process the agent starts
// inside gVisor, from whichever of its threads, as root too, has no
// capabilities, and neither has the agent's main thread in its bounding
// set. The agent empties the bounding set per forking thread; gVisor
// starts it with the OCI spec's partial set, which once fooled the
// per-thread drop into skipping it.
func TestGvisorExecsStartWithoutCapabilities(t *testing.T) {
	needGvisor(t)
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Isolation: "gvisor"})
	const n = 16
	outs := make(chan execOutcome, n)
	for i := range n {
		user := "root"
		if i%4 == 3 {
			user = "user"
		}
		go func() {
			outs <- <-goExec(id, api.ExecRequest{Shell: "grep -E '^Cap(Bnd|Eff|Prm|Amb|Inh)' /proc/self/status", User: user})
		}()
	}
	var bad []string
	for range n {
		o := <-outs
		if o.err != nil {
			t.Fatal(o.err)
		}
		for _, l := range strings.Split(strings.TrimSpace(o.res.Stdout), "\n") {
			if !strings.HasSuffix(l, "\t0000000000000000") {
				bad = append(bad, l)
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("exec'd processes have capabilities (%d lines), e.g. %q", len(bad), bad[0])
	}
	if out := mustSh(t, id, "grep CapBnd /proc/1/status"); !strings.HasSuffix(out, "\t0000000000000000") {
		t.Errorf("the agent's main thread: %q, want an empty bounding set", out)
	}
}

// hostHas reports whether file holds s.
func hostHas(t *testing.T, file, s string) bool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), s)
}

// TestGvisorSurvivesRestart: a daemon restart re-adopts a running gvisor
// sandbox (runsc state, the Sentry's pid and start time, a ping) with its
// processes and files, and a paused one stays paused.
func TestGvisorSurvivesRestart(t *testing.T) {
	needGvisor(t)
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Isolation: "gvisor"})
	paused := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Isolation: "gvisor"})
	mustSh(t, id, "echo kept > /root/kept; sleep 600 >/dev/null 2>&1 &")
	if _, err := env.client.PauseSandbox(ctx, paused); err != nil {
		t.Fatal(err)
	}
	restartDaemon(t, func() {})
	if out := mustSh(t, id, "cat /root/kept; ps -o args | grep -c '^sleep 600'"); out != "kept\n1" {
		t.Errorf("after the restart: %q, want the file and the sleeper", out)
	}
	sb, err := env.client.GetSandbox(ctx, paused)
	if err != nil || sb.State != api.StatePaused {
		t.Fatalf("paused sandbox after the restart: %+v, %v", sb, err)
	}
	if _, err := env.client.ResumeSandbox(ctx, paused); err != nil {
		t.Fatalf("resume after the restart: %v", err)
	}
	mustSh(t, paused, "true")
}

// TestGvisorSnapshotFiles: on the gvisor tier, the root's writes (a new
// directory and file, a changed file, a removed one) are in a snapshot
// without memory and in a create from it, a fork carries the source's
// later ones, and a reset to the snapshot brings the snapshot's back.
// They are the host overlay's upper, the layer those are made of (a
// change that moved them into gVisor's own root overlay, the way to a
// true `df /` there, must carry them another way: docs/sandbox-view.md,
// "Not yet").
func TestGvisorSnapshotFiles(t *testing.T) {
	needGvisor(t)
	needBase(t)
	ctx := context.Background()
	src := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: "gvisor"})
	mustSh(t, src, `mkdir -p /srv/data && echo one > /srv/data/new && echo changed > /etc/motd && rm /etc/issue`)
	const state = `cat /srv/data/new /etc/motd; test -e /etc/issue && echo issue-present || echo issue-gone`
	const atSnapshot = "one\nchanged\nissue-gone"
	if got := mustSh(t, src, state); got != atSnapshot {
		t.Fatalf("the source's root: %q, want %q", got, atSnapshot)
	}
	name := "files-" + randHex(4)
	snap, err := env.client.CreateSnapshot(ctx, src, name)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	t.Cleanup(func() { _ = env.client.DeleteSnapshot(context.Background(), snap.ID) })
	mustSh(t, src, `echo two > /srv/data/new`)
	id := newSandbox(t, api.CreateSandboxRequest{Snapshot: name})
	if sb, _ := env.client.GetSandbox(ctx, id); sb == nil || sb.Isolation != "gvisor" {
		t.Errorf("created from a gvisor snapshot: %+v, want the gvisor tier", sb)
	}
	if got := mustSh(t, id, state); got != atSnapshot {
		t.Errorf("a sandbox from the snapshot: %q, want %q", got, atSnapshot)
	}
	kids, err := env.client.ForkSandbox(ctx, src, 1)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), kids[0].ID) })
	if got, want := mustSh(t, kids[0].ID, state), "two\nchanged\nissue-gone"; got != want {
		t.Errorf("a fork after a later write: %q, want %q", got, want)
	}
	if _, err := env.client.ResetSandbox(ctx, src, name); err != nil {
		t.Fatalf("reset to the snapshot: %v", err)
	}
	if got := mustSh(t, src, state); got != atSnapshot {
		t.Errorf("the source reset to the snapshot: %q, want %q", got, atSnapshot)
	}
}
