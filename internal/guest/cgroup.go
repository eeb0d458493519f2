package guest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/errdefs"
)

// CgroupDir is one cgroup directory of the sandbox (its own cgroup, in one
// hierarchy) under which the guest makes a child cgroup per exec, so that a
// timeout can kill the exec's whole process tree, double forks and setsid
// included.
type CgroupDir struct {
	// FD is an O_DIRECTORY fd of the directory, writable by the agent.
	// The Server does not close it. On v1 the agent itself is expected to
	// live in this directory: the thread that starts an exec goes into the
	// exec's child for the fork and then back here.
	FD int
	// V2 says the directory is on the unified (v2) hierarchy.
	V2 bool
	// Freezer says the directory is on the v1 freezer hierarchy.
	Freezer bool
	// NoChild says execs go into FD's directory itself rather than a
	// per-exec child (v1 memory and cpu: the workload's limits apply, and
	// a child per exec would only cost time).
	NoChild bool
	// HomeFD, when > 0, is the agent's own cgroup in this hierarchy, where
	// the forking thread returns after an exec started (v1). The agent
	// lives above the workload so that the workload's pids and memory
	// limits cannot starve or OOM-kill it. 0 means FD.
	HomeFD int
	// CPU says the sandbox's CPU limit is here: v1, the cpu hierarchy
	// (in HomeFD); v2, the parent of FD and HomeFD. Execs' environments
	// then say it (cpus.go).
	CPU bool
}

// cgroupSet makes and removes the per-exec child cgroups. Making one
// (a mkdir in each hierarchy) and removing it cost about as much as the
// fork itself, so both happen off the exec's path (cgroup_pool.go): an
// exec takes a child made ahead of time, and the child of an exec that
// ended is removed in the background.
type cgroupSet struct {
	roots []cgroupRoot
	// tag is this agent's own part of its children's names
	// (exec-<tag>-<n>). A reset in place (drivers/container Promote)
	// starts the next agent in the same cgroups while the old one's
	// children are removed by name once it is gone; with a tag of its own
	// the next agent never makes a child under a name on that list.
	tag  string
	next atomic.Uint64
	log  *slog.Logger

	// mu guards the fields below; idle is broadcast, with mu held, when
	// the tidy goroutine ends.
	mu   sync.Mutex
	idle sync.Cond
	// ready: made ahead, never used. done: ended execs' children, to be
	// removed. lingering: children whose exec ended while other processes
	// (started in the background) still lived in them.
	ready     []*execCgroup
	done      []*execCgroup
	lingering []*execCgroup
	tidying   bool // the tidy goroutine runs
	closed    bool // close was called: nothing more is made ahead
}

// cgroupRoot is one hierarchy of the set, with the tasks files the
// starting thread is written to kept open for the life of the agent: an
// open and close per move cost as much as the move itself.
type cgroupRoot struct {
	CgroupDir
	// tasks is FD's tasks file where execs go into FD itself (NoChild),
	// homeTasks the tasks file the thread returns to; -1 where unused
	// (v2) or where it could not be opened (the moves then fail).
	tasks, homeTasks int
}

func newCgroupSet(dirs []CgroupDir, log *slog.Logger) *cgroupSet {
	var b [4]byte
	_, _ = rand.Read(b[:])
	s := &cgroupSet{log: log, tag: hex.EncodeToString(b[:])}
	s.idle.L = &s.mu
	for _, d := range dirs {
		r := cgroupRoot{CgroupDir: d, tasks: -1, homeTasks: -1}
		if !d.V2 {
			home := d.FD
			if d.HomeFD > 0 {
				home = d.HomeFD
			}
			r.homeTasks = openTasks(home, log)
			if d.NoChild {
				r.tasks = openTasks(d.FD, log)
			}
		}
		s.roots = append(s.roots, r)
	}
	return s
}

// openTasks opens dir's tasks file for writing, or returns -1.
func openTasks(dir int, log *slog.Logger) int {
	fd, err := unix.Openat(dir, "tasks", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		log.Warn("opening a cgroup tasks file: execs will fail to start", "err", err)
		return -1
	}
	return fd
}

