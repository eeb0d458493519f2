package cgroups

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/errdefs"
)

// v1Controllers are the hierarchies a v1 sandbox cgroup lives in.
// cpuset is used where it is mounted (v1Optional) and limits nothing: a
// sandbox's cpuset allows every CPU its parent does, since pinning would
// only hurt the scheduler's balance (the CPU limit is the cpu
// controller's quota). It is there because LXCFS finds a sandbox's CPU
// quota at its cpuset cgroup's path, and counts CPUs for /proc/cpuinfo,
// /proc/stat and /sys/devices/system/cpu/online from it
// (docs/sandbox-view.md).
var v1Controllers = []string{"cpu", "cpuacct", "memory", "pids", "freezer", "cpuset"}

// v1Optional are the controllers of v1Controllers a host may lack.
var v1Optional = []string{"cpuset"}

// v1Mounts maps each v1 controller to its mount point, from mountinfo.
// Co-mounted controllers (cpu,cpuacct) share one mount point.
func v1Mounts(mountinfo string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(mountinfo, "\n") {
		left, right, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 5 || len(rf) < 3 || rf[0] != "cgroup" {
			continue
		}
		for _, opt := range strings.Split(rf[2], ",") {
			if slices.Contains(v1Controllers, opt) {
				if _, dup := m[opt]; !dup {
					m[opt] = lf[4]
				}
			}
		}
	}
	return m
}

type v1Manager struct {
	parent string
	ctrls  map[string]string // controller -> <mount>/<parent>
	dirs   []string          // the distinct directories of ctrls, in v1Controllers order
}

func newV1(mounts map[string]string, parent string) (*v1Manager, error) {
	m := &v1Manager{parent: parent, ctrls: map[string]string{}}
	for _, c := range v1Controllers {
		mnt, ok := mounts[c]
		if !ok && slices.Contains(v1Optional, c) {
			continue
		}
		if !ok {
			return nil, fmt.Errorf("%w: cgroup v1 controller %q is not mounted; mount it (mount -t cgroup -o %s cgroup /sys/fs/cgroup/%s)",
				errdefs.ErrFailedPrecondition, c, c, c)
		}
		d := filepath.Join(mnt, parent)
		m.ctrls[c] = d
		if !slices.Contains(m.dirs, d) {
			m.dirs = append(m.dirs, d)
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, classify(err, "creating cgroup parent")
			}
		}
		if c == "cpuset" {
			if err := cloneCpusets(mnt, parent); err != nil {
				return nil, classify(err, "preparing the cpuset cgroup parent")
			}
		}
	}
	return m, nil
}

// cloneCpusets readies the cpuset cgroups from the hierarchy's mount down
// to parent so that a cgroup made below them by mkdir alone can hold
// processes: a fresh v1 cpuset has no CPUs and no memory nodes (a task
// cannot join it) unless its parent has cgroup.clone_children set, which
// copies the parent's at mkdir and is itself inherited. Each level gets
// its parent's cpuset.cpus and cpuset.mems where it has none, and
// clone_children. Once per Manager, so that Create stays one mkdir.
func cloneCpusets(mnt, parent string) error {
	dir := mnt
	for _, el := range strings.Split(parent, "/") {
		up := dir
		dir = filepath.Join(dir, el)
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(b)) != "" {
				continue
			}
			if b, err = os.ReadFile(filepath.Join(up, f)); err != nil {
				return err
			}
			if err := writeFile(filepath.Join(dir, f), strings.TrimSpace(string(b))); err != nil {
				return err
			}
		}
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.clone_children"))
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(b)) != "1" {
			if err := writeFile(filepath.Join(dir, "cgroup.clone_children"), "1"); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *v1Manager) Version() int { return 1 }

