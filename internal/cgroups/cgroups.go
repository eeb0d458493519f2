// Package cgroups puts each sandbox in a cgroup of its own with CPU, memory
// (no swap) and pids limits, and reads, freezes, kills and removes it. One
// small interface covers cgroup v1 (controllers mounted one per directory,
// as on this project's build machines) and v2 (the unified hierarchy of
// most production hosts); New picks the one the host runs.
//
//	m, err := cgroups.New("agentbox")                 // once per daemon
//	cg, err := m.Create(id, cgroups.Resources{CPU: 1, MemoryBytes: 512 << 20, Pids: 256})
//	defer cg.Destroy()                                // kills what is left, removes the dirs
//	fd, err := cg.FD()                                // v2: SysProcAttr.CgroupFD
//	err = cg.AddProc(pid)                             // v1: after start, before exec
//
// Create is on the hot path of every sandbox: it only makes directories and
// writes each limit file once, never reads back.
package cgroups

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/errdefs"
)

// CFSPeriodUS is the CFS period of every limited cgroup, in µs.
const CFSPeriodUS = 100000

// CFSQuotaUS is the CFS quota, in µs per CFSPeriodUS, that limits a
// cgroup to cpu cores (cpu > 0), at least the kernel's minimum of 1 ms.
func CFSQuotaUS(cpu float64) int64 { return max(1000, int64(cpu*CFSPeriodUS)) }

// Resources are the limits of one cgroup. Zero means unlimited. Swap is
// always off for a limited cgroup: v1 memory.memsw.limit_in_bytes equals
// memory.limit_in_bytes, v2 memory.swap.max is 0.
type Resources struct {
	CPU         float64 // cores, e.g. 0.5
	MemoryBytes int64
	Pids        int64
	// KeepCPU leaves the CPU limit as it is (CPU is ignored): for a
	// cgroup known to have it already. Writing a CPU limit walks every
	// CPU cgroup of the host (the kernel's schedulability check), a cost
	// that grows with the number of sandboxes.
	KeepCPU bool
}

// Stats is a snapshot of a cgroup's counters.
type Stats struct {
	MemoryBytes int64  // current usage, page cache included
	CPUNanos    uint64 // CPU time used since creation
	Pids        int64  // tasks now
	OOMKills    int64  // processes the OOM killer killed in this cgroup and those below it
}

// Manager makes and finds cgroups under one parent (e.g. "agentbox").
type Manager interface {
	// Version is 1 or 2.
	Version() int
	// Create makes <parent>/<name> in every controller used (v1: cpu,
	// cpuacct, memory, pids, freezer; v2: one directory with cpu, memory
	// and pids enabled) and applies r. ErrAlreadyExists if it exists.
	Create(name string, r Resources) (Cgroup, error)
	// Open finds an existing cgroup, for re-adoption after a restart;
	// ErrNotFound if absent.
	Open(name string) (Cgroup, error)
	// List names the cgroups under the parent, for cleanup.
	List() ([]string, error)
	// Rename gives cgroup from the name to, with its children, processes
	// and limits (v1, where a rename is one rename(2) per hierarchy); v2
	// answers ErrFailedPrecondition (the kernel refuses renames there).
	Rename(from, to string) (Cgroup, error)
}