// execCgroup is one exec's child cgroup, in every hierarchy of the set.
type execCgroup struct {
	set  *cgroupSet
	name string
	fds  []int // the child's dir fd in each root, same order as set.roots
	// tasks is the child's tasks file in each v1 root, -1 elsewhere.
	tasks []int
	// out, when not nil, is closed once the thread that started the exec
	// has left the child (startV1).
	out chan struct{}
}

// waitOut waits until no thread of the agent is in the child.
func (c *execCgroup) waitOut() {
	if c.out != nil {
		<-c.out
	}
}

// create makes the next exec-<tag>-<n> child in every root.
func (s *cgroupSet) create() (*execCgroup, error) {
	c := &execCgroup{set: s, fds: make([]int, 0, len(s.roots)), tasks: make([]int, 0, len(s.roots))}
	for attempt := 0; ; attempt++ {
		c.name = "exec-" + s.tag + "-" + strconv.FormatUint(s.next.Add(1), 10)
		err := c.mkdirs()
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, unix.EEXIST) || attempt == 8 {
			return nil, errdefs.New(errdefs.ErrInternal, "creating cgroup for exec: %v", err)
		}
		// A leftover of an earlier agent: take another number.
	}
}

func (c *execCgroup) mkdirs() error {
	for i, r := range c.set.roots {
		if r.NoChild {
			c.fds, c.tasks = append(c.fds, -1), append(c.tasks, -1)
			continue
		}
		fd, tasks, err := mkdirAt(r.FD, c.name, !r.V2)
		if err == nil {
			c.fds, c.tasks = append(c.fds, fd), append(c.tasks, tasks)
			continue
		}
		// Undo the ones made so far.
		for j := 0; j < i; j++ {
			if c.fds[j] < 0 {
				continue
			}
			closeFD(c.tasks[j])
			unix.Close(c.fds[j])
			unix.Unlinkat(c.set.roots[j].FD, c.name, unix.AT_REMOVEDIR)
		}
		c.fds, c.tasks = c.fds[:0], c.tasks[:0]
		return fmt.Errorf("mkdir %s: %w", c.name, err)
	}
	return nil
}

// mkdirAt makes the child name in dir and opens it, and with v1 its tasks
// file; on error nothing is left made.
func mkdirAt(dir int, name string, v1 bool) (fd, tasks int, err error) {
	if err := unix.Mkdirat(dir, name, 0o755); err != nil {
		return -1, -1, err
	}
	tasks = -1
	fd, err = unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == nil && v1 {
		if tasks, err = unix.Openat(fd, "tasks", unix.O_WRONLY|unix.O_CLOEXEC, 0); err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
		return -1, -1, err
	}
	return fd, tasks, nil
}