func (m *v1Manager) cgroup(name string) *v1Cgroup {
	cg := &v1Cgroup{name: name, paths: make(map[string]string, len(m.ctrls)), dirs: make([]string, len(m.dirs))}
	for c, d := range m.ctrls {
		cg.paths[c] = d + "/" + name
	}
	for i, d := range m.dirs {
		cg.dirs[i] = d + "/" + name
	}
	return cg
}

func (m *v1Manager) Create(name string, r Resources) (Cgroup, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	cg := m.cgroup(name)
	for i, d := range cg.dirs {
		if err := unix.Mkdir(d, 0o755); err != nil {
			removeTree(cg.dirs[:i]) // the ones made here
			return nil, classify(&os.PathError{Op: "mkdir", Path: d, Err: err}, "creating cgroup "+name)
		}
	}
	if err := cg.apply(r, true); err != nil {
		removeTree(cg.dirs)
		return nil, err
	}
	return cg, nil
}

func (m *v1Manager) Open(name string) (Cgroup, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	cg := m.cgroup(name)
	for _, d := range cg.dirs {
		if _, err := os.Stat(d); err == nil {
			return cg, nil // partial ones too, so that Destroy can finish them
		}
	}
	return nil, fmt.Errorf("cgroup %s: %w", name, errdefs.ErrNotFound)
}

func (m *v1Manager) Rename(from, to string) (Cgroup, error) {
	if err := validName(from); err != nil {
		return nil, err
	}
	if err := validName(to); err != nil {
		return nil, err
	}
	src, dst := m.cgroup(from), m.cgroup(to)
	for i := range src.dirs {
		// cgroupfs never replaces an existing cgroup (EEXIST), and takes no
		// renameat2 flags.
		if err := unix.Rename(src.dirs[i], dst.dirs[i]); err != nil {
			for j := 0; j < i; j++ { // put back the ones moved
				_ = os.Rename(dst.dirs[j], src.dirs[j])
			}
			return nil, classify(&os.PathError{Op: "rename", Path: src.dirs[i], Err: err}, "renaming cgroup "+from+" to "+to)
		}
	}
	return dst, nil
}

