package integration

// Memory snapshots on the gvisor tier (runsc checkpoint/restore): pause to
// disk across a daemon restart, fork with memory, snapshot with memory,
// and the clear error the container tier answers. A python3 server holds
// its state only in memory (a random value drawn at start and a counter a
// thread bumps), so reading it back proves the process itself went on.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// memServer is the python3 server: "get" answers "<value> <count>",
// "set X" sets the value first.
const memServer = `import os, socket, threading, time
state = {"v": os.urandom(8).hex(), "n": 0}
def tick():
    while True:
        state["n"] += 1
        time.sleep(0.02)
threading.Thread(target=tick, daemon=True).start()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 7000))
s.listen(16)
while True:
    c, _ = s.accept()
    req = c.recv(200).decode().strip()
    if req.startswith("set "):
        state["v"] = req[4:]
    c.sendall(("%s %d\n" % (state["v"], state["n"])).encode())
    c.close()
`

// startMemServer writes and starts the server in the background and
// returns its first answer.
func startMemServer(t *testing.T, id string) (string, int) {
	t.Helper()
	if _, err := env.client.WriteFile(context.Background(), id, "/root/srv.py", strings.NewReader(memServer), 0o644); err != nil {
		t.Fatal(err)
	}
	mustSh(t, id, "nohup python3 /root/srv.py >/root/srv.log 2>&1 &")
	deadline := time.Now().Add(20 * time.Second)
	for {
		res := sh(t, id, memQuery("get"))
		if res.ExitCode == 0 {
			return parseMem(t, res.Stdout)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the python server did not answer: %+v; log: %s", res, mustSh(t, id, "cat /root/srv.log"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func memQuery(req string) string {
	return fmt.Sprintf(`python3 -c 'import socket,sys; s=socket.create_connection(("127.0.0.1",7000)); s.sendall(sys.argv[1].encode()); print(s.recv(200).decode().strip())' %q`, req)
}

func parseMem(t *testing.T, out string) (string, int) {
	t.Helper()
	f := strings.Fields(out)
	if len(f) != 2 {
		t.Fatalf("server answered %q", out)
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("server answered %q", out)
	}
	return f[0], n
}

func askMem(t *testing.T, id, req string) (string, int) {
	t.Helper()
	return parseMem(t, mustSh(t, id, memQuery(req)))
}

// TestGvisorPauseToDisk: a live python3 process is checkpointed to disk
// (no runsc process left on the host), the daemon restarts, resume
// restores it and its memory is as it was, its thread still counting.
func TestGvisorPauseToDisk(t *testing.T) {
	needGvisor(t)
	needBase(t)
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: "gvisor"})
	v0, n0 := startMemServer(t, id)
	mustSh(t, id, "echo on-disk > /root/file")
	// The agent's checkpoint control socket answers only runsc's hook.
	ctl := mustSh(t, id, `python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect("\0agentbox-guest-ctl"); s.sendall(b"{\"mode\":\"restore\"}\n"); print(s.recv(200).decode().strip())'`)
	if !strings.HasPrefix(ctl, "error:") {
		t.Errorf("a sandbox process on the agent's control socket got %q, want an error", ctl)
	}

	t0 := time.Now()
	sb, err := env.client.PauseSandboxToDisk(ctx, id)
	if err != nil {
		t.Fatalf("pause to disk: %v", err)
	}
	checkpoint := time.Since(t0)
	if sb.State != api.StatePaused || !sb.PausedToDisk {
		t.Fatalf("after pause to disk: state %s, paused_to_disk %v", sb.State, sb.PausedToDisk)
	}
	dir := filepath.Join(env.cfg.DataDir, "checkpoints", id)
	if _, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil {
		t.Fatalf("no checkpoint in %s: %v", dir, err)
	}
	// Killed with the sandbox's cgroup, they may take a moment to exit
	// on a loaded host.
	var left string
	waitCount(func() int {
		out, _ := exec.Command("pgrep", "-f", "runsc.*"+id).Output()
		left = strings.TrimSpace(string(out))
		return len(left)
	}, func(n int) bool { return n == 0 }, 30*time.Second)
	if left != "" {
		t.Errorf("runsc processes still run 30 s after pause to disk: %s", left)
	}
	if _, err := env.client.Exec(ctx, id, api.ExecRequest{Shell: "true"}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("exec on a sandbox paused to disk: %v, want failed_precondition", err)
	}

	restartDaemon(t, func() {})
	if sb, err := env.client.GetSandbox(ctx, id); err != nil || sb.State != api.StatePaused || !sb.PausedToDisk {
		t.Fatalf("after the restart: %+v, %v; want paused to disk", sb, err)
	}
	t0 = time.Now()
	if _, err := env.client.ResumeSandbox(ctx, id); err != nil {
		t.Fatalf("resume from disk: %v", err)
	}
	restore := time.Since(t0)
	v1, n1 := askMem(t, id, "get")
	if v1 != v0 || n1 < n0 {
		t.Errorf("after the restore the server answers %s %d; before it %s %d", v1, n1, v0, n0)
	}
	// The thread runs again: its count moves within a minute (on a loaded
	// host it may not get to run within any fixed time).
	n2 := waitCount(func() int { _, n := askMem(t, id, "get"); return n }, func(n int) bool { return n > n1 }, time.Minute)
	if n2 <= n1 {
		t.Errorf("the counter thread stopped: %d then %d a minute later", n1, n2)
	}
	if out := mustSh(t, id, "cat /root/file"); out != "on-disk" {
		t.Errorf("file after the restore: %q", out)
	}
	memTotalIsLimit(t, id, "after a resume from disk")
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("checkpoint %s is still there after the restore", dir)
	}
	t.Logf("pause to disk (checkpoint) %v, resume (restore) %v", checkpoint.Round(time.Millisecond), restore.Round(time.Millisecond))
	// Destroy after a second pause to disk removes its checkpoint.
	if _, err := env.client.PauseSandboxToDisk(ctx, id); err != nil {
		t.Fatalf("second pause to disk: %v", err)
	}
	if err := env.client.DestroySandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("destroy left the checkpoint %s", dir)
	}
}

