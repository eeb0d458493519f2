package integration

// Battery verdicts for the gvisor tier where the container tier's read
// host state that gVisor does not have: its sandbox's processes are tasks
// of gVisor's kernel, not host processes, and its pids limit lives in
// gVisor's own cgroupfs, where the agent puts every exec.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// itemForkBombGvisor: the same fork and thread bombs; the limit is judged
// inside (gVisor's workload pids.max and pids.current, read through the
// agent) and on the host (the host threads of gVisor itself stay within
// the sandbox cgroup's pids.max).
func itemForkBombGvisor(t *testing.T, b *battery) {
	const limit = 64
	id := b.hostileSandbox(t, api.CreateSandboxRequest{Pids: limit})
	const pidsDir = "/.agentbox/cgroup/pids/workload"
	if got := mustSh(t, id, "cat "+pidsDir+"/pids.max"); got != strconv.Itoa(limit) {
		t.Errorf("gVisor workload pids.max = %q, want %d", got, limit)
	}
	hostMax := readHostInt(t, filepath.Join(cgroupPath("pids", id), "pids.max"))
	hostPeak := sample(50*time.Millisecond, func() int64 { return int64(len(sandboxPids(id))) })
	res := b.hostile(t, id, api.ExecRequest{Shell: `for i in $(seq 300); do sleep 30 & done 2>/dev/null
bomb() { bomb | bomb & }; bomb 2>/dev/null; sleep 30`, TimeoutMs: 3000})
	answers := alive(id)
	id2 := b.hostileSandbox(t, api.CreateSandboxRequest{Pids: limit})
	thr := b.hostile(t, id2, api.ExecRequest{Cmd: []string{"/tmp/probe", "threads", "1000"}, TimeoutMs: 3000})
	maxHost := hostPeak.Stop()
	after := "?"
	if r, err := execOnce(id, "cat "+pidsDir+"/pids.current"); err == nil {
		after = strings.TrimSpace(r)
	}
	evidence(t, "fork bomb under gVisor pids.max %d and RLIMIT_NPROC limit+64: timed_out=%v, next exec: %v, workload pids.current after %s; thread bomb: exit %d %s, last output %s; host processes in the sandbox's cgroup peak %d (host pids.max %d: gVisor's own threads)",
		limit, res.TimedOut, errClass(answers), after, thr.ExitCode, lastLine(thr.Stderr), lastLine(thr.Stdout), maxHost, hostMax)
	if thr.ExitCode == 0 {
		t.Errorf("the thread bomb finished 1000 threads under a pids limit of %d: %s", limit, thr.Stdout)
	}
	// The bound that holds is RLIMIT_NPROC = limit + the agent's reserve
	// of 64 per uid (gVisor's pids cgroup charges arbitrarily; see
	// docs/gvisor.md), so that is what is judged.
	if n, err := strconv.Atoi(after); err == nil && n > limit+64 {
		t.Errorf("gVisor's workload holds %d tasks; the bound is %d + 64", n, limit)
	}
	if maxHost > hostMax {
		t.Errorf("the host saw %d processes in the sandbox's cgroup; its pids.max is %d", maxHost, hostMax)
	}
	if err := alive(id2); err != nil {
		t.Errorf("sandbox does not answer after the thread bomb: %v", err)
	}
	if answers != nil && !errors.Is(answers, errdefs.ErrResourceExhausted) {
		t.Errorf("sandbox does not answer after the fork bomb: %v", answers)
	}
	if err := env.client.DestroySandbox(t.Context(), id); err != nil {
		t.Fatalf("destroying the bombed sandbox: %v", err)
	}
	if _, err := os.Stat(cgroupPath("pids", id)); err == nil {
		t.Errorf("destroy left the cgroup %s", cgroupPath("pids", id))
	}
}

// execOnce runs a shell command with a short timeout and returns stdout.
func execOnce(id, script string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := env.client.Exec(ctx, id, api.ExecRequest{Shell: script})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return res.Stdout, fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
	}
	return res.Stdout, nil
}

