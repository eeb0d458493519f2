package integration

// What a program inside a sandbox sees (docs/sandbox-view.md): the
// built-in templates' environment, on every tier.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/storage"
)

// builtinTemplateEnv is the env scripts/build-template.sh imports the
// built-in templates with (its `ENV=(--env K=V ...)` line), so that the
// test daemon's templates carry what users' do.
func builtinTemplateEnv() map[string]string {
	f, err := os.Open(filepath.Join(env.repo, "scripts/build-template.sh"))
	if err != nil {
		panic(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "ENV=(") {
			continue
		}
		fields := strings.Fields(strings.TrimSuffix(strings.TrimPrefix(line, "ENV=("), ")"))
		for i := 0; i+1 < len(fields); i += 2 {
			if k, v, ok := strings.Cut(fields[i+1], "="); fields[i] == "--env" && ok {
				out[k] = v
			}
		}
	}
	if out["PATH"] == "" {
		panic("scripts/build-template.sh has no ENV=(--env PATH=... ) line")
	}
	return out
}

// TestPythonBytecodeTrap: an agent writes calc.py, imports it, writes a
// fix of the same size within the same second and imports it again. With
// Python's .pyc cache (keyed on mtime in seconds and size) the second run
// would see the old code; the built-in templates set
// PYTHONDONTWRITEBYTECODE=1, and a create's env can set it back.
func TestPythonBytecodeTrap(t *testing.T) {
	needBase(t)
	if got := builtinTemplateEnv()["PYTHONDONTWRITEBYTECODE"]; got != "1" {
		t.Fatalf("scripts/build-template.sh imports the built-in templates with PYTHONDONTWRITEBYTECODE=%q, want 1", got)
	}
	// Both versions get the same mtime (the same second) on purpose: the
	// trap is then certain, not a race.
	const loop = `cd /tmp && rm -rf trap && mkdir trap && cd trap
echo 'def f(): return 1' > calc.py && touch -d @1700000000 calc.py
python3 -c 'import calc; print("first", calc.f())'
echo 'def f(): return 2' > calc.py && touch -d @1700000000 calc.py
python3 -c 'import calc; print("second", calc.f())'
ls -d __pycache__ 2>/dev/null || echo no-cache`
	for _, tier := range batteryTiers(t) {
		t.Run(tier, func(t *testing.T) {
			id := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: tier})
			out := mustSh(t, id, loop)
			if !strings.Contains(out, "first 1") || !strings.Contains(out, "second 2") || !strings.Contains(out, "no-cache") {
				t.Errorf("with the template's env, the fix is not what runs, or a cache was written:\n%s", out)
			}
			if got := mustSh(t, id, `echo "$PYTHONDONTWRITEBYTECODE"`); got != "1" {
				t.Errorf("PYTHONDONTWRITEBYTECODE inside = %q, want 1", got)
			}
			// Overridable: an empty value turns the cache back on (and
			// with it the trap, which shows the cache was written).
			id2 := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: tier, Env: map[string]string{"PYTHONDONTWRITEBYTECODE": ""}})
			out = mustSh(t, id2, loop)
			if !strings.Contains(out, "second 1") || !strings.Contains(out, "__pycache__") {
				t.Errorf("with PYTHONDONTWRITEBYTECODE set empty at create, the cache should be written (and the old code run):\n%s", out)
			}
		})
	}
}

