package gvisorserve

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/guest"
)

// sandboxCgroups mounts two v1 hierarchies of the runtime kernel's own
// cgroupfs (gVisor implements one) under dir, each with a "workload"
// child below the agent:
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
// The agent needs CAP_SYS_ADMIN (gVisor's, not the host's) for the mounts;
// no exec has it: every process starts from a thread whose bounding set
// is empty (Serve, guest's reaper).
func sandboxCgroups(dir string, pidsMax int64) ([]guest.CgroupDir, error) {
	var out []guest.CgroupDir
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
		out = append(out, guest.CgroupDir{FD: workFD, HomeFD: homeFD, NoChild: ctrl == "pids"})
	}
	return out, nil
}