// What gVisor's kernel says about a sandbox's tasks, asked from the host:
// `runsc trace procfs` reads the Sentry's process table over runsc's
// control socket (the host side of the boundary), not through the guest
// agent or anything a sandbox process could answer for.

// sentryProc is one process of a gvisor sandbox as gVisor's kernel
// reports it.
type sentryProc struct {
	Exe  string   `json:"exe"`
	Args []string `json:"args"`
	CWD  string   `json:"cwd"`
	FDs  []struct {
		Number int32  `json:"number"`
		Path   string `json:"path"`
	} `json:"fdlist"`
	Status struct {
		Comm string `json:"comm"`
		PID  int32  `json:"pid"`
		PPID int32  `json:"ppid"`
		UID  struct {
			Real      uint32 `json:"real"`
			Effective uint32 `json:"effective"`
			Saved     uint32 `json:"saved"`
		} `json:"uid"`
	} `json:"status"`
}

func (p sentryProc) cmd() string { return strings.Join(p.Args, " ") }

// runscBin is the runsc the daemon uses.
func runscBin() string {
	if p := os.Getenv("AGENTBOX_RUNSC"); p != "" {
		return p
	}
	return "/usr/local/lib/agentbox/runsc"
}

// sentryProcs lists gvisor sandbox id's processes from gVisor's kernel.
// runsc's procfs dump fails as a whole while any task in the sandbox has
// no memory manager, which is every task between its exit and its reaping
// ("no MM found for PID n"): a storm's kill -9 -1 makes dozens of those
// at once. So a dump that runsc failed is read again until one succeeds
// or a minute passes; a process left a zombie for good still fails the
// test, with runsc's own words. Output that does not parse fails at once.
func sentryProcs(t testing.TB, id string) []sentryProc {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		procs, err := sentryDump(id)
		if err == nil {
			return procs
		}
		var exit *exec.ExitError
		if !errors.As(err, &exit) || time.Now().After(deadline) {
			t.Fatalf("gVisor's process table for sandbox %s: %v", id, err)
		}
		// A Sentry that died is not waited for: the daemon's account of
		// its end (driver.ExitReporter) is the verdict's evidence.
		if sb, gerr := env.client.GetSandbox(context.Background(), id); gerr == nil && sb.State != api.StateRunning {
			t.Fatalf("gVisor's process table for sandbox %s: %v; the sandbox is %s: %s", id, err, sb.State, sb.Error)
		}
		t.Logf("reading again: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
}

// sentryDump reads gvisor sandbox id's process table once.
func sentryDump(id string) ([]sentryProc, error) {
	root := filepath.Join(env.cfg.RunDir, "sandboxes", id, "runsc")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, runscBin(), "--root", root, "--ignore-cgroups", "trace", "procfs", id)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("runsc trace procfs: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	var procs []sentryProc
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var p sentryProc
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			return nil, fmt.Errorf("runsc trace procfs: %v: %.200s", err, line)
		}
		procs = append(procs, p)
	}
	if len(procs) == 0 {
		return nil, fmt.Errorf("gVisor's kernel lists no process: %.300s", out)
	}
	return procs, nil
}

// sentryCmds lists the command lines of gVisor's processes, the agent
// (pid 1) left out.
func sentryCmds(procs []sentryProc) []string {
	var out []string
	for _, p := range procs {
		if p.Status.PID != 1 {
			out = append(out, p.cmd())
		}
	}
	return out
}

