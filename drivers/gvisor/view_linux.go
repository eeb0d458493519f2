package gvisor

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/cgroups"
)

// The Sentry's view of its resources: its CPU count and MemTotal.
//
// `runsc run` (and `runsc restore`) passes the Sentry its CPU count and
// MemTotal (`runsc boot --cpu-num`, `--total-memory`): from the cgroup
// the spec's cgroupsPath names when it reads cgroups, otherwise the
// host's (`runtime.NumCPU()`, /proc/meminfo). Letting runsc manage the
// sandbox's real cgroups costs a create about 9 ms (it makes, fills and
// joins a cgroup in every hierarchy). So the driver keeps its own
// cgroups (it starts runsc inside them) and gives runsc a cgroup tree of
// its own to read instead: `runsc run` starts in a mount namespace of
// its own, a slave of the daemon's, in which the cgroup root runsc looks
// at (/sys/fs/cgroup) is a bind of a tree of the driver's (viewDir)
// holding one cgroup, viewCgroup, in every hierarchy runsc knows, whose
// cpu, cpuset and memory files say the sandbox's CPU quota, its CPU
// count (viewOf) and memory limit. runsc finds the cgroup there and
// uses it as it is (it made none of it, so it writes no limit and
// removes nothing), and "joins" it by writing to plain files: no
// process moves. Its sandbox and gofer processes make namespaces of
// their own from that one and pivot away, and `runsc run --detach` then
// exits, so nothing stays in it. Every other runsc command runs in the
// daemon's namespace with --ignore-cgroups.

// viewCgroup is the cgroup the spec names (cgroupsPath), found only in
// the view's tree. runsc does not compare it at a restore.
const viewCgroup = "/agentbox-view"

// sentryView is what runsc reads from the view's cgroup.
type sentryView struct {
	cpus     int   // cpuset.cpus holds this many CPUs: the Sentry's count
	quotaUS  int64 // cpu.cfs_quota_us, -1 for none
	periodUS int64 // cpu.cfs_period_us
	memBytes int64 // memory.limit_in_bytes: runsc takes the lower of it and the host's MemTotal
}

// unlimitedMemory is what a v1 memory cgroup without a limit says.
const unlimitedMemory = math.MaxInt64 &^ (4096 - 1)

// minSentryCPUs is the fewest CPUs the view gives a Sentry (runsc's own
// floor for a count from the quota). The Sentry's CPU count is also its
// Go runtime's GOMAXPROCS: at 1 a gvisor create takes about 30 ms
// longer (167.7 against 135.2 ms p50, docs/PERFORMANCE.md), and the
// systrap platform never turns on its fast path for system calls
// (pkg/sentry/platform/systrap of the pinned runsc). So a `cpu: 1`
// sandbox shows 2 CPUs; the quota still holds it to one.
const minSentryCPUs = 2

// viewOf is spec's view on a host whose sandboxes may run on hostCPUs
// CPUs: ceil(cpu) of them, at least minSentryCPUs and at most hostCPUs,
// the quota the driver's cgroup sets, and the memory cgroup's limit.
func viewOf(spec *driver.Spec, hostCPUs int) sentryView {
	v := sentryView{cpus: hostCPUs, quotaUS: -1, periodUS: cgroups.CFSPeriodUS, memBytes: unlimitedMemory}
	if spec.CPU > 0 {
		v.cpus = max(1, min(hostCPUs, max(minSentryCPUs, int(math.Ceil(spec.CPU)))))
		v.quotaUS = cgroups.CFSQuotaUS(spec.CPU) // what the driver's cgroup says
	}
	if spec.MemoryMB > 0 {
		v.memBytes = spec.MemoryMB<<20 + sentryReserveMemory
	}
	return v
}

// runscControllers are the v1 hierarchies runsc knows (runsc/cgroup's
// controllers in the pinned runsc). The view has its cgroup in each, so
// runsc finds every one made already (it skips, and logs, any it would
// have to make).
var runscControllers = []string{"blkio", "cpu", "cpuset", "hugetlb", "memory", "net_cls", "net_prio", "pids",
	"cpuacct", "devices", "freezer", "perf_event", "rdma", "systemd"}

// writeView writes v's cgroup tree into root, where runsc looks for
// cgroups in the view's namespace (startInView).
func writeView(root string, v sentryView) error {
	files := map[string]map[string]string{
		"cpu": {
			"cpu.cfs_quota_us":  strconv.FormatInt(v.quotaUS, 10),
			"cpu.cfs_period_us": strconv.FormatInt(v.periodUS, 10),
		},
		"cpuset": {"cpuset.cpus": fmt.Sprintf("0-%d", v.cpus-1)},
		"memory": {"memory.limit_in_bytes": strconv.FormatInt(v.memBytes, 10)},
	}
	if v.cpus == 1 {
		files["cpuset"]["cpuset.cpus"] = "0"
	}
	for _, c := range runscControllers {
		if files[c] == nil {
			files[c] = map[string]string{}
		}
	}
	for hier, fs := range files {
		dir := filepath.Join(root, hier, viewCgroup)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("gvisor: the Sentry's cgroup view: %w", err)
		}
		// runsc "joins" the cgroup by writing its pid here (and does not
		// create the file).
		fs["cgroup.procs"] = ""
		for name, val := range fs {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(val+"\n"), 0o644); err != nil {
				return fmt.Errorf("gvisor: the Sentry's cgroup view: %w", err)
			}
		}
	}
	return nil
}

