package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/guest"
)

// servePidsEnv is the sandbox's pids limit (set by the driver).
const servePidsEnv = "AGENTBOX_PIDS_MAX"

// sandboxCgroups mounts the runtime kernel's own v1 pids hierarchy (gVisor
// implements cgroupfs) at dir and makes a "workload" child limited to
// pidsMax, under which every exec gets a child cgroup: a timeout then
// kills an exec's whole tree, and a fork bomb stops at the limit, while
// the agent stays in the root above it.
func sandboxCgroups(dir string, pidsMax int64) ([]guest.CgroupDir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := unix.Mount("cgroup", dir, "cgroup", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "pids"); err != nil {
		return nil, fmt.Errorf("mounting the pids cgroup hierarchy: %w", err)
	}
	// The agent had CAP_SYS_ADMIN (in gVisor's kernel) only for that
	// mount: no exec gets it.
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, unix.CAP_SYS_ADMIN, 0); e != 0 {
		return nil, fmt.Errorf("dropping CAP_SYS_ADMIN from the bounding set: %w", e)
	}
	work := filepath.Join(dir, "workload")
	if err := os.Mkdir(work, 0o755); err != nil && !os.IsExist(err) {
		return nil, err
	}
	if pidsMax > 0 {
		if err := os.WriteFile(filepath.Join(work, "pids.max"), []byte(strconv.FormatInt(pidsMax, 10)), 0); err != nil {
			return nil, fmt.Errorf("pids.max: %w", err)
		}
	}
	workFD, err := unix.Open(work, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	homeFD, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return []guest.CgroupDir{{FD: workFD, HomeFD: homeFD}}, nil
}