// TestContainerResourceView: on the container tier, /proc/meminfo (what
// procps' free, psutil and libuv read) shows the sandbox's memory cgroup, read live (a resize shows
// at once), and /proc/uptime its own age, through LXCFS
// (docs/sandbox-view.md). The verdict compares with the cgroup limit and
// the init's start time read on the host.
func TestContainerResourceView(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Isolation: "container", MemoryMB: 256})
	limitFile := cgroupPath("memory", id) + "/memory.limit_in_bytes"
	memTotal := func() int64 {
		out := mustSh(t, id, `awk '/^MemTotal:/{print $2}' /proc/meminfo`)
		n, err := strconv.ParseInt(out, 10, 64)
		if err != nil {
			t.Fatalf("MemTotal inside: %q", out)
		}
		return n << 10
	}
	limit := readHostInt(t, limitFile)
	hostMem, _ := os.ReadFile("/proc/meminfo")
	hostKB, _ := strconv.ParseInt(strings.Fields(firstLineWith(string(hostMem), "MemTotal:") + " x 0")[1], 10, 64)
	hostTotal := hostKB << 10
	if got := memTotal(); got != limit || got >= hostTotal {
		t.Errorf("MemTotal inside = %d bytes; want the sandbox's memory cgroup limit %d read on the host (the host has %d)", got, limit, hostTotal)
	}
	if limit < 256<<20 || limit > 256<<20+64<<20 {
		t.Errorf("the sandbox's memory cgroup limit is %d; want 256 MiB plus the agent's reserve", limit)
	}
	// A resize (as a warm pool's claim does it: the cgroup limit changes)
	// shows at the next read.
	raised := limit + 128<<20
	// memory.memsw.limit_in_bytes (memory and swap) may not be below
	// memory.limit_in_bytes: it goes up first, as SetLimits does it.
	for _, f := range []string{cgroupPath("memory", id) + "/memory.memsw.limit_in_bytes", limitFile} {
		if _, err := os.Stat(f); err != nil && f != limitFile {
			continue
		}
		if err := os.WriteFile(f, []byte(strconv.FormatInt(raised, 10)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := memTotal(); got != raised {
		t.Errorf("after the limit was raised to %d on the host, MemTotal inside = %d", raised, got)
	}
	// Uptime: the sandbox's init's age, not the host's.
	out := mustSh(t, id, `cut -d' ' -f1 /proc/uptime`)
	inside, _ := strconv.ParseFloat(out, 64)
	hostUp, _ := os.ReadFile("/proc/uptime")
	host, _ := strconv.ParseFloat(strings.Fields(string(hostUp))[0], 64)
	stat, _ := os.ReadFile("/proc/" + strconv.Itoa(sandboxPid(t, id)) + "/stat")
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	start, _ := strconv.ParseFloat(f[19], 64) // starttime, in clock ticks (100 a second)
	age := host - start/100
	if inside <= 0 || inside > age+5 || inside < age-5 {
		t.Errorf("uptime inside = %.1f s; want its init's age, %.1f s read on the host (the host's is %.1f s)", inside, age, host)
	}
	t.Logf("MemTotal %d (limit %d, then %d; host %d); uptime %.1f s (init's age %.1f s, host's %.1f s)", limit, limit, raised, hostTotal, inside, age, host)
}

// TestContainerCPUView: in a `cpu: 1` sandbox on this host's CPUs, every
// common count says ceil(cpu): nproc (OMP_NUM_THREADS in the exec's env),
// Python's os.cpu_count() (sysconf, /sys/devices/system/cpu/online),
// /proc/cpuinfo and /proc/stat (LXCFS with --enable-cfs at the sandbox's
// cpuset cgroup), the affinity mask (sched_getaffinity, which the agent
// answers: internal/guest/sysview); after a resize (the CFS quota changes on the host, as a
// warm pool's claim does it) the next reads and execs say the new one;
// the exec's own OMP_NUM_THREADS wins.
func TestContainerCPUView(t *testing.T) {
	needBase(t)
	host := runtime.NumCPU()
	if host < 2 {
		t.Fatalf("this host has %d CPU; the test needs 2 or more to tell a sandbox's count from the host's", host)
	}
	id := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: "container", CPU: 1})
	// The affinity mask's count (sched_getaffinity: nproc without
	// OMP_NUM_THREADS, Python's os.sched_getaffinity) is the sysview
	// listener's answer.
	const views = `nproc; python3 -c 'import os; print(os.cpu_count())'; grep -c ^processor /proc/cpuinfo; grep -c '^cpu[0-9]' /proc/stat; cat /sys/devices/system/cpu/online; ` +
		`env -u OMP_NUM_THREADS nproc; python3 -c 'import os; print(len(os.sched_getaffinity(0)), len(os.sched_getaffinity(1)))'`
	check := func(when string, want int) {
		t.Helper()
		online := "0"
		if want > 1 {
			online = fmt.Sprintf("0-%d", want-1)
		}
		wantOut := fmt.Sprintf("%d\n%d\n%d\n%d\n%s\n%d\n%d %d", want, want, want, want, online, want, want, want)
		if got := mustSh(t, id, views); got != wantOut {
			t.Errorf("%s: nproc, os.cpu_count(), cpuinfo's processors, /proc/stat's cpuN lines, cpu/online, nproc without OMP_NUM_THREADS, os.sched_getaffinity of itself and of pid 1 =\n%s\nwant\n%s", when, got, wantOut)
		}
	}
	quota := cgroupPath("cpu", id) + "/cpu.cfs_quota_us"
	if got := readHostInt(t, quota); got != 100000 {
		t.Fatalf("the sandbox's CFS quota is %d, want 100000 (cpu: 1)", got)
	}
	check("cpu: 1", 1)
	if got := mustSh(t, id, `env | grep ^OMP_NUM_THREADS=`); got != "OMP_NUM_THREADS=1" {
		t.Errorf("the exec's env has %q, want OMP_NUM_THREADS=1", got)
	}
	res, err := env.client.Exec(context.Background(), id, api.ExecRequest{Shell: "nproc", Env: map[string]string{"OMP_NUM_THREADS": "3"}})
	if err != nil || strings.TrimSpace(res.Stdout) != "3" {
		t.Errorf("nproc with the exec's own OMP_NUM_THREADS=3: %q, %v", res.Stdout, err)
	}
	// A process that narrows its own mask sees it as the kernel says
	// (here already within the limit).
	if got := mustSh(t, id, `taskset -c 1 python3 -c 'import os; print(sorted(os.sched_getaffinity(0)))'`); got != "[1]" {
		t.Errorf("os.sched_getaffinity under taskset -c 1: %q, want [1]", got)
	}
	for _, c := range []struct {
		quota int64
		want  int
	}{{int64(host) * 100000, host}, {50000, 1}} {
		if err := os.WriteFile(quota, []byte(strconv.FormatInt(c.quota, 10)), 0); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("after the quota was set to %d", c.quota), c.want)
	}
	t.Logf("host CPUs %d; sandbox: %s", host, strings.ReplaceAll(mustSh(t, id, views), "\n", " "))
}

