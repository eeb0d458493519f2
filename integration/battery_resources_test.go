package integration

// Battery items 1-8: resource exhaustion, judged by host counters.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
)

// sampler polls f every period until stopped and keeps the maximum.
type sampler struct {
	stop chan struct{}
	done chan struct{}
	max  int64
}

func sample(period time.Duration, f func() int64) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{}), max: -1 << 62}
	go func() {
		defer close(s.done)
		for {
			s.max = max(s.max, f())
			select {
			case <-s.stop:
				return
			case <-time.After(period):
			}
		}
	}()
	return s
}

func (s *sampler) Stop() int64 {
	close(s.stop)
	<-s.done
	return s.max
}

func itemForkBomb(t *testing.T, b *battery) {
	const limit = 64
	id := b.hostileSandbox(t, api.CreateSandboxRequest{Pids: limit})
	pid := sandboxPid(t, id)
	if got := readHostInt(t, filepath.Join(cgroupPath("pids", id), "pids.max")); got != limit {
		t.Errorf("pids.max = %d, want %d", got, limit)
	}
	before := nsTasks(pid)
	hostBefore := hostTasks()
	peak := sample(50*time.Millisecond, func() int64 { return int64(nsTasks(pid)) })
	hostPeak := sample(50*time.Millisecond, func() int64 { return int64(hostTasks()) })
	res := b.hostile(t, id, api.ExecRequest{Shell: "bomb() { bomb | bomb & }; bomb; sleep 10", TimeoutMs: 3000})
	thr := b.hostile(t, id, api.ExecRequest{Cmd: []string{"/tmp/probe", "threads", "1000"}, TimeoutMs: 3000})
	maxTasks, maxHost := peak.Stop(), hostPeak.Stop()
	events := keyedValue(t, filepath.Join(cgroupPath("pids", id), "pids.events"), "max")
	evidence(t, "sandbox tasks before %d, peak %d (limit %d); host tasks %d -> peak %d (whole host, noisy); pids.events max=%d; fork bomb timed_out=%v; thread bomb exit %d %s",
		before, maxTasks, limit, hostBefore, maxHost, events, res.TimedOut, thr.ExitCode, lastLine(thr.Stderr))
	if maxTasks > limit {
		t.Errorf("the host saw %d tasks in the sandbox's pid namespace; the limit is %d", maxTasks, limit)
	}
	if events == 0 {
		t.Errorf("pids.events shows the limit was never hit: the bomb did not run")
	}
	if thr.ExitCode == 0 {
		t.Errorf("the thread bomb finished 1000 threads under a pids limit of %d: %s", limit, thr.Stdout)
	}
	if err := alive(id); err != nil {
		t.Errorf("sandbox does not answer after the bomb: %v", err)
		if err := env.client.DestroySandbox(context.Background(), id); err != nil {
			t.Errorf("and cannot be destroyed: %v", err)
		}
	}
}

// hostTasks counts every task on the host (the 4th field of loadavg).
func hostTasks() int {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return -1
	}
	_, total, _ := strings.Cut(f[3], "/")
	n, _ := strconv.Atoi(total)
	return n
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 120 {
		s = s[:120]
	}
	return fmt.Sprintf("%q", s)
}

func itemMemoryBomb(t *testing.T, b *battery) {
	const limitMB = 64
	id := b.hostileSandbox(t, api.CreateSandboxRequest{MemoryMB: limitMB})
	pid := sandboxPid(t, id)
	mem := cgroupPath("memory", id)
	if got := readHostInt(t, filepath.Join(mem, "memory.limit_in_bytes")); got != limitMB<<20 {
		t.Errorf("memory.limit_in_bytes = %d, want %d", got, limitMB<<20)
	}
	oomBefore := keyedValue(t, filepath.Join(mem, "memory.oom_control"), "oom_kill")
	hostOOMBefore := keyedValue(t, "/proc/vmstat", "oom_kill")
	shm := b.hostile(t, id, api.ExecRequest{Shell: "dd if=/dev/zero of=/dev/shm/fill bs=1M count=512 2>&1 | tail -n1; echo rc=$?", TimeoutMs: 20000})
	heap := b.hostile(t, id, api.ExecRequest{Cmd: []string{"/tmp/probe", "alloc", "1024"}, TimeoutMs: 20000})
	oomAfter := keyedValue(t, filepath.Join(mem, "memory.oom_control"), "oom_kill")
	hostOOMAfter := keyedValue(t, "/proc/vmstat", "oom_kill")
	peak := readHostInt(t, filepath.Join(mem, "memory.max_usage_in_bytes"))
	evidence(t, "shm: %s; heap: signal %q last %s; cgroup oom_kill %d -> %d; host oom_kill %d -> %d; max_usage %d MiB (limit %d)",
		strings.TrimSpace(shm.Stdout), heap.Signal, lastLine(heap.Stdout), oomBefore, oomAfter, hostOOMBefore, hostOOMAfter, peak>>20, limitMB)
	if oomAfter <= oomBefore {
		t.Errorf("no OOM kill was counted in the sandbox's memory cgroup")
	}
	if strings.Contains(heap.Stdout, "alloc_done") {
		t.Errorf("the heap bomb allocated 1 GiB under a %d MiB limit", limitMB)
	}
	if peak > limitMB<<20 {
		t.Errorf("memory.max_usage_in_bytes %d is above the limit", peak)
	}
	if _, err := env.client.Health(context.Background()); err != nil {
		t.Errorf("daemon unhealthy after the memory bomb: %v", err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		t.Errorf("the sandbox's init (host pid %d) died in the OOM: %v", pid, err)
	}
	if err := alive(id); err != nil {
		t.Errorf("sandbox does not answer after its OOM: %v", err)
	}
}

func statfsFree(t testing.TB, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatalf("statfs %s: %v", path, err)
	}
	return int64(st.Bavail) * st.Bsize
}

