package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/config"
)

// Host-wide tables no sandbox may fill, raised at start where the host
// keeps them low (docs/SECURITY.md, "Shared kernel resources"):
//
//   - fs.file-max, the global count of open files. Every open file's
//     struct file is charged to the memory cgroup of the process that
//     opened it (kernel memory accounting: always on cgroup v2, on v1
//     unless the kernel runs with cgroup.memory=nokmem), so a sandbox's
//     files are bounded by its memory limit; the global count is then
//     only a second, lower wall that one sandbox reached in seconds
//     (nofile 20,000 x pids 512 allows 10 M files, the default table held
//     2.4 M) and that refuses every host process once full. It goes to
//     the largest value the kernel takes, as systemd sets it.
//   - the per-user tables that every sandbox shares through its user
//     namespace's owner (the host's root) or its host uid (every
//     sandbox's root is the same host uid): fs.inotify.max_user_instances
//     and max_user_watches (each sandbox's own user namespace has lower
//     limits, set by its init: internal/guest/boot/ucounts_linux.go), and
//     fs.epoll.max_user_watches and fs.pipe-user-pages-soft, whose objects
//     are charged to the sandbox's memory cgroup like files. They go up to
//     room for hundreds of sandboxes at their limits, no limit for the
//     last two.
//   - kernel.pid_max, the pid space. It goes to the kernel's most
//     (4,194,304 on 64-bit), and start fails while limits.pids is more
//     than pidShare of it: one sandbox at its limit, or a few dozen at
//     the default, would otherwise take every pid of the host.
const (
	fileMaxPath = "/proc/sys/fs/file-max"
	fileMaxWant = "9223372036854775807"
	pidMaxPath  = "/proc/sys/kernel/pid_max"
	pidMaxWant  = 4194304
	// pidShare: limits.pids may be at most 1/pidShare of pid_max.
	pidShare = 8
)

// perUserTables are the per-user sysctls raised at start, to at least
// want (0 for pipe-user-pages-soft means no limit).
var perUserTables = []struct {
	path string
	want int64
}{
	{"/proc/sys/fs/inotify/max_user_instances", 1 << 17}, // 512 sandboxes x 2 uids x 128
	{"/proc/sys/fs/inotify/max_user_watches", 1 << 24},   // 128 sandboxes x 2 uids x 65536
	{"/proc/sys/fs/epoll/max_user_watches", 1 << 40},
}

// raiseHostLimits raises fs.file-max, kernel.pid_max and the per-user
// tables where they are lower than agentbox needs and checks limits.pids
// against pid_max.
func raiseHostLimits(cfg *config.Config, log *slog.Logger) error {
	for _, p := range perUserTables {
		if n, err := readSysctl(p.path); err == nil && n < p.want {
			if err := os.WriteFile(p.path, []byte(strconv.FormatInt(p.want, 10)), 0o644); err != nil {
				log.Warn("cannot raise a per-user limit that sandboxes share", "sysctl", p.path, "value", n, "err", err)
			}
		}
	}
	if n, err := readSysctl("/proc/sys/fs/pipe-user-pages-soft"); err == nil && n != 0 {
		if err := os.WriteFile("/proc/sys/fs/pipe-user-pages-soft", []byte("0"), 0o644); err != nil {
			log.Warn("cannot lift fs.pipe-user-pages-soft: one sandbox's pipes shrink its neighbours'", "err", err)
		}
	}
	if n, err := readSysctl(fileMaxPath); err == nil && strconv.FormatInt(n, 10) != fileMaxWant {
		if err := os.WriteFile(fileMaxPath, []byte(fileMaxWant), 0o644); err != nil {
			log.Warn("cannot raise fs.file-max: a sandbox can fill the host's file table", "file_max", n, "err", err)
		} else {
			log.Info("raised fs.file-max (each sandbox's open files count against its memory limit)", "from", n)
		}
	}
	pidMax, err := readSysctl(pidMaxPath)
	if err != nil {
		return fmt.Errorf("reading kernel.pid_max: %w", err)
	}
	if pidMax < pidMaxWant {
		if err := os.WriteFile(pidMaxPath, []byte(strconv.Itoa(pidMaxWant)), 0o644); err != nil {
			log.Warn("cannot raise kernel.pid_max", "pid_max", pidMax, "err", err)
		} else {
			log.Info("raised kernel.pid_max", "from", pidMax, "to", pidMaxWant)
			pidMax = pidMaxWant
		}
	}
	if cfg.Limits.Pids > pidMax/pidShare {
		return fmt.Errorf("limits.pids (%d) is more than 1/%d of the host's kernel.pid_max (%d): one sandbox could take the host's pids; lower limits.pids to at most %d or raise kernel.pid_max",
			cfg.Limits.Pids, pidShare, pidMax, pidMax/pidShare)
	}
	return nil
}

func readSysctl(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
