package guest

import (
	"errors"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/guest/harden"
)

// The reaper owns every child of this process. When the agent is PID 1,
// orphans inside the sandbox re-parent to it and must be waited for, or
// they stay zombies forever; when it is not PID 1 (tests, or an init in
// front of it) it makes itself a child subreaper so that the same is true
// of its own descendants.
//
// Exec.Cmd.Wait cannot be used: one goroutine loops wait4(-1, WNOHANG) on
// every SIGCHLD, so any other waiter would race it. Processes are started
// with start, which holds mu across fork and registration, and the reaper
// takes mu before it looks a pid up: a child that exits before it is
// registered is still dispatched to its waiter, never dropped as an orphan.
//
// wait4(-1) is process-wide, so there is exactly one reaper per process,
// shared by every Server. Nothing else in the process may wait for
// children (no os/exec) once the first Server exists.
type reaper struct {
	// mu guards waiters; start holds it across fork and registration.
	mu      sync.Mutex
	waiters map[int]chan syscall.WaitStatus
}

var (
	procReaperOnce sync.Once
	procReaper     *reaper
)

// theReaper starts the process-wide reaper on first use.
func theReaper() *reaper {
	procReaperOnce.Do(func() {
		r := &reaper{waiters: make(map[int]chan syscall.WaitStatus)}
		if os.Getpid() != 1 {
			// Best effort: orphans of our execs come back to us and are
			// reaped here, as they would be under PID 1.
			_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
		}
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGCHLD)
		// Runs for the life of the process: the reaper is never stopped,
		// since children can exit at any time.
		go r.loop(sigs)
		procReaper = r
	})
	return procReaper
}

// loop reaps on every SIGCHLD. Signals coalesce, so each wake-up reaps
// until no exited child is left.
func (r *reaper) loop(sigs <-chan os.Signal) {
	for range sigs {
		r.reapAll()
	}
}

func (r *reaper) reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return // ECHILD or nothing more has exited
		}
		if !ws.Exited() && !ws.Signaled() {
			continue // stopped or continued: not an end
		}
		r.mu.Lock()
		ch, ok := r.waiters[pid]
		if ok {
			delete(r.waiters, pid)
		}
		r.mu.Unlock()
		if ok {
			ch <- ws // buffered: never blocks
		}
		// Unregistered: an orphan, or a child that failed to exec (Go's
		// ForkExec waits for those itself and tolerates ECHILD).
	}
}

// start forks and execs argv0 and registers the child under mu, returning
// its pid and the channel that receives its wait status exactly once. The
// fork happens on a thread whose capability bounding set is empty, so
// the child starts without capabilities whatever its uid (every process
// of a sandbox starts here).
func (r *reaper) start(argv0 string, argv []string, attr *syscall.ProcAttr) (int, <-chan syscall.WaitStatus, error) {
	runtime.LockOSThread() // the fork inherits this thread's sets
	defer runtime.UnlockOSThread()
	if err := harden.DropBoundingSetOnThread(); err != nil {
		return 0, nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	r.mu.Lock()
	pid, err := syscall.ForkExec(argv0, argv, attr)
	if err == nil {
		r.waiters[pid] = ch
	}
	r.mu.Unlock()
	if err != nil {
		return 0, nil, err
	}
	return pid, ch, nil
}
