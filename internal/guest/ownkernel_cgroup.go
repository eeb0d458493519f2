package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// MountOwnCgroups is for an agent whose sandbox has a kernel of its own
// (gVisor's, or the microvm tier's guest kernel): it mounts two v1
// hierarchies of that kernel's cgroupfs under dir, each with a
// "workload" child below the agent:
//
//   - pids: every exec goes into workload itself, whose pids.max is the
//     sandbox's limit (gVisor does not charge a child cgroup's tasks to
//     its parent, so the limit must be on the cgroup the tasks are in).
//     At the pinned runsc this limit does not hold reliably (the Sentry
//     charges an arbitrary one of a task's cgroups); the driver's
//     RLIMIT_NPROC is the bound that does (docs/gvisor.md);
//   - cpuacct: every exec gets a child workload/exec-N there, which is how
//     a timeout finds and kills its whole tree, setsid and double forks
//     included.
//
// The agent needs CAP_SYS_ADMIN (its kernel's, not the host's) for the mounts;
// no exec has it: every process starts from a thread whose bounding set
// is empty (Serve, guest's reaper).
func MountOwnCgroups(dir string, pidsMax int64) ([]CgroupDir, error) {
	var out []CgroupDir
	for _, ctrl := range []string{"pids", "cpuacct"} {
		mnt := filepath.Join(dir, ctrl)
		if err := os.MkdirAll(mnt, 0o700); err != nil {
			return nil, err
		}
		if err := unix.Mount("cgroup", mnt, "cgroup", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ctrl); err != nil {
			return nil, fmt.Errorf("mounting the %s cgroup hierarchy: %w", ctrl, err)
		}
		work := filepath.Join(mnt, "workload")
		if err := os.Mkdir(work, 0o755); err != nil && !os.IsExist(err) {
			return nil, err
		}
		if ctrl == "pids" && pidsMax > 0 {
			if err := os.WriteFile(filepath.Join(work, "pids.max"), []byte(strconv.FormatInt(pidsMax, 10)), 0); err != nil {
				return nil, fmt.Errorf("pids.max: %w", err)
			}
		}
		workFD, err := unix.Open(work, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		homeFD, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, CgroupDir{FD: workFD, HomeFD: homeFD, NoChild: ctrl == "pids"})
	}
	return out, nil
}
