package guest

import (
	"bytes"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// cpuLimit reads the sandbox's CPU limit (its cgroup's CFS quota) so that
// every exec's environment can say it: OMP_NUM_THREADS=ceil(quota) when
// the quota allows fewer CPUs than the agent may run on. coreutils'
// nproc, OpenMP runtimes and the BLAS libraries numpy and PyTorch load
// size themselves from it; without it they count the affinity mask, the
// host's CPUs, while LXCFS's /proc/cpuinfo and
// /sys/devices/system/cpu/online say the quota's (docs/sandbox-view.md).
// Read at each exec, so a resize shows at the next one; a template's or
// an exec's own OMP_NUM_THREADS wins.
type cpuLimit struct {
	mu sync.Mutex
	// v1: cpu.cfs_quota_us and cpu.cfs_period_us of the sandbox's cgroup;
	// v2: its cpu.max, period -1.
	quota, period int
	cpus          int // CPUs the agent may run on
	fixed         int // a count that does not change (fixedCPULimit), not read
}

// ownCPUs is cpus when it is set, else how many CPUs the kernel lets the
// agent run on (0 when it cannot say).
func ownCPUs(cpus int) int {
	if cpus > 0 {
		return cpus
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0
	}
	return set.Count()
}

// fixedCPULimit is a limit of n CPUs that is not read from a cgroup
// (proto.BootSpec.CPULimit); cpus as for openCPULimit. nil when the
// kernel's mask cannot be read.
func fixedCPULimit(n, cpus int) *cpuLimit {
	if cpus = ownCPUs(cpus); cpus <= 0 {
		return nil
	}
	return &cpuLimit{quota: -1, period: -1, cpus: cpus, fixed: n}
}

// openCPULimit opens the quota files of the cgroup dir marked CPU, or
// returns nil where there is none. cpus is how many CPUs the agent may
// run on, 0 to ask the kernel.
func openCPULimit(dirs []CgroupDir, cpus int) *cpuLimit {
	if cpus = ownCPUs(cpus); cpus <= 0 {
		return nil
	}
	for _, d := range dirs {
		if !d.CPU {
			continue
		}
		dir := d.FD
		if d.HomeFD > 0 {
			dir = d.HomeFD
		}
		open := func(name string) int {
			fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return -1
			}
			return fd
		}
		l := &cpuLimit{quota: -1, period: -1, cpus: cpus}
		if d.V2 {
			// The agent's and the workload's cgroups are leaves below
			// the sandbox's, which holds the limit.
			l.quota = open("../cpu.max")
		} else {
			l.quota, l.period = open("cpu.cfs_quota_us"), open("cpu.cfs_period_us")
			if l.period < 0 && l.quota >= 0 {
				unix.Close(l.quota)
				l.quota = -1
			}
		}
		if l.quota < 0 {
			return nil
		}
		return l
	}
	return nil
}

// env is "OMP_NUM_THREADS=n", or "" when the quota allows every CPU (or
// cannot be read).
func (l *cpuLimit) env() string {
	if n := l.count(); n > 0 {
		return "OMP_NUM_THREADS=" + strconv.Itoa(n)
	}
	return ""
}

// count is ceil(quota) CPUs, or 0 when the quota allows every CPU the
// agent may run on (or cannot be read).
func (l *cpuLimit) count() int {
	if l == nil {
		return 0
	}
	if l.fixed > 0 {
		if l.fixed >= l.cpus {
			return 0
		}
		return l.fixed
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var buf [64]byte
	read := func(fd int) []byte {
		n, err := unix.Pread(fd, buf[:], 0)
		if err != nil || n <= 0 {
			return nil
		}
		return bytes.TrimSpace(buf[:n])
	}
	var quota, period int64
	var err error
	if l.period < 0 { // v2: "max 100000" or "50000 100000"
		q, p, ok := bytes.Cut(read(l.quota), []byte(" "))
		if !ok || string(q) == "max" {
			return 0
		}
		if quota, err = strconv.ParseInt(string(q), 10, 64); err != nil {
			return 0
		}
		if period, err = strconv.ParseInt(string(p), 10, 64); err != nil {
			return 0
		}
	} else {
		if quota, err = strconv.ParseInt(string(read(l.quota)), 10, 64); err != nil {
			return 0
		}
		if period, err = strconv.ParseInt(string(read(l.period)), 10, 64); err != nil {
			return 0
		}
	}
	n := ceilCPUs(quota, period)
	if n <= 0 || n >= l.cpus {
		return 0
	}
	return n
}

// ceilCPUs is the CPU count a CFS quota gives, rounded up as LXCFS does;
// 0 for no quota.
func ceilCPUs(quota, period int64) int {
	if quota <= 0 || period <= 0 {
		return 0
	}
	return int((quota + period - 1) / period)
}