func itemDiskFill(t *testing.T, b *battery) {
	const limitMB = 64
	id := b.hostileSandbox(t, api.CreateSandboxRequest{DiskMB: limitMB})
	pool := filepath.Join(env.cfg.DataDir, "storage")
	syscall.Sync()
	poolBefore, hostBefore := statfsFree(t, pool), statfsFree(t, "/var/tmp")
	fill := b.hostile(t, id, api.ExecRequest{Shell: "dd if=/dev/zero of=/root/fill bs=1M count=512 2>&1 | head -n1; sync; ls -l /root/fill", TimeoutMs: 30000})
	files, _ := b.probe(t, id, "", "files", "/root/many", "8")
	inodes := b.hostile(t, id, api.ExecRequest{Shell: "rm -f /root/fill; sync", TimeoutMs: 30000})
	files2, _ := b.probe(t, id, "", "files", "/root/many2", "8")
	syscall.Sync()
	poolAfter, hostAfter := statfsFree(t, pool), statfsFree(t, "/var/tmp")
	fillErr := strings.TrimSpace(fill.Stdout)
	evidence(t, "dd: %q; files when full: %s; files after rm: %s (%v); pool free -%d MiB, host /var/tmp free -%d MiB (limit %d MiB)",
		fillErr, files["create_files"], files2["create_files"], inodes.ExitCode, (poolBefore-poolAfter)>>20, (hostBefore-hostAfter)>>20, limitMB)
	if !strings.Contains(fillErr, "quota exceeded") && !strings.Contains(fillErr, "No space left") {
		t.Errorf("writing 512 MiB under a %d MiB disk limit did not end in EDQUOT/ENOSPC: %q", limitMB, fill.Stdout)
	}
	if v := files["create_files"]; v != "EDQUOT" && v != "ENOSPC" {
		t.Errorf("creating files on a full disk: got %s, want EDQUOT or ENOSPC", v)
	}
	if poolBefore-poolAfter > (limitMB+32)<<20 {
		t.Errorf("the storage pool lost %d MiB for a sandbox limited to %d MiB", (poolBefore-poolAfter)>>20, limitMB)
	}
	if err := alive(id); err != nil {
		t.Errorf("sandbox does not answer with a full disk: %v", err)
	}
}

func itemFDs(t *testing.T, b *battery) {
	id := b.hostileSandbox(t, api.CreateSandboxRequest{})
	pid := sandboxPid(t, id)
	got, res := b.probe(t, id, "user", "fds")
	limits, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	var hard int64
	for _, line := range strings.Split(string(limits), "\n") {
		if strings.HasPrefix(line, "Max open files") {
			f := strings.Fields(line)
			hard, _ = strconv.ParseInt(f[4], 10, 64)
		}
	}
	var n int64
	for _, line := range strings.Split(res.Stdout, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "open_until_error" {
			n, _ = strconv.ParseInt(f[2], 10, 64)
		}
	}
	evidence(t, "opened %d fds then %s; raise beyond hard limit: %s; hard limit read on the host: %d",
		n, got["open_until_error"], got["setrlimit_beyond_hard"], hard)
	expectErrno(t, got, []string{"open_until_error"}, "EMFILE")
	expectErrno(t, got, []string{"setrlimit_beyond_hard"}, "EPERM")
	if hard <= 0 || n+3 > hard {
		t.Errorf("opened %d fds; the host says the hard limit is %d", n, hard)
	}
}