// TestContainerCPUViewAfterClaim: a warm pool's sandbox made with `cpu:
// 2` and claimed by a create with `cpu: 1` is resized (the driver's
// SetLimits), and its views say 1 from the claim on: nproc at the next
// exec, /proc/cpuinfo and cpu/online at the next read.
func TestContainerCPUViewAfterClaim(t *testing.T) {
	needBase(t)
	host := runtime.NumCPU()
	if host < 2 {
		t.Fatalf("this host has %d CPU; the test needs 2 or more", host)
	}
	restartDaemon(t, func() {
		env.cfg.Pools = []config.WarmPool{{Template: "base", Isolation: "container", Size: 1, CPU: float64(host)}}
	})
	t.Cleanup(func() { restartDaemon(t, func() { env.cfg.Pools = nil }) })
	waitPoolsFull(t)
	id := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: "container", CPU: 1})
	if got := pools(t)[0].Served; got != 1 {
		t.Fatalf("the create was not served from the pool (served %d): this test needs a claim", got)
	}
	if got := readHostInt(t, cgroupPath("cpu", id)+"/cpu.cfs_quota_us"); got != 100000 {
		t.Fatalf("after the claim the CFS quota is %d, want 100000 (cpu: 1)", got)
	}
	const views = `nproc; python3 -c 'import os; print(os.cpu_count())'; grep -c ^processor /proc/cpuinfo; cat /sys/devices/system/cpu/online`
	if got := mustSh(t, id, views); got != "1\n1\n1\n0" {
		t.Errorf("after a claim with cpu: 1 of a cpu: %d pool sandbox: nproc, os.cpu_count(), cpuinfo's processors, cpu/online =\n%s\nwant 1, 1, 1, 0", host, got)
	}
}

