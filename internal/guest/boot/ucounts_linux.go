package boot

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
)

// Per-user kernel counts a sandbox could otherwise take from its
// neighbours and the host (docs/SECURITY.md, "Shared kernel resources").
// What a sandbox's processes count against a per-user limit is also
// counted, one level up, against the owner of its user namespace: the
// host uid of its range's root (launcher.StartOwned), which no other
// sandbox and no host user shares; with the host's root as owner, 128
// inotify_init() in one sandbox once left the host's root and every other
// sandbox with none. The init sets, in the sandbox's own user namespace,
// limits well under the host's (which the daemon raises:
// internal/daemon/hostlimits_linux.go), and the rlimits every sandbox
// process inherits for the counts that follow rlimits (POSIX message
// queue bytes, queued signals). A sandbox has two uids in practice (root
// and the template's user; setuid needs capabilities no sandbox process
// has), so its take is at most twice each figure. Namespace counts are
// left alone: seccomp refuses new namespaces to sandbox processes.
//
// The figures are the sandbox's user_limits (api.UserLimits, defaults
// api.DefaultUserLimits); fanotify needs CAP_SYS_ADMIN anyway and keeps
// fixed ones.
var fanotifyLimits = []struct {
	file  string
	value int64
}{
	{"max_fanotify_groups", 16},
	{"max_fanotify_marks", 8192},
}

// LimitUserNS writes l's inotify counts (and fanotify's) under
// /proc/sys/user (they apply to the calling process's user namespace:
// the sandbox's; in a microVM the guest kernel's own) and sets l's
// rlimits on the calling process, which every process it starts
// inherits. nil, or a field 0: the default.
//
// The container tier's init splits it: while it waits for a sandbox
// (Stage) it writes the default counts, and once given one (Prepare) it
// sets the rlimits, and writes the counts again only for a sandbox that
// asks for others: opening a file under /proc/sys/user walks the cached
// entries of every live user namespace (proc_sys_compare, about 1% of a
// create's CPU with 2,000 sandboxes alive). The rlimits wait for the
// sandbox because lowering a hard limit cannot be undone without
// CAP_SYS_RESOURCE on the host, which no init has. A kernel without a
// file skips it.
func LimitUserNS(l *api.UserLimits) error {
	if err := limitUserNSFiles(l); err != nil {
		return err
	}
	return setUserRlimits(l)
}

// limitUserNSFiles writes l's counts under /proc/sys/user.
func limitUserNSFiles(l *api.UserLimits) error {
	v := api.DefaultUserLimits.Over(l)
	files := append([]struct {
		file  string
		value int64
	}{{"max_inotify_instances", v.InotifyInstances}, {"max_inotify_watches", v.InotifyWatches}}, fanotifyLimits...)
	for _, f := range files {
		p := "/proc/sys/user/" + f.file
		err := os.WriteFile(p, []byte(strconv.FormatInt(f.value, 10)), 0o644)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("limiting %s in the sandbox's user namespace: %w", p, err)
		}
	}
	return nil
}

// setUserRlimits sets l's rlimits (hard and soft) on the calling process.
func setUserRlimits(l *api.UserLimits) error {
	v := api.DefaultUserLimits.Over(l)
	for _, r := range []struct {
		res int
		n   int64
	}{{unix.RLIMIT_MSGQUEUE, v.MsgqueueBytes}, {unix.RLIMIT_SIGPENDING, v.Sigpending}} {
		if err := unix.Setrlimit(r.res, &unix.Rlimit{Cur: uint64(r.n), Max: uint64(r.n)}); err != nil {
			return fmt.Errorf("setting rlimit %d: %w", r.res, err)
		}
	}
	return nil
}