// runscCgroupRoot is where runsc looks for cgroups, read from a
// mountinfo as runsc reads its own: the first cgroup (v1 or v2) mount,
// or its parent when it is named for a hierarchy (cpu, "cpu,cpuacct",
// unified); /sys/fs/cgroup when there is none. The view is bound
// exactly there, so runsc can find no other.
func runscCgroupRoot(mountinfo io.Reader) string {
	named := map[string]bool{"unified": true}
	for _, h := range runscControllers {
		named[h] = true
	}
	s := bufio.NewScanner(mountinfo)
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 9 {
			continue
		}
		if fstype := f[len(f)-3]; fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		mp := f[4]
		if base := filepath.Base(mp); named[base] || strings.Contains(base, ",") {
			return filepath.Dir(mp)
		}
		return mp
	}
	return "/sys/fs/cgroup"
}

// viewHeld checks, after a `runsc run`, that runsc found the view's
// cgroup where the view put it and not among the host's cgroups: it
// would have moved the sandbox's processes into a cgroup of that name
// there, outside the sandbox's limits. That can only happen when the
// host's cgroups are mounted elsewhere than when the daemon started
// (cgroupRoot); the create then fails (its undo deletes the sandbox).
// Two stats.
func (d *Driver) viewHeld() error {
	for _, h := range []string{"cpu", "memory"} {
		if dir := filepath.Join(d.cgroupRoot, h, viewCgroup); dirExists(dir) {
			return fmt.Errorf("gvisor: runsc found its cgroup among the host's (%s), outside the sandbox's limits: cgroups are no longer mounted where they were when the daemon started (%s); remove %s in each hierarchy and restart the daemon", dir, d.cgroupRoot, viewCgroup)
		}
	}
	return nil
}

func dirExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// onMainThread says whether the calling thread is the process's main
// thread (a variable for tests).
var onMainThread = func() bool { return unix.Gettid() == unix.Getpid() }

// onThrowawayThread runs fn on a thread of its own that is never handed
// back to the runtime: it ends with fn's goroutine, so fn may change
// what only that thread sees (its mount namespace). Never on the main
// thread, which cannot end and whose /proc/self is the process's view:
// a goroutine that finds itself there holds it while another thread
// runs fn (no other goroutine runs on a thread locked to one).
func onThrowawayThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if onMainThread() {
			errc <- onThrowawayThread(fn)
			runtime.UnlockOSThread()
			return
		}
		errc <- fn() // never unlocked
	}()
	return <-errc
}

// startInView starts cmd in a new mount namespace, a slave of the
// caller's, with view (a tree viewDir made) bound over cgroupRoot. The
// namespace is made on a thread of its own (onThrowawayThread), which
// cmd is forked from; the namespace ends when cmd's processes have left
// it.
func startInView(cmd *exec.Cmd, view, cgroupRoot string) error {
	return onThrowawayThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("gvisor: a mount namespace for runsc: %w", err)
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
			return fmt.Errorf("gvisor: a mount namespace for runsc: %w", err)
		}
		if err := unix.Mount(view, cgroupRoot, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("gvisor: binding the Sentry's cgroup view over %s: %w", cgroupRoot, err)
		}
		return cmd.Start()
	})
}

// viewDir returns the directory holding v's tree under dir (the
// driver's views: one per distinct view, shared by the sandboxes that
// have it, made at its first use). runsc only reads the trees, and
// writes its pid to their cgroup.procs files, which are plain files.
func viewDir(dir string, v sentryView) (string, error) {
	path := filepath.Join(dir, fmt.Sprintf("%d-%d-%d-%d", v.cpus, v.quotaUS, v.periodUS, v.memBytes))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("gvisor: the Sentry's cgroup views: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, ".new-")
	if err != nil {
		return "", fmt.Errorf("gvisor: the Sentry's cgroup views: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("gvisor: the Sentry's cgroup views: %w", err)
	}
	if err := writeView(tmp, v); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		// Another create made it first (rename(2) does not replace a
		// directory that holds anything).
		os.RemoveAll(tmp)
		if _, serr := os.Stat(path); serr != nil {
			return "", fmt.Errorf("gvisor: the Sentry's cgroup views: %w", err)
		}
	}
	return path, nil
}

// openProcs opens the cgroup.procs file of each of a cgroup's
// directories (cgroups.Cgroup.Paths; one directory may hold several
// hierarchies), for a process that joins them from the view's
// namespace (joinScript).
func openProcs(paths map[string]string) ([]*os.File, error) {
	seen := map[string]bool{}
	var files []*os.File
	for _, dir := range paths {
		if seen[dir] {
			continue
		}
		seen[dir] = true
		f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("gvisor: the sandbox's cgroup: %w", err)
		}
		files = append(files, f)
	}
	if len(files) > 7 {
		// The shell's redirections name fds 3 to 9.
		closeAll(files)
		return nil, fmt.Errorf("gvisor: the sandbox's cgroup has %d directories, more than 7", len(files))
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// joinScript is the `sh -c` script that moves the shell into the
// cgroups whose cgroup.procs files it holds as fds 3 to 2+n
// (exec.Cmd.ExtraFiles: openProcs), closes them, and execs its
// arguments: runsc gets none of them.
func joinScript(n int) string {
	var join, closeFDs strings.Builder
	for fd := 3; fd < 3+n; fd++ {
		fmt.Fprintf(&join, "echo $$ >&%d || exit 111; ", fd)
		fmt.Fprintf(&closeFDs, " %d>&-", fd)
	}
	if n == 0 {
		return `exec "$@"`
	}
	return join.String() + "exec" + closeFDs.String() + `; exec "$@"`
}