func (m *v1Manager) List() ([]string, error) {
	seen := map[string]bool{}
	for _, d := range m.dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			return nil, classify(err, "listing cgroups")
		}
		for _, e := range ents {
			if e.IsDir() {
				seen[e.Name()] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

type v1Cgroup struct {
	name  string
	paths map[string]string // controller -> dir
	dirs  []string          // distinct dirs
}

func (c *v1Cgroup) Name() string { return c.name }

func (c *v1Cgroup) Set(r Resources) error { return c.apply(r, false) }

// apply writes the limits. A fresh cgroup is unlimited already, so zero
// values cost nothing there.
func (c *v1Cgroup) apply(r Resources, fresh bool) error {
	if r.CPU < 0 || r.MemoryBytes < 0 || r.Pids < 0 {
		return fmt.Errorf("%w: resource limits must not be negative: %+v", errdefs.ErrInvalidArgument, r)
	}
	cpu := c.paths["cpu"]
	if r.KeepCPU {
		// as it is
	} else if r.CPU > 0 {
		if err := writeFile(cpu+"/cpu.cfs_period_us", strconv.Itoa(CFSPeriodUS)); err != nil {
			return classify(err, "setting cpu period")
		}
		if err := writeFile(cpu+"/cpu.cfs_quota_us", strconv.FormatInt(CFSQuotaUS(r.CPU), 10)); err != nil {
			return classify(err, "setting cpu limit")
		}
	} else if !fresh {
		if err := writeFile(cpu+"/cpu.cfs_quota_us", "-1"); err != nil {
			return classify(err, "setting cpu limit")
		}
	}
	if r.MemoryBytes > 0 || !fresh {
		v := "-1"
		if r.MemoryBytes > 0 {
			v = strconv.FormatInt(r.MemoryBytes, 10)
		}
		if err := c.setMemory(v); err != nil {
			return classify(err, "setting memory limit")
		}
	}
	if r.Pids > 0 || !fresh {
		v := "max"
		if r.Pids > 0 {
			v = strconv.FormatInt(r.Pids, 10)
		}
		if err := writeFile(c.paths["pids"]+"/pids.max", v); err != nil {
			return classify(err, "setting pids limit")
		}
	}
	return nil
}

// setMemory sets memory and memory+swap to the same limit. The kernel
// keeps memsw >= memory at every step: going down, memory goes first;
// going up, memsw goes first. Rather than read the old value, try memory
// first and, on EINVAL (new memory above the old memsw), swap the order.
// Without swap accounting the memsw file is absent and skipped.
func (c *v1Cgroup) setMemory(v string) error {
	mem := c.paths["memory"] + "/memory.limit_in_bytes"
	sw := c.paths["memory"] + "/memory.memsw.limit_in_bytes"
	err := writeFile(mem, v)
	if errors.Is(err, unix.EINVAL) {
		if err := writeFile(sw, v); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return writeFile(mem, v)
	}
	if err != nil {
		return err
	}
	if err := writeFile(sw, v); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return c.setTCPMemory(v)
}

// setTCPMemory charges the cgroup's socket buffers to it. cgroup v1
// counts TCP (and, once on, every socket's) buffer memory only after
// memory.kmem.tcp.limit_in_bytes is written: without it a sandbox queues
// gigabytes in loopback sockets outside its memory limit until the host's
// tcp_mem is spent and every socket of the host stalls. The limit is the
// cgroup's memory limit, at most tcpShare of the host's tcp_mem hard
// limit, so that no one sandbox takes the host's socket memory. (v2
// charges socket buffers to memory.current with no setting.)
func (c *v1Cgroup) setTCPMemory(v string) error {
	limit := hostTCPCap()
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 && n < limit {
		limit = n
	}
	err := writeFile(c.paths["memory"]+"/memory.kmem.tcp.limit_in_bytes", strconv.FormatInt(limit, 10))
	if errors.Is(err, os.ErrNotExist) {
		return nil // a kernel without TCP accounting
	}
	return err
}

// tcpShare is the part of the host's TCP memory (net.ipv4.tcp_mem's hard
// limit) one cgroup may hold at most.
const tcpShare = 4

// hostTCPCap is the most socket buffer memory, in bytes, one cgroup may
// hold on this host (read once: creates call it).
var hostTCPCap = sync.OnceValue(func() int64 {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_mem")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 3 {
			if pages, err := strconv.ParseInt(f[2], 10, 64); err == nil && pages > 0 {
				return pages * int64(os.Getpagesize()) / tcpShare
			}
		}
	}
	return 256 << 20
})

func (c *v1Cgroup) AddProc(pid int) error {
	p := strconv.Itoa(pid)
	for _, d := range c.dirs {
		if err := writeFile(d+"/cgroup.procs", p); err != nil {
			return classify(err, fmt.Sprintf("adding process %d to cgroup %s", pid, c.name))
		}
	}
	return nil
}

func (c *v1Cgroup) FD() (int, error) {
	return -1, fmt.Errorf("%w: cgroup v1 has no cgroup fd for clone3; use AddProc", errdefs.ErrFailedPrecondition)
}

func (c *v1Cgroup) Delegate(uid, gid int, controllers ...string) error {
	if len(controllers) == 0 {
		controllers = []string{"pids", "freezer"}
	}
	for _, ctrl := range controllers {
		d, ok := c.paths[ctrl]
		if !ok {
			return fmt.Errorf("%w: cannot delegate controller %q; use one of %v", errdefs.ErrInvalidArgument, ctrl, v1Controllers)
		}
		files := []string{d, d + "/cgroup.procs", d + "/tasks"}
		if ctrl == "freezer" {
			files = append(files, d+"/freezer.state")
		}
		for _, f := range files {
			if err := os.Chown(f, uid, gid); err != nil {
				return classify(err, "delegating cgroup")
			}
		}
	}
	return nil
}