// TestGvisorForkWithMemory: 3 children of a sandbox running a python3
// server each answer with the parent's in-memory value, then change it
// independently; the parent keeps running with its own. The parent's
// HTTP server goes on listening in each child, which answers on its own
// preview URL with its own files.
func TestGvisorForkWithMemory(t *testing.T) {
	needGvisor(t)
	needBase(t)
	ctx := context.Background()
	parent := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: "gvisor"})
	v0, _ := startMemServer(t, parent)
	mustSh(t, parent, "echo parent > /root/who")
	// An HTTP server listening in the parent; the children never start
	// one, yet each answers on its own preview URL.
	mustSh(t, parent, "nohup python3 -m http.server 8002 --bind 127.0.0.1 --directory /root >/dev/null 2>&1 &")
	psb, err := env.client.GetSandbox(ctx, parent)
	if err != nil {
		t.Fatal(err)
	}
	waitPreview(t, psb, 8002, "/who", "parent")

	t0 := time.Now()
	kids, err := env.client.ForkSandboxWithMemory(ctx, parent, 3)
	if err != nil {
		t.Fatalf("fork with memory: %v", err)
	}
	took := time.Since(t0)
	for _, k := range kids {
		t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), k.ID) })
	}
	if len(kids) != 3 {
		t.Fatalf("%d children", len(kids))
	}
	hosts := forkedApart(t, parent, "gvisor", v0, kids)
	for i := range kids {
		waitPreview(t, &kids[i], 8002, "/who", fmt.Sprintf("child-%d", i))
	}
	if len(hosts) != 3 || hosts["sbx-"+parent] {
		t.Errorf("children's hostnames %v: want 3 of their own", hosts)
	}
	if v, _ := askMem(t, parent, "get"); v != v0 {
		t.Errorf("the parent answers %q after the fork, want %q", v, v0)
	}
	if out := mustSh(t, parent, "cat /root/who"); out != "parent" {
		t.Errorf("the parent's file: %q", out)
	}
	t.Logf("fork with memory, 3 children: %v (%v per child)", took.Round(time.Millisecond), (took / 3).Round(time.Millisecond))
}

