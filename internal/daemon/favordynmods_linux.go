package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Moving a process between cgroups takes the kernel's global
// cgroup_threadgroup_rwsem for writing, which by default first waits for
// an RCU grace period whenever no migration happened just before: every
// sandbox start (v1: the init is moved into its cgroups; every exec: into
// workload/exec-N) paid one, measured here at 10-14 ms at load average 20
// and 0.2 ms with the option below. The cgroup2 mount option favordynmods
// keeps the semaphore in the mode that makes migrations cheap, for every
// hierarchy (v1 included), at the cost of a slightly slower fork and exit
// path; systemd 254 and later mount cgroup2 with it by default. The
// daemon sets it on the host's cgroup2 mount when the config allows
// (cgroup_favordynmods, default true).

// cgroup2Mount returns the mount point of the first cgroup2 mount in a
// /proc/self/mountinfo text and whether it has favordynmods already.
func cgroup2Mount(mountinfo string) (dir string, has bool) {
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 || g[0] != "cgroup2" {
			continue
		}
		opts := "," + g[2] + ","
		if len(f) >= 6 {
			opts += f[5] + ","
		}
		return f[4], strings.Contains(opts, ",favordynmods,")
	}
	return "", false
}

// favorDynmods remounts the host's cgroup2 mount with favordynmods, if
// there is one and it lacks it. Failure only costs speed: it is logged.
func favorDynmods(log *slog.Logger) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	dir, has := cgroup2Mount(string(b))
	switch {
	case dir == "":
		log.Debug("no cgroup2 mount: cgroup migrations keep their RCU grace period (slower sandbox starts)")
	case has:
	default:
		if err := unix.Mount("", dir, "", unix.MS_REMOUNT, "favordynmods"); err != nil {
			log.Warn("could not set favordynmods on the cgroup2 mount; sandbox starts pay an RCU grace period each (set cgroup_favordynmods = false to silence)",
				"mount", dir, "err", fmt.Sprint(err))
			return
		}
		log.Info("cgroup2 mount remounted with favordynmods: cgroup migrations no longer wait for an RCU grace period", "mount", dir)
	}
}