func itemCPUSpin(t *testing.T, b *battery) {
	const cpu = 0.5
	id := b.sandbox(t, api.CreateSandboxRequest{CPU: cpu})
	acct := filepath.Join(cgroupPath("cpuacct", id), "cpuacct.usage")
	stat := filepath.Join(cgroupPath("cpu", id), "cpu.stat")
	throttledBefore := keyedValue(t, stat, "nr_throttled")
	spin := goExec(id, api.ExecRequest{Shell: "for i in 1 2 3 4 5 6 7 8; do (while :; do :; done) & done; wait", TimeoutMs: 4000})
	time.Sleep(700 * time.Millisecond)
	u0, t0 := readHostInt(t, acct), time.Now()
	var lat []time.Duration
	for time.Since(t0) < 2*time.Second {
		s := time.Now()
		if _, err := env.client.Health(context.Background()); err != nil {
			t.Errorf("health during the spin: %v", err)
		}
		lat = append(lat, time.Since(s))
		time.Sleep(40 * time.Millisecond)
	}
	s := time.Now()
	sibErr := alive(b.sib)
	sibLat := time.Since(s)
	u1, t1 := readHostInt(t, acct), time.Now()
	out := <-spin
	throttled := keyedValue(t, stat, "nr_throttled") - throttledBefore
	cores := float64(u1-u0) / float64(t1.Sub(t0).Nanoseconds())
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	evidence(t, "used %.2f cores over %.1fs (limit %.1f); throttled %d periods; /v1/health p50 %v p99 %v (n=%d); sibling exec %v",
		cores, t1.Sub(t0).Seconds(), cpu, throttled, p50.Round(time.Microsecond), p99.Round(time.Microsecond), len(lat), sibLat.Round(time.Millisecond))
	if out.err != nil || !out.res.TimedOut {
		t.Errorf("the spin did not end at its timeout: %+v %v", out.res, out.err)
	}
	if cores > cpu*1.2 {
		t.Errorf("the sandbox used %.2f cores; its limit is %.1f", cores, cpu)
	}
	if cores < cpu*0.5 {
		t.Errorf("the sandbox used only %.2f cores: the spin did not run", cores)
	}
	if throttled == 0 {
		t.Errorf("cpu.stat shows no throttling")
	}
	if p50 > 100*time.Millisecond {
		t.Errorf("API latency p50 %v during the spin; budget 100 ms", p50)
	}
	if sibErr != nil || sibLat > 2*time.Second {
		t.Errorf("sibling sandbox during the spin: %v after %v", sibErr, sibLat)
	}
}

// vmRSS reads this process's resident set (the daemon runs in it).
func vmRSS() int64 {
	st, err := procStatus(os.Getpid())
	if err != nil {
		return -1
	}
	f := strings.Fields(st["VmRSS"])
	if len(f) == 0 {
		return -1
	}
	kb, _ := strconv.ParseInt(f[0], 10, 64)
	return kb << 10
}

func itemOutputFlood(t *testing.T, b *battery) {
	const total = 2 << 30
	const capBytes = 16 << 20 // the default buffered cap
	id := b.hostileSandbox(t, api.CreateSandboxRequest{})
	before := vmRSS()
	peak := sample(20*time.Millisecond, vmRSS)
	start := time.Now()
	res := b.hostile(t, id, api.ExecRequest{Cmd: []string{"/tmp/probe", "flood", strconv.Itoa(total)}, TimeoutMs: 60000})
	took := time.Since(start)
	top := peak.Stop()
	evidence(t, "%d GiB without a newline in %.1fs: exit %d, stdout %d bytes, truncated=%v; test process (daemon inside) RSS %d MiB -> peak %d MiB",
		total>>30, took.Seconds(), res.ExitCode, len(res.Stdout), res.Truncated, before>>20, top>>20)
	if !res.Truncated {
		t.Errorf("output of %d bytes was not flagged truncated", total)
	}
	if len(res.Stdout) > capBytes {
		t.Errorf("stdout holds %d bytes; the cap is %d", len(res.Stdout), capBytes)
	}
	if res.ExitCode != 0 {
		t.Errorf("the writer did not finish (exit %d, %q): output past the cap must be drained", res.ExitCode, res.Stderr)
	}
	if top-before > 200<<20 {
		t.Errorf("daemon memory grew by %d MiB for one flooding exec", (top-before)>>20)
	}
}

