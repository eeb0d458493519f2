package gvisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// The sandbox's MemTotal without runsc reading cgroups.
//
// runsc passes the Sentry its MemTotal (`runsc boot --total-memory`):
// the memory cgroup's limit when it reads cgroups, otherwise the host's
// MemTotal, which `runsc run` reads from /proc/meminfo. Reading cgroups
// costs a create about 9 ms (gvisor_memory_view, docs/sandbox-view.md);
// so by default `runsc run` starts in a mount namespace of its own in
// which /proc/meminfo is a file of the sandbox's run dir that says the
// sandbox's limit. Its sandbox and gofer processes make namespaces of
// their own from that one and pivot away from it, and it ends with
// `runsc run` (--detach), so nothing stays in it; it is a slave of the
// daemon's, so an unmount on the host (another sandbox's root) reaches
// it while it lives.

// writeMeminfo writes the file /proc/meminfo becomes for `runsc run`:
// the one line runsc reads (hostos.TotalSystemMemory).
func writeMeminfo(runDir string, bytes int64) (string, error) {
	path := filepath.Join(runDir, "meminfo")
	if err := os.WriteFile(path, fmt.Appendf(nil, "MemTotal:       %d kB\n", bytes>>10), 0o444); err != nil {
		return "", fmt.Errorf("gvisor: the sandbox's meminfo: %w", err)
	}
	return path, nil
}

var errMainThread = errors.New("gvisor: on the main thread, which must keep the daemon's mount namespace")

// startWithMeminfo starts cmd in a new mount namespace, a slave of the
// caller's, with meminfo bound over /proc/meminfo. The namespace is made
// on a thread of its own, which the cmd is forked from and which is
// never handed back to the runtime (its mount namespace is not the
// daemon's): it ends when this returns.
func startWithMeminfo(cmd *exec.Cmd, meminfo string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked
		errc <- func() error {
			if unix.Gettid() == unix.Getpid() {
				// The main thread cannot end, and /proc/self is its view:
				// it must keep the daemon's namespace (agentboxd locks
				// it to its main goroutine, so this is a test's binary).
				return errMainThread
			}
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("gvisor: a mount namespace for runsc run: %w", err)
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
				return fmt.Errorf("gvisor: a mount namespace for runsc run: %w", err)
			}
			if err := unix.Mount(meminfo, "/proc/meminfo", "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("gvisor: binding the sandbox's meminfo: %w", err)
			}
			return cmd.Start()
		}()
	}()
	return <-errc
}