// findSentryProc waits up to 30 s for a process of gvisor sandbox id with
// command line cmd in gVisor's kernel.
func findSentryProc(t testing.TB, id, cmd string) sentryProc {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, p := range sentryProcs(t, id) {
			if p.cmd() == cmd {
				return p
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("gVisor's kernel shows no process %q in sandbox %s: %q", cmd, id, sentryCmds(sentryProcs(t, id)))
	return sentryProc{}
}

// hostConfined checks, for every host process of gvisor sandbox id (the
// Sentry, the gofer, their stubs), that it runs as a host uid of the
// sandbox's range with NoNewPrivs 1 and seccomp filter mode: whatever a
// sandbox process did, the host's view of the sandbox is still gVisor,
// confined. It returns how many it checked.
func hostConfined(t testing.TB, id string) int {
	t.Helper()
	n := 0
	base := sandboxUIDBase(t, id)
	for _, pid := range sandboxPids(id) {
		st, err := procStatus(pid)
		if err != nil {
			continue
		}
		n++
		for _, u := range append(strings.Fields(st["Uid"]), strings.Fields(st["Gid"])...) {
			if v, _ := strconv.Atoi(u); v < base || v >= base+env.cfg.UIDCount {
				t.Errorf("host process %d of the sandbox runs as host uid/gid %s", pid, u)
				break
			}
		}
		if st["NoNewPrivs"] != "1" || st["Seccomp"] != "2" {
			t.Errorf("host process %d of the sandbox: NoNewPrivs %s Seccomp %s", pid, st["NoNewPrivs"], st["Seccomp"])
		}
	}
	if n == 0 {
		t.Errorf("no host process in the sandbox's cgroups")
	}
	return n
}

// itemMemoryBombGvisor: the application's memory is the Sentry's, so the
// limit is the sandbox's host memory cgroup (memory + gVisor's reserve).
// gVisor has no OOM killer of its own: when the bomb reaches the cap, the
// host's OOM killer kills inside that cgroup, which takes the whole
// sandbox down (denial of service against itself, out of scope). The
// verdict: the host cgroup's peak stays within the cap, the bomb never
// gets its 1 GiB, every OOM kill the host counts during the bomb is in
// the sandbox's cgroup, the daemon sees the sandbox fail and removes it
// without a trace, and the daemon and the sibling carry on.
func itemMemoryBombGvisor(t *testing.T, b *battery) {
	const limitMB = 64
	id := b.hostileSandbox(t, api.CreateSandboxRequest{MemoryMB: limitMB})
	pid := sandboxPid(t, id)
	mem := cgroupPath("memory", id)
	whole := readHostInt(t, filepath.Join(mem, "memory.limit_in_bytes"))
	if whole != (limitMB+96)<<20 {
		t.Errorf("sandbox memory.limit_in_bytes = %d, want %d MiB + gVisor's 96 MiB", whole, limitMB)
	}
	oomBefore := keyedValue(t, filepath.Join(mem, "memory.oom_control"), "oom_kill")
	hostOOMBefore := keyedValue(t, "/proc/vmstat", "oom_kill")
	shm := b.hostile(t, id, api.ExecRequest{Shell: "dd if=/dev/zero of=/dev/shm/fill bs=1M count=512 2>&1 | tail -n1; echo rc=$?", TimeoutMs: 20000})
	// Read the cgroup while it exists: the OOM may end the sandbox.
	peak := sample(20*time.Millisecond, func() int64 {
		b, err := os.ReadFile(filepath.Join(mem, "memory.max_usage_in_bytes"))
		if err != nil {
			return -1
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n
	})
	oomKills := sample(20*time.Millisecond, func() int64 {
		b, err := os.ReadFile(filepath.Join(mem, "memory.oom_control"))
		if err != nil {
			return -1
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return -1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	heap, heapErr := env.client.Exec(ctx, id, api.ExecRequest{Cmd: []string{"/tmp/probe", "alloc", "1024"}, TimeoutMs: 20000})
	cancel()
	time.Sleep(200 * time.Millisecond)
	peakAll, oomAfter := peak.Stop(), oomKills.Stop()
	hostOOMAfter := keyedValue(t, "/proc/vmstat", "oom_kill")
	heapOut := "no result"
	if heapErr != nil {
		heapOut = "exec error: " + errClass(heapErr)
	} else {
		b.noSecrets(t, heap.Stdout, heap.Stderr)
		heapOut = fmt.Sprintf("exit %d signal %q last %s", heap.ExitCode, heap.Signal, lastLine(heap.Stdout))
	}
	// The daemon notices (the Sentry's exit) and tears the sandbox down.
	state, why := "", ""
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		sb, err := env.client.GetSandbox(context.Background(), id)
		if err != nil {
			state = errClass(err)
			break
		}
		state, why = sb.State, sb.Error
		if state == api.StateFailed || state == api.StateRunning && pidAlive(pid) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var remains []string
	if state != api.StateRunning {
		deadline = time.Now().Add(30 * time.Second)
		for {
			remains = remains[:0]
			for _, ctrl := range []string{"cpu", "memory", "pids"} {
				if _, err := os.Stat(cgroupPath(ctrl, id)); err == nil {
					remains = append(remains, cgroupPath(ctrl, id))
				}
			}
			if pidAlive(pid) && strings.Contains(cmdline(pid), "/sandboxes/"+id+"/") {
				remains = append(remains, fmt.Sprintf("Sentry %d", pid))
			}
			remains = append(remains, mountsUnder(filepath.Join(env.cfg.RunDir, "sandboxes", id))...)
			if len(remains) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	evidence(t, "shm: %s; heap: %s; sandbox cgroup oom_kill %d -> %d; host oom_kill %d -> %d; sandbox max_usage %d MiB (cap %d MiB = %d + gVisor's 96); then the sandbox is %q (%q); left on the host: %v",
		strings.ReplaceAll(strings.TrimSpace(shm.Stdout), "\n", " "), heapOut, oomBefore, oomAfter, hostOOMBefore, hostOOMAfter, peakAll>>20, whole>>20, limitMB, state, why, remains)
	if heapErr == nil && strings.Contains(heap.Stdout, "alloc_done") {
		t.Errorf("the heap bomb allocated 1 GiB under a %d MiB limit", limitMB)
	}
	const slack = 2 << 20
	if peakAll > whole+slack {
		t.Errorf("sandbox memory.max_usage_in_bytes %d is above its cap %d", peakAll, whole)
	}
	// OOM kills elsewhere on the host during the bomb would be its doing
	// (noisy only if something else on the machine runs out of memory).
	if d := (hostOOMAfter - hostOOMBefore) - max(oomAfter-oomBefore, 0); d > 0 {
		t.Errorf("the host counted %d OOM kills outside the sandbox's cgroup during the bomb", d)
	}
	if _, err := env.client.Health(context.Background()); err != nil {
		t.Errorf("daemon unhealthy after the memory bomb: %v", err)
	}
	switch {
	case state == api.StateRunning:
		// gVisor or the OOM kill stopped the bomb and the sandbox lives on.
		if err := alive(id); err != nil {
			t.Errorf("the sandbox is running but does not answer after its memory bomb: %v", err)
		}
	case state != api.StateFailed:
		t.Errorf("after the Sentry's OOM kill the sandbox is %q, want failed", state)
	case len(remains) > 0:
		t.Errorf("the failed sandbox left %v on the host", remains)
	case !strings.Contains(why, "OOM killer"):
		// The driver reads the cgroup's count before it removes it
		// (driver.ExitReporter): the user learns why, not only that.
		t.Errorf("the failed sandbox's error %q does not say that the OOM killer ended it", why)
	}
}

// itemTimeoutEscapeGvisor: the same escape attempts; the verdict reads
// gVisor's process table from the host during and after the timeout, and
// the host after destroy.
func itemTimeoutEscapeGvisor(t *testing.T, b *battery) {
	id := b.sandbox(t, api.CreateSandboxRequest{})
	sentry := sandboxPid(t, id)
	script := `trap '' TERM HUP
( trap '' TERM; setsid sh -c 'trap "" TERM HUP; sleep 1001' & )
( ( trap '' TERM; exec sleep 1002 ) & )
( setsid sh -c '( trap "" TERM; sleep 1003 & ) ; sleep 1004' & )
sleep 1005`
	ch := goExec(id, api.ExecRequest{Shell: script, TimeoutMs: escapeTimeoutMs})
	var during []string
	countSleepers := func() int {
		during = sentryCmds(sentryProcs(t, id))
		n := 0
		for _, c := range during {
			if strings.HasPrefix(c, "sleep 100") {
				n++
			}
		}
		return n
	}
	waitCount(countSleepers, func(n int) bool { return n >= 5 }, escapeTimeoutMs*time.Millisecond*9/10)
	hostDuring := sandboxPids(id)
	out := <-ch
	if out.err != nil {
		t.Fatalf("exec: %v", out.err)
	}
	var left []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		left = sentryCmds(sentryProcs(t, id))
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	sleepers := 0
	for _, c := range during {
		if strings.HasPrefix(c, "sleep 100") {
			sleepers++
		}
	}
	evidence(t, "gVisor's kernel (runsc trace procfs) during: %d sleepers %q; timed_out=%v after %.0f ms; after: %q; host processes of the sandbox during: %d (gVisor's own)",
		sleepers, during, out.res.TimedOut, out.res.DurationMs, left, len(hostDuring))
	if sleepers < 4 {
		t.Errorf("only %d sleepers ran: the script did not start them", sleepers)
	}
	if !out.res.TimedOut {
		t.Errorf("exec was not flagged timed out")
	}
	if out.res.DurationMs > escapeTimeoutMs+60000 {
		t.Errorf("exec with a %d ms timeout took %.0f ms: its processes held it past the timeout", escapeTimeoutMs, out.res.DurationMs)
	}
	if len(left) > 0 {
		t.Errorf("after the timeout gVisor's kernel still runs %q (only the agent may remain)", left)
	}
	if err := env.client.DestroySandbox(context.Background(), id); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	var remains []string
	for _, ctrl := range []string{"cpu", "cpuacct", "memory", "pids", "freezer"} {
		if _, err := os.Stat(cgroupPath(ctrl, id)); err == nil {
			remains = append(remains, cgroupPath(ctrl, id))
		}
	}
	runDir := filepath.Join(env.cfg.RunDir, "sandboxes", id)
	// By command line, not by the pids seen before: a busy host recycles
	// pids. runsc's processes name the sandbox's run dir in theirs.
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if p, err := strconv.Atoi(e.Name()); err == nil && pidAlive(p) && strings.Contains(cmdline(p), runDir+"/") {
			remains = append(remains, fmt.Sprintf("host pid %d (%.80s)", p, cmdline(p)))
		}
	}
	if pidAlive(sentry) && strings.Contains(cmdline(sentry), runDir+"/") {
		remains = append(remains, fmt.Sprintf("the Sentry %d", sentry))
	}
	remains = append(remains, mountsUnder(runDir)...)
	evidence(t, "after destroy: %v", remains)
	if len(remains) > 0 {
		t.Errorf("destroy left %v", remains)
	}
}

// mountsUnder lists host mount points at or below dir.
func mountsUnder(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

// itemKillAllGvisor: the same storm and kill -9 -1 next to host sleepers
// (as root, as its range's first uid and that +1000, as uid_base);
// gVisor's process table read
// from the host shows the storm and that nothing, zombies included, is
// left after it.
func itemKillAllGvisor(t *testing.T, b *battery) {
	id := b.sandbox(t, api.CreateSandboxRequest{Pids: 256})
	sentry := sandboxPid(t, id)
	sleepers := hostSleepers(t, sandboxUIDBase(t, id))
	// As on the container tier (itemKillAll), the storm lasts until
	// kill -9 -1: gVisor's process table is read once it is all there.
	storm := goExec(id, api.ExecRequest{Shell: stormShell, TimeoutMs: 150000})
	// All 60 `sleep 600` must be there before the kill: a fork still in
	// flight when kill -9 -1 runs can escape it in gVisor (its kill(-1)
	// does not stop a concurrent fork as Linux's does), which is the
	// sandbox's own business, not this item's.
	var during int
	countSleepers := func() int {
		cmds := sentryCmds(sentryProcs(t, id))
		during = len(cmds)
		n := 0
		for _, c := range cmds {
			if c == "sleep 600" {
				n++
			}
		}
		return n
	}
	waitCount(countSleepers, func(n int) bool { return n >= stormSleepers }, time.Minute)
	kill := b.hostile(t, id, api.ExecRequest{Shell: "sleep 30 & sleep 30 & kill -9 -1; echo rc=$?", TimeoutMs: 10000})
	<-storm
	var dead []int
	for _, c := range sleepers {
		if !pidAlive(c.Process.Pid) {
			dead = append(dead, c.Process.Pid)
		}
	}
	var left []string
	waitCount(func() int { left = sentryCmds(sentryProcs(t, id)); return len(left) }, func(n int) bool { return n == 0 }, time.Minute)
	evidence(t, "gVisor's kernel (runsc trace procfs) during the storm: %d processes besides the agent, after it and kill -9 -1: %q; kill -9 -1: %q; host sleepers killed: %v; Sentry alive: %v",
		during, left, strings.TrimSpace(kill.Stdout), dead, pidAlive(sentry))
	if during < stormSleepers {
		t.Errorf("gVisor's kernel saw only %d processes during the storm in a minute, want %d; the test did not run", during, stormSleepers)
	}
	if len(dead) > 0 {
		t.Errorf("kill -9 -1 inside a sandbox killed host processes %v", dead)
	}
	if !pidAlive(sentry) {
		t.Errorf("the sandbox's Sentry died")
	}
	if err := alive(id); err != nil {
		t.Errorf("sandbox does not answer after kill -9 -1: %v", err)
	}
	if err := alive(b.sib); err != nil {
		t.Errorf("sibling sandbox does not answer: %v", err)
	}
	if len(left) > 0 {
		t.Errorf("processes or zombies remain in the sandbox a minute after kill -9 -1: %q", left)
	}
}

// itemSetuidGvisor: a setuid-root copy of the probe run by user 1000; gVisor's
// kernel, asked from the host, shows the process's real, effective and
// saved uids, and every host process of the sandbox is still an
// unprivileged, confined host uid.
func itemSetuidGvisor(t *testing.T, b *battery) {
	id := b.hostileSandbox(t, api.CreateSandboxRequest{})
	mustSh(t, id, "cp /tmp/probe /tmp/suid && chown 0:0 /tmp/suid && chmod 4755 /tmp/suid")
	ch := goExec(id, api.ExecRequest{Cmd: []string{"/tmp/suid", "ids", "3"}, User: "user", TimeoutMs: 10000})
	p := findSentryProc(t, id, "/tmp/suid ids 3")
	n := hostConfined(t, id)
	out := <-ch
	if out.err != nil {
		t.Fatal(out.err)
	}
	u := p.Status.UID
	evidence(t, "inside: %q; gVisor's kernel: uids %d %d %d; %d host processes of the sandbox: host uids of the sandbox's range, NoNewPrivs 1, Seccomp 2",
		strings.TrimSpace(out.res.Stdout), u.Real, u.Effective, u.Saved, n)
	if u.Real != 1000 || u.Effective != 1000 || u.Saved != 1000 {
		t.Errorf("the setuid binary run by user 1000 has uids %d %d %d in gVisor's kernel; want 1000", u.Real, u.Effective, u.Saved)
	}
	if !strings.HasPrefix(out.res.Stdout, "ids 1000 1000 1000 nnp=1") {
		t.Errorf("inside the sandbox the setuid binary reports %q", out.res.Stdout)
	}
}

// itemFDsCwdGvisor: the fds of an exec'd process as gVisor's kernel
// reports them to the host, and the same cwd tricks through the API.
func itemFDsCwdGvisor(t *testing.T, b *battery) {
	id := b.sandbox(t, api.CreateSandboxRequest{})
	ch := goExec(id, api.ExecRequest{Cmd: []string{"sleep", "2"}})
	p := findSentryProc(t, id, "sleep 2")
	var fds []string
	for _, fd := range p.FDs {
		fds = append(fds, fmt.Sprintf("%d=%s", fd.Number, fd.Path))
	}
	<-ch
	evidence(t, "gVisor's kernel: the exec'd process has fds %v, cwd %q", fds, p.CWD)
	if len(p.FDs) != 3 || p.FDs[0].Number != 0 || p.FDs[1].Number != 1 || p.FDs[2].Number != 2 {
		t.Errorf("an exec'd process has fds %v; want only 0 1 2", fds)
	}
	for _, fd := range p.FDs {
		if strings.HasPrefix(fd.Path, "host:") {
			t.Errorf("an exec'd process holds a host file: fd %v", fd)
		}
	}
	checkCwdTricks(t, b, id)
}