func itemTimeoutEscape(t *testing.T, b *battery) {
	id := b.sandbox(t, api.CreateSandboxRequest{})
	pid := sandboxPid(t, id)
	script := `trap '' TERM HUP
( trap '' TERM; setsid sh -c 'trap "" TERM HUP; sleep 1001' & )
( ( trap '' TERM; exec sleep 1002 ) & )
( setsid sh -c '( trap "" TERM; sleep 1003 & ) ; sleep 1004' & )
sleep 1005`
	ch := goExec(id, api.ExecRequest{Shell: script, TimeoutMs: 1500})
	time.Sleep(800 * time.Millisecond)
	during := sandboxPids(id)
	out := <-ch
	if out.err != nil {
		t.Fatalf("exec: %v", out.err)
	}
	var left []int
	deadline := time.Now().Add(2 * time.Second)
	for {
		left = sandboxPids(id)
		if (len(left) == 1 && left[0] == pid) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var survivors []int
	for _, p := range during {
		if p != pid && pidAlive(p) {
			survivors = append(survivors, p)
		}
	}
	evidence(t, "processes during %v; timed_out=%v after %.0f ms; left in the cgroup after: %v (init %d); survivors among the first: %v",
		during, out.res.TimedOut, out.res.DurationMs, left, pid, survivors)
	if len(during) < 5 {
		t.Errorf("only %d processes ran: the script did not start its sleepers", len(during))
	}
	if !out.res.TimedOut {
		t.Errorf("exec was not flagged timed out")
	}
	if out.res.DurationMs > 3500 {
		t.Errorf("exec with a 1.5 s timeout took %.0f ms", out.res.DurationMs)
	}
	if len(left) != 1 || left[0] != pid {
		t.Errorf("after the timeout the sandbox's cgroup still holds %v (only init %d may remain)", left, pid)
	}
	if len(survivors) > 0 {
		t.Errorf("processes %v outlived the timeout", survivors)
	}
	// Destroy and look for leftovers.
	if err := env.client.DestroySandbox(context.Background(), id); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	var remains []string
	for _, ctrl := range []string{"cpu", "cpuacct", "memory", "pids", "freezer"} {
		if _, err := os.Stat(cgroupPath(ctrl, id)); err == nil {
			remains = append(remains, cgroupPath(ctrl, id))
		}
	}
	if pidAlive(pid) {
		remains = append(remains, fmt.Sprintf("init pid %d", pid))
	}
	evidence(t, "after destroy: %v", remains)
	if len(remains) > 0 {
		t.Errorf("destroy left %v", remains)
	}
}

// pidAlive says whether a host pid runs (zombies count as gone).
func pidAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || len(b) < i+3 || b[i+2] != 'Z'
}

func itemKillAll(t *testing.T, b *battery) {
	id := b.sandbox(t, api.CreateSandboxRequest{Pids: 256})
	pid := sandboxPid(t, id)
	// Host sleepers: one as root, one with the very host uid of the
	// sandbox's root, one with the host uid of its user 1000.
	var sleepers []*exec.Cmd
	var wg sync.WaitGroup
	for _, uid := range []int{-1, env.cfg.UIDBase, env.cfg.UIDBase + 1000} {
		c := exec.Command("sleep", "120")
		if uid >= 0 {
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		}
		if err := c.Start(); err != nil {
			t.Fatalf("host sleeper: %v", err)
		}
		sleepers = append(sleepers, c)
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Wait() }()
	}
	defer func() {
		for _, c := range sleepers {
			_ = c.Process.Kill()
		}
		wg.Wait()
	}()
	storm := goExec(id, api.ExecRequest{Shell: `for i in $(seq 60); do sh -c 'sleep 0 & sleep 0 & exec sleep 2' & done; sleep 2.5`, TimeoutMs: 10000})
	time.Sleep(1200 * time.Millisecond)
	zombies := 0
	for _, p := range sandboxPids(id) {
		if !pidAlive(p) {
			zombies++
		}
	}
	<-storm
	kill := b.hostile(t, id, api.ExecRequest{Shell: "sleep 30 & sleep 30 & kill -9 -1; echo rc=$?", TimeoutMs: 10000})
	var dead []int
	for _, c := range sleepers {
		if !pidAlive(c.Process.Pid) {
			dead = append(dead, c.Process.Pid)
		}
	}
	time.Sleep(500 * time.Millisecond)
	zombiesAfter := 0
	for _, p := range sandboxPids(id) {
		if !pidAlive(p) {
			zombiesAfter++
		}
	}
	evidence(t, "zombies seen by the host during the storm: %d, after: %d; kill -9 -1: %q; host sleepers killed: %v", zombies, zombiesAfter, strings.TrimSpace(kill.Stdout), dead)
	if zombies == 0 {
		t.Errorf("the zombie storm made no zombies; the test did not run")
	}
	if len(dead) > 0 {
		t.Errorf("kill -9 -1 inside a sandbox killed host processes %v", dead)
	}
	if !pidAlive(pid) {
		t.Errorf("the sandbox's init died")
	}
	if err := alive(id); err != nil {
		t.Errorf("sandbox does not answer after kill -9 -1: %v", err)
	}
	if err := alive(b.sib); err != nil {
		t.Errorf("sibling sandbox does not answer: %v", err)
	}
	if zombiesAfter > 0 {
		t.Errorf("%d zombies remain in the sandbox 0.5 s later", zombiesAfter)
	}
}

var _ = errors.Is