// waitPreview waits until sb's preview URL of port answers path with want.
func waitPreview(t *testing.T, sb *api.Sandbox, port int, path, want string) {
	t.Helper()
	hc := unixHTTP()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for {
		resp, err := hc.Do(previewReq(t, sb, port, path, true))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = fmt.Sprintf("%d %q", resp.StatusCode, strings.TrimSpace(string(b)))
			if resp.StatusCode == 200 && strings.TrimSpace(string(b)) == want {
				return
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's preview of port %d: %s, want %q", sb.ID, port, last, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestGvisorSnapshotWithMemory: a snapshot with memory, then a create
// from it (its tier chosen from the snapshot) goes on running the server.
func TestGvisorSnapshotWithMemory(t *testing.T) {
	needGvisor(t)
	needBase(t)
	ctx := context.Background()
	src := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: "gvisor"})
	v0, _ := startMemServer(t, src)
	name := "mem-" + randHex(4)
	t0 := time.Now()
	snap, err := env.client.CreateMemorySnapshot(ctx, src, name)
	if err != nil {
		t.Fatalf("snapshot with memory: %v", err)
	}
	took := time.Since(t0)
	t.Cleanup(func() { _ = env.client.DeleteSnapshot(context.Background(), snap.ID) })
	if !snap.Memory {
		t.Errorf("snapshot %+v does not say memory", snap)
	}
	askMem(t, src, "set changed-after")
	// The posture check passes on the sandbox that was checkpointed (the
	// documented `snapshot --memory` then `inspect --security`).
	postureOf(t, src, "after snapshot --memory")
	t0 = time.Now()
	id := newSandbox(t, api.CreateSandboxRequest{Snapshot: name})
	create := time.Since(t0)
	sb, _ := env.client.GetSandbox(ctx, id)
	if sb.Isolation != "gvisor" {
		t.Errorf("created from a gvisor memory snapshot on %q", sb.Isolation)
	}
	if v, _ := askMem(t, id, "get"); v != v0 {
		t.Errorf("the restored server answers %q, the snapshot's value is %q", v, v0)
	}
	postureOf(t, id, "restored from a memory snapshot")
	memTotalIsLimit(t, id, "restored from a memory snapshot")
	t.Logf("snapshot with memory %v, create from it %v", took.Round(time.Millisecond), create.Round(time.Millisecond))
	// Files only from the same snapshot on another tier would be the
	// container tier's; here: deleting it while a sandbox stacks on it is
	// refused as for any snapshot.
	if err := env.client.DeleteSnapshot(ctx, name); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("delete while a sandbox depends on it: %v", err)
	}
}

// TestMemoryModesOnContainer: the container tier answers the memory modes
// with failed_precondition naming the gvisor tier.
func TestMemoryModesOnContainer(t *testing.T) {
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Isolation: "container"})
	_, err1 := env.client.PauseSandboxToDisk(ctx, id)
	_, err2 := env.client.ForkSandboxWithMemory(ctx, id, 1)
	_, err3 := env.client.CreateMemorySnapshot(ctx, id, "")
	for i, err := range []error{err1, err2, err3} {
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "gvisor") {
			t.Errorf("memory mode %d on the container tier: %v; want failed_precondition naming gvisor", i, err)
		}
	}
	if sb, err := env.client.GetSandbox(ctx, id); err != nil || sb.State != api.StateRunning {
		t.Errorf("the sandbox after refused memory modes: %+v, %v", sb, err)
	}
}

