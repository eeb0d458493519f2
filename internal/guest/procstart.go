package guest

import (
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/errdefs"
)

// startOn starts sp with the given stdin, stdout and stderr fds (a
// terminal, for PTY sessions) in its own cgroup, like start does for
// pipes. With ctty the child's stdin becomes its controlling terminal
// (setsid + TIOCSCTTY), so that the terminal's signals (Ctrl-C) reach its
// foreground process group. A program that cannot be run is an error
// here, with its shell-style message.
func (s *Server) startOn(sp *execSpec, files [3]int, ctty bool) (*proc, error) {
	p := &proc{killDone: make(chan struct{}), oomBefore: s.oom.count()}
	var cg *execCgroup
	if s.cgroups != nil {
		var err error
		if cg, err = s.cgroups.take(); err != nil {
			return nil, err
		}
		p.cg = cg
	}
	dir := sp.cwd
	if s.procFD {
		dir = "/proc/self/fd/" + strconv.Itoa(sp.dirFD)
	}
	sys := &syscall.SysProcAttr{Setsid: true, Setctty: ctty, Ctty: 0, Credential: sp.cred}
	if cg != nil {
		if fd, ok := cg.v2FD(); ok {
			sys.UseCgroupFD, sys.CgroupFD = true, fd
		}
	}
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   sp.env,
		Files: []uintptr{uintptr(files[0]), uintptr(files[1]), uintptr(files[2])},
		Sys:   sys,
	}
	var (
		exited <-chan syscall.WaitStatus
		err    error
	)
	if cg != nil && cg.hasV1() {
		p.pid, exited, err = s.startV1(cg, sp, attr)
	} else {
		p.pid, exited, err = s.reaper.start(sp.argv0, sp.argv, attr)
	}
	if err != nil {
		if cg != nil {
			s.cgroups.release(cg)
		}
		switch {
		case errors.Is(err, unix.ENOENT):
			return nil, errdefs.Invalid("%s: no such file or directory (or its interpreter is missing); install it or pass its absolute path", sp.argv0)
		case errors.Is(err, unix.EACCES), errors.Is(err, unix.ENOEXEC), errors.Is(err, unix.EISDIR), errors.Is(err, unix.EPERM):
			return nil, errdefs.Invalid("%s: cannot execute: %v", sp.argv0, err)
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.ENOMEM):
			return nil, errdefs.Exhausted("starting %s: %v; the sandbox is at its process or memory limit, end some processes or raise the limit", sp.argv0, err)
		}
		return nil, fmt.Errorf("starting %s: %w", sp.argv0, err)
	}
	p.started = time.Now()
	p.exited = exited
	return p, nil
}

// signalByName parses a signal given as a name ("SIGINT", "int") or a
// number (JSON number or string).
func signalByName(v any) (unix.Signal, error) {
	var n int
	switch x := v.(type) {
	case float64:
		n = int(x)
		if float64(n) != x {
			return 0, errdefs.Invalid("signal %v is not a whole number", x)
		}
	case string:
		if i, err := strconv.Atoi(x); err == nil {
			n = i
			break
		}
		name := x
		if len(name) < 3 || (name[:3] != "SIG" && name[:3] != "sig") {
			name = "SIG" + name
		}
		sig := unix.SignalNum(upper(name))
		if sig == 0 {
			return 0, errdefs.Invalid("unknown signal %q; use a name like SIGTERM or INT, or a number", x)
		}
		return sig, nil
	case nil:
		return unix.SIGTERM, nil
	default:
		return 0, errdefs.Invalid("signal must be a name or a number, got %T", v)
	}
	if n < 1 || n > 64 {
		return 0, errdefs.Invalid("signal number must be between 1 and 64, got %d", n)
	}
	return unix.Signal(n), nil
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// signalTree sends sig to p: to every process of its cgroup with tree
// (else its process group), or to p's own pid.
func signalTree(p *proc, sig unix.Signal, tree bool) error {
	if !tree {
		return unix.Kill(p.pid, sig)
	}
	if p.cg != nil {
		pids, _ := p.cg.procs(make([]byte, 0, 512))
		if len(pids) > 0 {
			for _, pid := range pids {
				unix.Kill(pid, sig)
			}
			return nil
		}
	}
	return unix.Kill(-p.pid, sig)
}