// TestContainerSyscallView: on the container tier the figures that come
// from system calls, not files, are the sandbox's too
// (internal/guest/sysview): sysinfo(2) (glibc's
// sysconf(_SC_PHYS_PAGES), busybox's free) says the memory cgroup's
// limit, and statfs(2) of the root (df /, Python's shutil.disk_usage and
// os.fstatvfs) the writable layer's quota and what it holds, read live:
// a write shows at once, a raised limit (memory or disk, changed on the
// host) at the next call. A path the caller may not search is still the
// kernel's to refuse, and another mount's figures are the kernel's. The
// verdicts compare with the cgroup's limit and the quota group's files
// read on the host.
func TestContainerSyscallView(t *testing.T) {
	needBase(t)
	id := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: "container", MemoryMB: 256, DiskMB: 300})
	memLimit := cgroupPath("memory", id) + "/memory.limit_in_bytes"
	qdir, err := storage.QgroupSysfsDir(filepath.Join(env.cfg.DataDir, "storage", "sandboxes", id))
	if err != nil {
		t.Fatal(err)
	}
	diskLimit := readHostInt(t, qdir+"/max_referenced")
	if diskLimit != 300<<20 {
		t.Fatalf("the layer's quota group (%s) limits it to %d bytes, want 300 MiB", qdir, diskLimit)
	}
	physMem := func() int64 {
		out := mustSh(t, id, `python3 -c 'import os; print(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))'`)
		n, err := strconv.ParseInt(out, 10, 64)
		if err != nil {
			t.Fatalf("sysconf(_SC_PHYS_PAGES) inside: %q", out)
		}
		return n
	}
	if got, want := physMem(), readHostInt(t, memLimit); got != want {
		t.Errorf("sysconf(_SC_PHYS_PAGES) x page size inside = %d, want the memory cgroup's limit %d", got, want)
	}
	// df /: GNU df's size in bytes, and Python's figures through statvfs
	// and fstatvfs (fstatfs).
	disk := func() (size, used int64) {
		out := mustSh(t, id, `df -B1 --output=size,used / | tail -1; python3 -c '
import os, shutil
u = shutil.disk_usage("/")
fd = os.open("/etc/hostname", os.O_RDONLY)
s = os.fstatvfs(fd)
print(u.total, s.f_blocks * s.f_frsize)'`)
		f := strings.Fields(out)
		if len(f) != 4 {
			t.Fatalf("df and python inside: %q", out)
		}
		var n [4]int64
		for i := range f {
			n[i], _ = strconv.ParseInt(f[i], 10, 64)
		}
		if n[2] != n[0] || n[3] != n[0] {
			t.Errorf("df's size %d, shutil.disk_usage's %d, fstatvfs's %d: want one figure", n[0], n[2], n[3])
		}
		return n[0], n[1]
	}
	size, used := disk()
	if size != diskLimit {
		t.Errorf("df / inside says %d bytes, want the layer's limit %d", size, diskLimit)
	}
	// 40 MiB written show as used at once (the quota group's bytes
	// reserved for writes not yet committed count).
	mustSh(t, id, `head -c 40M /dev/urandom > /root/blob`)
	_, used2 := disk()
	if used2-used < 39<<20 || used2 > size {
		t.Errorf("after writing 40 MiB, df / says %d bytes used (before: %d); want 40 MiB more", used2, used)
	}
	// A raised limit shows at the next call: memory (as a warm pool's
	// claim resizes) and disk (the quota group's limit).
	raised := readHostInt(t, memLimit) + 128<<20
	for _, f := range []string{cgroupPath("memory", id) + "/memory.memsw.limit_in_bytes", memLimit} {
		if _, err := os.Stat(f); err != nil && f != memLimit {
			continue
		}
		if err := os.WriteFile(f, []byte(strconv.FormatInt(raised, 10)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := physMem(); got != raised {
		t.Errorf("after the memory limit was raised to %d, sysconf(_SC_PHYS_PAGES) x page size = %d", raised, got)
	}
	layer := filepath.Join(env.cfg.DataDir, "storage", "sandboxes", id)
	if out, err := exec.Command("btrfs", "qgroup", "limit", "400M", layer).CombinedOutput(); err != nil {
		t.Fatalf("raising the layer's limit on the host: %v: %s", err, out)
	}
	if size, _ := disk(); size != 400<<20 {
		t.Errorf("after the disk limit was raised to 400 MiB, df / says %d", size)
	}
	// Another mount is the kernel's; a path the caller may not search
	// is refused as the kernel would.
	if got := mustSh(t, id, `stat -f -c %T /proc`); got != "proc" {
		t.Errorf("stat -f /proc says type %q, want proc", got)
	}
	mustSh(t, id, `mkdir -p /root/private && chmod 700 /root /root/private`)
	if res := execReq(t, id, api.ExecRequest{Shell: `stat -f /root/private`, User: "65534"}); res.ExitCode == 0 || !strings.Contains(res.Stderr, "Permission denied") {
		t.Errorf("statfs of a path nobody may not search, as nobody: %q %q; want Permission denied", res.Stdout, res.Stderr)
	}
	t.Logf("sysconf(_SC_PHYS_PAGES): the cgroup's limit, then %d; df /: %d bytes, %d used, %d after 40 MiB written", raised, size, used, used2)
}

// TestGvisorMemoryView: on the gvisor tier, gVisor's /proc/meminfo,
// busybox's free and sysconf(_SC_PHYS_PAGES) (sysinfo) say the
// sandbox's memory limit: its memory_mb and the Sentry's reserve, which
// is the memory cgroup's limit read on the host
// (drivers/gvisor/view_linux.go); the host's own /proc/meminfo is
// untouched.
func TestGvisorMemoryView(t *testing.T) {
	needGvisor(t)
	needBase(t)
	id := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: "gvisor", MemoryMB: 256})
	limit := readHostInt(t, cgroupPath("memory", id)+"/memory.limit_in_bytes")
	out := mustSh(t, id, `awk '/^MemTotal:/{print $2}' /proc/meminfo; python3 -c 'import os; print(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))'`)
	f := strings.Fields(out)
	if len(f) != 2 {
		t.Fatalf("MemTotal and sysconf inside: %q", out)
	}
	kb, _ := strconv.ParseInt(f[0], 10, 64)
	phys, _ := strconv.ParseInt(f[1], 10, 64)
	if kb<<10 != limit || phys != limit {
		t.Errorf("gVisor's MemTotal %d kB, sysconf(_SC_PHYS_PAGES) x page size %d; want the memory cgroup's limit %d (256 MiB and the Sentry's reserve)", kb, phys, limit)
	}
	busybox := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Isolation: "gvisor", MemoryMB: 128})
	if got := mustSh(t, busybox, `free | awk '/^Mem:/{print $2}'`); got != strconv.FormatInt((128<<20+limit-256<<20)>>10, 10) {
		t.Errorf("busybox free's total in a 128 MiB gvisor sandbox = %s kB, want %d", got, (128<<20+limit-256<<20)>>10)
	}
	host, _ := os.ReadFile("/proc/meminfo")
	if hostKB, _ := strconv.ParseInt(strings.Fields(firstLineWith(string(host), "MemTotal:") + " x 0")[1], 10, 64); hostKB<<10 == limit {
		t.Errorf("the host's own /proc/meminfo says the sandbox's limit")
	}
}

