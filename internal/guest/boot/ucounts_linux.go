package boot

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Per-user kernel counts a sandbox could otherwise take from its
// neighbours and the host (docs/SECURITY.md, "Shared kernel resources").
// Every sandbox's user namespace is owned by the host's root, so what its
// processes count against a per-user limit is also counted, one level up,
// against root's: 128 inotify_init() in one sandbox left the host's root
// and every other sandbox with none. The init sets, in the sandbox's own
// user namespace, limits well under the host's (which the daemon raises:
// internal/daemon/hostlimits_linux.go), and the rlimits every sandbox
// process inherits for the counts that follow rlimits (POSIX message
// queue bytes, queued signals). A sandbox has two uids in practice (root
// and the template's user; setuid needs capabilities no sandbox process
// has), so its take is at most twice each figure. Namespace counts are
// left alone: seccomp refuses new namespaces to sandbox processes, and the
// init itself makes a cgroup namespace after this.
var userNSLimits = []struct {
	file  string
	value int
}{
	{"max_inotify_instances", 128}, // the host's default per user
	{"max_inotify_watches", 65536}, // a node dev server's watcher on a large tree
	{"max_fanotify_groups", 16},    // fanotify needs CAP_SYS_ADMIN anyway
	{"max_fanotify_marks", 8192},
}

// Rlimits of every sandbox process (hard and soft).
const (
	// SandboxMsgqueueBytes is RLIMIT_MSGQUEUE: an eighth of the kernel's
	// default per user (819,200 bytes).
	SandboxMsgqueueBytes = 102400
	// SandboxSigpending is RLIMIT_SIGPENDING.
	SandboxSigpending = 4096
)

// limitUserNS writes userNSLimits under /proc/sys/user (they apply to the
// calling process's user namespace: the sandbox's) and lowers the
// rlimits. It runs in the init before it drops its capabilities; a
// kernel without a file skips it.
func limitUserNS() error {
	for _, l := range userNSLimits {
		p := "/proc/sys/user/" + l.file
		err := os.WriteFile(p, []byte(strconv.Itoa(l.value)), 0o644)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("limiting %s in the sandbox's user namespace: %w", p, err)
		}
	}
	for _, r := range []struct {
		res int
		n   uint64
	}{{unix.RLIMIT_MSGQUEUE, SandboxMsgqueueBytes}, {unix.RLIMIT_SIGPENDING, SandboxSigpending}} {
		if err := unix.Setrlimit(r.res, &unix.Rlimit{Cur: r.n, Max: r.n}); err != nil {
			return fmt.Errorf("setting rlimit %d: %w", r.res, err)
		}
	}
	return nil
}