func (c *v1Cgroup) Paths() map[string]string { return maps.Clone(c.paths) }

func (c *v1Cgroup) Procs() ([]int, error) {
	pids, err := treeProcs(c.dirs)
	return pids, classify(err, "listing processes")
}

func (c *v1Cgroup) Freeze() error {
	state := c.paths["freezer"] + "/freezer.state"
	if err := writeFile(state, "FROZEN"); err != nil {
		return classify(err, "freezing cgroup "+c.name)
	}
	err := waitFor(freezeTimeout, func() (bool, error) {
		b, err := os.ReadFile(state)
		return strings.TrimSpace(string(b)) == "FROZEN", err
	})
	if err != nil {
		writeFile(state, "THAWED")
		return fmt.Errorf("freezing cgroup %s: %w", c.name, err)
	}
	return nil
}

func (c *v1Cgroup) Thaw() error {
	return classify(writeFile(c.paths["freezer"]+"/freezer.state", "THAWED"), "thawing cgroup "+c.name)
}

func (c *v1Cgroup) Frozen() (bool, error) {
	b, err := os.ReadFile(c.paths["freezer"] + "/freezer.state")
	if err != nil {
		return false, classify(err, "reading the freezer state of cgroup "+c.name)
	}
	return strings.TrimSpace(string(b)) != "THAWED", nil
}

func (c *v1Cgroup) ThawTree() error {
	return thawTree(c.paths["freezer"], "freezer.state", "THAWED")
}

func (c *v1Cgroup) Stats() (Stats, error) {
	var s Stats
	var err error
	mem := c.paths["memory"]
	if s.MemoryBytes, err = readInt(mem + "/memory.usage_in_bytes"); err != nil {
		return s, classify(err, "reading memory usage")
	}
	cpu, err := readInt(c.paths["cpuacct"] + "/cpuacct.usage")
	if err != nil {
		return s, classify(err, "reading cpu usage")
	}
	s.CPUNanos = uint64(cpu)
	if s.Pids, err = readInt(c.paths["pids"] + "/pids.current"); err != nil {
		return s, classify(err, "reading pids")
	}
	if s.OOMKills, err = oomKillsV1(mem); err != nil {
		return s, classify(err, "reading oom kills")
	}
	// v1 counts a kill in the victim's own cgroup only (v2's
	// memory.events counts the descendants' too): add the children's,
	// where a sandbox's workload runs under its limit. Only the
	// children: deeper ones are the workload's own, and few.
	ents, _ := os.ReadDir(mem)
	for _, e := range ents {
		if e.IsDir() {
			if n, err := keyedInt(mem+"/"+e.Name()+"/memory.oom_control", "oom_kill"); err == nil {
				s.OOMKills += n
			}
		}
	}
	return s, nil
}

// oomKillsV1 sums oom_kill over the memory cgroup dir and every cgroup
// below it: v1 counts a kill only in the cgroup whose limit was hit (a
// sandbox's workload child), where v2's memory.events counts it in every
// ancestor too.
func oomKillsV1(dir string) (int64, error) {
	n, err := keyedInt(dir+"/memory.oom_control", "oom_kill")
	if err != nil {
		return 0, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		k, err := oomKillsV1(filepath.Join(dir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}

func (c *v1Cgroup) Kill() error {
	if err := killLoop(c.Procs, c.Freeze, c.Thaw); err != nil {
		return fmt.Errorf("killing cgroup %s: %w", c.name, err)
	}
	return nil
}

func (c *v1Cgroup) Destroy() error {
	// Usually empty by now (the driver waits for the init, and with it the
	// sandbox's pid namespace): then one pass of rmdirs is all, and only
	// a cgroup that still holds a process (EBUSY) is killed and retried.
	if err := removeTreeOnce(c.dirs); err == nil {
		return nil
	}
	if err := c.Kill(); err != nil {
		return err
	}
	return removeTree(c.dirs)
}
