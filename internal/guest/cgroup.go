package guest

import (
	"bytes"
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
}

// cgroupSet makes and removes the per-exec child cgroups.
type cgroupSet struct {
	roots []cgroupRoot
	next  atomic.Uint64
	log   *slog.Logger

	// mu guards lingering: children whose exec ended while other
	// processes (started in the background) still lived in them.
	mu        sync.Mutex
	lingering []*execCgroup
}

type cgroupRoot struct {
	CgroupDir
}

func newCgroupSet(dirs []CgroupDir, log *slog.Logger) *cgroupSet {
	s := &cgroupSet{log: log}
	for _, d := range dirs {
		s.roots = append(s.roots, cgroupRoot{CgroupDir: d})
	}
	return s
}

// execCgroup is one exec's child cgroup, in every hierarchy of the set.
type execCgroup struct {
	set  *cgroupSet
	name string
	fds  []int // the child's dir fd in each root, same order as set.roots
}

// create makes the next exec-<n> child in every root.
func (s *cgroupSet) create() (*execCgroup, error) {
	c := &execCgroup{set: s, fds: make([]int, 0, len(s.roots))}
	for attempt := 0; ; attempt++ {
		c.name = "exec-" + strconv.FormatUint(s.next.Add(1), 10)
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
			c.fds = append(c.fds, -1)
			continue
		}
		err := unix.Mkdirat(r.FD, c.name, 0o755)
		if err == nil {
			var fd int
			fd, err = unix.Openat(r.FD, c.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err == nil {
				c.fds = append(c.fds, fd)
				continue
			}
			unix.Unlinkat(r.FD, c.name, unix.AT_REMOVEDIR)
		}
		// Undo the ones made so far.
		for j := 0; j < i; j++ {
			if c.fds[j] < 0 {
				continue
			}
			unix.Close(c.fds[j])
			unix.Unlinkat(c.set.roots[j].FD, c.name, unix.AT_REMOVEDIR)
		}
		c.fds = c.fds[:0]
		return fmt.Errorf("mkdir %s: %w", c.name, err)
	}
	return nil
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
		fd := c.fds[i]
		if r.NoChild {
			fd = r.FD
		}
		if err := writeAt(fd, "tasks", tid); err != nil {
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
		home := r.FD
		if r.HomeFD > 0 {
			home = r.HomeFD
		}
		if err := writeAt(home, "tasks", tid); err != nil {
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

// remove closes the child's fds and removes it. A child that still holds
// processes (the exec left background work behind) lingers, and is
// retried after later execs and killed at shutdown.
func (c *execCgroup) remove() {
	if c.rmdir() {
		return
	}
	c.set.mu.Lock()
	c.set.lingering = append(c.set.lingering, c)
	c.set.mu.Unlock()
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
		unix.Close(c.fds[i])
		c.fds[i] = -1
	}
	return gone
}

// sweep retries the removal of lingering children.
func (s *cgroupSet) sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.lingering[:0]
	for _, c := range s.lingering {
		if !c.rmdir() {
			kept = append(kept, c)
		}
	}
	clear(s.lingering[len(kept):])
	s.lingering = kept
}

// killLingering kills what is left in lingering children and removes them.
func (s *cgroupSet) killLingering() {
	s.mu.Lock()
	ls := s.lingering
	s.lingering = nil
	s.mu.Unlock()
	for _, c := range ls {
		if err := c.kill(); err != nil {
			s.log.Warn("killing background processes", "cgroup", c.name, "err", err)
		}
		c.remove()
	}
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