func closeFD(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

// v2FD returns the child's fd on the v2 hierarchy, for CLONE_INTO_CGROUP.
func (c *execCgroup) v2FD() (int, bool) {
	for i, r := range c.set.roots {
		if r.V2 {
			return c.fds[i], true
		}
	}
	return -1, false
}

// hasV1 says whether starting needs the v1 thread move.
func (c *execCgroup) hasV1() bool {
	for _, r := range c.set.roots {
		if !r.V2 {
			return true
		}
	}
	return false
}

// enterV1 moves the calling thread (locked to its goroutine by the caller)
// into the child on every v1 hierarchy: v1 moves single threads, and a
// fork from this thread starts inside the child. leaveV1 moves it back.
func (c *execCgroup) enterV1(tid []byte) error {
	for i, r := range c.set.roots {
		if r.V2 {
			continue
		}
		fd := c.tasks[i]
		if r.NoChild {
			fd = r.tasks
		}
		if _, err := unix.Write(fd, tid); err != nil {
			return fmt.Errorf("moving thread into cgroup %s: %w", c.name, err)
		}
	}
	return nil
}

func (c *execCgroup) leaveV1(tid []byte) error {
	var errs []error
	for _, r := range c.set.roots {
		if r.V2 {
			continue
		}
		if _, err := unix.Write(r.homeTasks, tid); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// procs lists the processes in the child on every hierarchy, without this
// process itself (a thread of ours that failed to move back must not
// make us kill ourselves).
func (c *execCgroup) procs(buf []byte) ([]int, []byte) {
	self := unix.Getpid()
	var pids []int
	for _, fd := range c.fds {
		var err error
		buf, err = readAt(fd, "cgroup.procs", buf[:0])
		if err != nil {
			continue
		}
		for _, f := range bytes.Fields(buf) {
			pid, err := strconv.Atoi(string(f))
			if err == nil && pid != self {
				pids = append(pids, pid)
			}
		}
	}
	return pids, buf
}

// kill kills every process in the child and returns once it is empty:
// cgroup.kill where the kernel has it (v2), else freeze, SIGKILL every
// listed pid, thaw, and again until nothing is left. Freezing first means
// nothing forks between listing and killing.
func (c *execCgroup) kill() error {
	c.waitOut() // freezing the child must not freeze our own thread
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 0, 512)
	var pids []int
	for round := 0; ; round++ {
		pids, buf = c.procs(buf)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has %d processes after 10s of killing", c.name, len(pids))
		}
		if !c.killV2() {
			c.freeze(true)
			pids, buf = c.procs(buf)
			for _, pid := range pids {
				unix.Kill(pid, unix.SIGKILL)
			}
			c.freeze(false)
		}
		// Killed processes take a moment to leave; wait a little for that
		// before another round. This is the timeout path, not the hot one.
		for wait := 100 * time.Microsecond; wait < 50*time.Millisecond; wait *= 2 {
			time.Sleep(wait)
			if pids, buf = c.procs(buf); len(pids) == 0 {
				return nil
			}
		}
	}
}

// killV2 writes cgroup.kill on the v2 hierarchy; false where there is none.
func (c *execCgroup) killV2() bool {
	for i, r := range c.set.roots {
		if r.V2 && writeAt(c.fds[i], "cgroup.kill", []byte("1")) == nil {
			return true
		}
	}
	return false
}

// freeze freezes (or thaws) the child where a freezer is available, and
// waits a bounded time for a freeze to complete.
func (c *execCgroup) freeze(on bool) {
	for i, r := range c.set.roots {
		switch {
		case r.V2:
			v := []byte("0")
			if on {
				v = []byte("1")
			}
			if writeAt(c.fds[i], "cgroup.freeze", v) != nil || !on {
				continue
			}
			waitFor(func(b []byte) bool { return bytes.Contains(b, []byte("frozen 1")) }, c.fds[i], "cgroup.events")
		case r.Freezer:
			v := []byte("THAWED")
			if on {
				v = []byte("FROZEN")
			}
			if writeAt(c.fds[i], "freezer.state", v) != nil || !on {
				continue
			}
			waitFor(func(b []byte) bool { return bytes.HasPrefix(b, []byte("FROZEN")) }, c.fds[i], "freezer.state")
		}
	}
}

// waitFor polls file in dir until done says yes, for at most 100 ms.
func waitFor(done func([]byte) bool, dir int, file string) {
	var buf []byte
	for wait := 50 * time.Microsecond; wait < 100*time.Millisecond; wait *= 2 {
		var err error
		if buf, err = readAt(dir, file, buf[:0]); err != nil || done(buf) {
			return
		}
		time.Sleep(wait)
	}
}

// rmdir removes the child from every hierarchy where it is still there;
// true once it is gone everywhere.
func (c *execCgroup) rmdir() bool {
	gone := true
	for i, r := range c.set.roots {
		if c.fds[i] < 0 {
			continue
		}
		err := unix.Unlinkat(r.FD, c.name, unix.AT_REMOVEDIR)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			gone = false
			continue
		}
		closeFD(c.tasks[i])
		unix.Close(c.fds[i])
		c.fds[i], c.tasks[i] = -1, -1
	}
	return gone
}

func writeAt(dir int, file string, data []byte) error {
	fd, err := unix.Openat(dir, file, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Write(fd, data)
	return err
}

func readAt(dir int, file string, buf []byte) ([]byte, error) {
	if dir < 0 {
		return buf, unix.EBADF
	}
	fd, err := unix.Openat(dir, file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return buf, err
	}
	defer unix.Close(fd)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if n > 0 {
			buf = buf[:len(buf)+n]
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return buf, err
		}
	}
}