// Cgroup is one sandbox's cgroup.
type Cgroup interface {
	Name() string
	// Child makes a child cgroup in every controller with limits r.
	// Destroy of the parent removes it too.
	Child(name string, r Resources) (Cgroup, error)
	// Sub is the existing child name (as Child made it), without
	// touching the filesystem.
	Sub(name string) Cgroup
	// Set changes the limits of a live cgroup, in an order the kernel
	// accepts whether they go up or down.
	Set(r Resources) error
	// AddProc moves a process (all its threads) into the cgroup.
	AddProc(pid int) error
	// FD opens the cgroup directory for SysProcAttr.CgroupFD (clone3
	// CLONE_INTO_CGROUP), so a child starts inside its limits. v2 only;
	// v1 answers ErrFailedPrecondition: use AddProc. The caller closes it.
	FD() (int, error)
	// Delegate lets host uid/gid create child cgroups and move its own
	// processes among them: it chowns the directory and its cgroup.procs,
	// tasks (v1), freezer.state (v1), cgroup.threads and
	// cgroup.subtree_control (v2). On v1 controllers names which
	// hierarchies (default "pids" and "freezer"); v2 ignores it, as the
	// delegatee enables controllers itself.
	Delegate(uid, gid int, controllers ...string) error
	// Paths maps controller to absolute directory (v2: "" to the one dir).
	Paths() map[string]string
	// Procs lists the processes in the cgroup and its descendants.
	Procs() ([]int, error)
	// Freeze stops every process and returns once all are frozen.
	Freeze() error
	// Thaw resumes them.
	Thaw() error
	// Frozen reports whether the cgroup itself is frozen or freezing
	// (v1 freezer.state not THAWED, v2 cgroup.freeze 1): what Freeze
	// asked, whoever asked it.
	Frozen() (bool, error)
	// ThawTree thaws the cgroup and every cgroup below it, frozen by
	// whoever froze them (a sandbox's agent freezes an exec's child
	// cgroup to kill its tree). Cgroups removed meanwhile are skipped.
	ThawTree() error
	Stats() (Stats, error)
	// Kill SIGKILLs every process, descendants' included, and returns
	// once the cgroup is empty.
	Kill() error
	// Destroy kills, then removes child cgroups depth-first and the
	// cgroup itself. Idempotent.
	Destroy() error
}

// New detects the cgroup version and returns a Manager rooted at parent,
// creating its directories. It is not on the hot path: call it once.
func New(parent string) (Manager, error) {
	if err := validPath(parent); err != nil {
		return nil, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		return nil, fmt.Errorf("%w: /sys/fs/cgroup: %w; mount cgroupfs there", errdefs.ErrFailedPrecondition, err)
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		m, err := newV2("/sys/fs/cgroup", parent, nil)
		if err != nil {
			return nil, err
		}
		return m, nil
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("%w: reading mountinfo: %w", errdefs.ErrInternal, err)
	}
	m, err := newV1(v1Mounts(string(mounts)), parent)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// validName checks a cgroup name: one path element.
func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%w: cgroup name %q must be one non-empty path element", errdefs.ErrInvalidArgument, name)
	}
	return nil
}

// validPath checks a parent: relative, slash-separated names.
func validPath(p string) error {
	if p == "" {
		return fmt.Errorf("%w: cgroup parent must not be empty", errdefs.ErrInvalidArgument)
	}
	for _, el := range strings.Split(p, "/") {
		if err := validName(el); err != nil {
			return fmt.Errorf("cgroup parent %q: %w", p, err)
		}
	}
	return nil
}

// writeFile writes one cgroup control file: a single open, write, close,
// without O_CREAT (cgroupfs makes the files; an absent one is ENOENT).
func writeFile(path, value string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	// A limit below the usage makes the write reclaim first, and a
	// signal (the Go runtime's preemption among them) can interrupt
	// that: EINTR, which says to write again (seen on a fork's memory
	// limit under load).
	for {
		_, err = unix.Write(fd, []byte(value))
		if err != unix.EINTR {
			break
		}
	}
	unix.Close(fd)
	if err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// readInt reads a file holding one integer ("max" reads as -1).
func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// keyedInt finds "key value" in a flat-keyed file such as memory.events.
func keyedInt(path, key string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, nil
}

// classify wraps a filesystem error with its errdefs class.
func classify(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s: %w: %w", what, errdefs.ErrNotFound, err)
	case errors.Is(err, os.ErrExist):
		return fmt.Errorf("%s: %w: %w", what, errdefs.ErrAlreadyExists, err)
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("%s: %w: %w", what, errdefs.ErrInvalidArgument, err)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%s: %w: %w (the daemon needs root to manage cgroups)", what, errdefs.ErrPermissionDenied, err)
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("%s: %w: %w", what, errdefs.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w: %w", what, errdefs.ErrInternal, err)
}
