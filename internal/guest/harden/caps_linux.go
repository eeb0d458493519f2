package harden

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// NoNewPrivs sets no_new_privs on every thread of the process: no later
// execve can gain privileges (setuid bits, file capabilities). It cannot be
// undone, and children inherit it.
func NoNewPrivs() error {
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	return nil
}

// DropBoundingSetOnThread empties the capability bounding, ambient and
// inheritable sets of the calling thread, which keeps its effective and
// permitted sets (the agent still needs setuid, chown, kill): every
// program that thread forks and execs afterwards, even as uid 0, starts
// with empty CapEff, CapPrm, CapInh, CapBnd and CapAmb. It needs
// CAP_SETPCAP. It is a few plain prctl calls instead of one stop of the
// world per
// capability (42 of them cost ~2.5 ms and ~6 ms of CPU in a fresh
// process here, 40-100 ms inside gVisor). Children inherit the sets of
// the thread that forks them, so a process that calls it on its main
// thread and on every thread before that thread forks (holding it with
// runtime.LockOSThread until the fork is done) starts every child without
// capabilities, while its other threads, which never exec, keep theirs.
// Once done on a thread it returns after one prctl.
//
// The first call must come before anything else changed a thread's
// bounding set: it records the highest capability in it (boundingTop).
func DropBoundingSetOnThread() error {
	top := boundingTop()
	// The drops go in ascending order up to top, so top tells: once it
	// is out, this thread (or the one it was cloned from) went through
	// all of this, and nothing can put a capability back.
	if top >= 0 {
		if in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(top), 0, 0, 0); err == nil && in == 0 {
			return nil
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clearing the ambient capability set: %w", wrapErrno(err))
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("reading capabilities: %w", wrapErrno(err))
	}
	if data[0].Inheritable != 0 || data[1].Inheritable != 0 {
		data[0].Inheritable, data[1].Inheritable = 0, 0
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			return fmt.Errorf("clearing the inheritable capability set: %w", wrapErrno(err))
		}
	}
	for c := 0; c <= top; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, wrapErrno(err))
		}
	}
	return nil
}

// boundingTop is the highest capability in the bounding set of the first
// thread that asks, -1 if it is empty. It is not always the kernel's last
// one: a runtime may start the process with a partial set (gVisor's is
// the OCI spec's list), and a capability missing from it can never be
// added back, on any thread.
var boundingTop = sync.OnceValue(func() int {
	for c := lastCap(); c >= 0; c-- {
		if in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err == nil && in == 1 {
			return c
		}
	}
	return -1
})

// lastCap is the highest capability number this kernel knows.
var lastCap = sync.OnceValue(readLastCap)

func readLastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 && n < 64 {
			return n
		}
	}
	return unix.CAP_LAST_CAP
}

// allThreads runs one syscall on every thread of the process.
func allThreads(trap, a1, a2, a3 uintptr) error {
	_, _, e := syscall.AllThreadsSyscall(trap, a1, a2, a3)
	if e == 0 {
		return nil
	}
	if e == syscall.ENOTSUP {
		return fmt.Errorf("%w: the binary is linked with cgo, so the Go runtime cannot change every thread; build it with CGO_ENABLED=0",
			errNeedsNoCgo)
	}
	return wrapErrno(e)
}

// Errors. This package deliberately does not import errdefs: errdefs pulls
// in net/http and with it cgo whenever CGO_ENABLED=1, and AllThreadsSyscall
// refuses to run in a cgo binary, so the tests could not exercise the real
// thing. Its errors are fatal start-up errors of PID 1, never API errors.
var (
	errNeedsNoCgo = errors.New("cannot change every thread")
	errInternal   = errors.New("internal error")
)

// wrapErrno adds a hint to a raw errno.
func wrapErrno(err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w (the guest agent must run as root of its user namespace)", err)
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EINVAL):
		return fmt.Errorf("%w (the kernel lacks support)", err)
	}
	return err
}