// TestGvisorOnTimeoutPausesToDisk: on the gvisor tier a TTL with
// on_timeout pause pauses to disk (no runsc process left), and an exec
// with auto_resume restores the sandbox with its processes.
func TestGvisorOnTimeoutPausesToDisk(t *testing.T) {
	needGvisor(t)
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Isolation: "gvisor", TTLSeconds: 2, OnTimeout: api.OnTimeoutPause, AutoResume: true})
	mustSh(t, id, "sleep 600 >/dev/null 2>&1 &")
	dir := filepath.Join(env.cfg.DataDir, "checkpoints", id)
	deadline := time.Now().Add(30 * time.Second)
	for {
		sb, err := env.client.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "complete")); err == nil && sb.State == api.StatePaused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the TTL did not pause the sandbox to disk: %+v", sb)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, _ := exec.Command("pgrep", "-f", "runsc.*"+id).Output(); len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("runsc processes run while paused to disk: %s", out)
	}
	// auto_resume: the exec restores it, the sleeper is still there.
	if out := mustSh(t, id, "ps -o args | grep -c '^sleep 600'"); out != "1" {
		t.Errorf("after the auto-resume: %q sleepers, want 1", out)
	}
}

// postureOf fails t with the failing checks when the daemon's posture
// check (`agentbox inspect --security`) does not pass on sandbox id.
func postureOf(t *testing.T, id, when string) {
	t.Helper()
	rep, err := env.client.SandboxSecurity(context.Background(), id)
	if err != nil {
		t.Fatalf("posture check %s: %v", when, err)
	}
	if rep.Pass {
		return
	}
	for _, p := range rep.Processes {
		for _, c := range p.Checks {
			if !c.Pass {
				t.Errorf("posture %s: pid %d (%s) %s: got %s, want %s", when, p.Pid, p.Comm, c.Name, c.Got, c.Want)
			}
		}
	}
}

// forkedApart checks the children of a fork with memory of parent (whose
// memory server, askMem, held v0): each is of the tier, answers v0, then
// takes a value and a file of its own that no sibling sees. It returns
// the children's hostnames.
func forkedApart(t *testing.T, parent, tier, v0 string, kids []api.Sandbox) map[string]bool {
	t.Helper()
	hosts := map[string]bool{}
	for i, k := range kids {
		if k.Parent != parent || k.Isolation != tier {
			t.Errorf("child %s: parent %q isolation %q", k.ID, k.Parent, k.Isolation)
		}
		if v, _ := askMem(t, k.ID, "get"); v != v0 {
			t.Errorf("child %s answers %q, the parent's value is %q", k.ID, v, v0)
		}
		if v, _ := askMem(t, k.ID, fmt.Sprintf("set child-%d", i)); v != fmt.Sprintf("child-%d", i) {
			t.Errorf("child %s: set answered %q", k.ID, v)
		}
		mustSh(t, k.ID, fmt.Sprintf("echo child-%d > /root/who", i))
		hosts[mustSh(t, k.ID, "hostname")] = true
	}
	for i, k := range kids {
		want := fmt.Sprintf("child-%d", i)
		if v, _ := askMem(t, k.ID, "get"); v != want {
			t.Errorf("child %s answers %q, want its own %q", k.ID, v, want)
		}
		if out := mustSh(t, k.ID, "cat /root/who"); out != want {
			t.Errorf("child %s's file: %q", k.ID, out)
		}
	}
	return hosts
}

// memTotalIsLimit checks that gVisor's MemTotal in gvisor sandbox id is
// its memory cgroup's limit read on the host (a restored Sentry takes
// it from its own boot, not from the checkpoint: docs/sandbox-view.md).
func memTotalIsLimit(t *testing.T, id, when string) {
	t.Helper()
	limit := readHostInt(t, cgroupPath("memory", id)+"/memory.limit_in_bytes")
	kb, err := strconv.ParseInt(mustSh(t, id, `awk '/^MemTotal:/{print $2}' /proc/meminfo`), 10, 64)
	if err != nil || kb<<10 != limit {
		t.Errorf("%s: gVisor's MemTotal %d kB (%v), want the memory cgroup's limit %d", when, kb, err, limit)
	}
}