// TestGvisorCPUView: on the gvisor tier, gVisor's CPU count
// (os.cpu_count(), os.sched_getaffinity, /proc/cpuinfo's processors,
// nproc without OMP_NUM_THREADS) is ceil(cpu) of the sandbox's CFS quota
// read on the host, at least 2 and at most the host's count
// (drivers/gvisor/view_linux.go), and every exec's OMP_NUM_THREADS, and
// so nproc, says ceil(cpu) when that is fewer. On a 2-CPU host gVisor's
// count is always 2; TestDriverRoundTrip (drivers/gvisor) shows a count
// above the host's, which can only come from the quota.
func TestGvisorCPUView(t *testing.T) {
	needGvisor(t)
	needBase(t)
	host := runtime.NumCPU()
	for _, c := range []struct {
		cpu        float64
		count, omp int
	}{{1, min(host, 2), 1}, {0.5, min(host, 2), 1}, {float64(host), host, host}} {
		id := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: "gvisor", CPU: c.cpu})
		quota := readHostInt(t, cgroupPath("cpu", id)+"/cpu.cfs_quota_us")
		if want := int64(c.cpu * 100000); quota != want {
			t.Fatalf("cpu: %v: the sandbox's CFS quota is %d, want %d", c.cpu, quota, want)
		}
		got := mustSh(t, id, `nproc; env -u OMP_NUM_THREADS nproc; python3 -c 'import os; print(os.cpu_count(), len(os.sched_getaffinity(0)))'; grep -c ^processor /proc/cpuinfo; echo "omp=$OMP_NUM_THREADS"`)
		ompEnv := ""
		if c.omp < c.count {
			ompEnv = fmt.Sprint(c.omp)
		}
		if want := fmt.Sprintf("%d\n%d\n%d %d\n%d\nomp=%s", c.omp, c.count, c.count, c.count, c.count, ompEnv); got != want {
			t.Errorf("cpu: %v (quota %d us of 100000): nproc, nproc without OMP_NUM_THREADS, os.cpu_count() and os.sched_getaffinity, cpuinfo's processors, OMP_NUM_THREADS =\n%s\nwant\n%s", c.cpu, quota, got, want)
		}
	}
}
