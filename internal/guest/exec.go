package guest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/users"
)

// Output caps: a buffered exec keeps at most this much of each stream
// unless the request says otherwise; a streaming one is unlimited.
const defaultBufferedMax = 16 << 20

// outputGrace is how long an exec waits, after its main process exited,
// for the rest of its output: a background process that inherited stdout
// or stderr may hold the pipe open forever. After it, the pipes are closed
// (a later write there gets EPIPE).
const outputGrace = 100 * time.Millisecond

// pipeCap is the kernel's default pipe capacity: stdin up to this size is
// written before the start, without a writer goroutine.
const pipeCap = 64 << 10

// execSpec is a validated exec request, resolved and ready to start.
type execSpec struct {
	argv0 string
	argv  []string
	env   []string
	cwd   string
	// dirFD is the verified cwd, an O_PATH fd the child enters through
	// /proc/self/fd: no path is resolved again after the check.
	dirFD   int
	cred    *syscall.Credential
	timeout time.Duration
	maxOut  int64 // per stream; 0: unlimited

	// notFound, when set, is the message of a program that cannot be
	// run, and notFoundCode its shell-style exit code (127 or 126).
	notFound     string
	notFoundCode int
}

func (sp *execSpec) close() {
	if sp.dirFD >= 0 {
		unix.Close(sp.dirFD)
		sp.dirFD = -1
	}
}

// validate checks what can be checked without touching the system.
func validate(req *api.ExecRequest, streaming bool) error {
	switch {
	case len(req.Cmd) == 0 && req.Shell == "":
		return errdefs.Invalid("exec needs cmd or shell, got neither")
	case len(req.Cmd) > 0 && req.Shell != "":
		return errdefs.Invalid("exec takes cmd or shell, not both; put the whole command line in shell or split it into cmd")
	case len(req.Cmd) > 0 && req.Cmd[0] == "":
		return errdefs.Invalid("cmd[0] must name a program, got an empty string")
	case strings.IndexByte(req.Shell, 0) >= 0:
		return errdefs.Invalid("shell contains a NUL byte; remove it")
	case req.TimeoutMs < 0:
		return errdefs.Invalid("timeout_ms must be 0 (none) or positive, got %d", req.TimeoutMs)
	case req.MaxOutputBytes < 0:
		return errdefs.Invalid("max_output_bytes must be 0 (default) or positive, got %d", req.MaxOutputBytes)
	case req.StdinStream && !streaming:
		return errdefs.Invalid("stdin_stream needs POST /exec/stream; for POST /exec send the input in stdin")
	case req.StdinStream && len(req.Stdin) > 0:
		return errdefs.Invalid("exec takes stdin or stdin_stream, not both")
	case req.Cwd != "" && !filepath.IsAbs(req.Cwd):
		return errdefs.Invalid("cwd must be an absolute path, got %q", req.Cwd)
	case strings.IndexByte(req.Cwd, 0) >= 0:
		return errdefs.Invalid("cwd contains a NUL byte; remove it")
	}
	for i, a := range req.Cmd {
		if strings.IndexByte(a, 0) >= 0 {
			return errdefs.Invalid("cmd[%d] contains a NUL byte; remove it", i)
		}
	}
	return nil
}

// prepare validates req and resolves its user, environment, cwd and
// program. The caller closes the spec.
func (s *Server) prepare(req *api.ExecRequest, streaming bool) (*execSpec, error) {
	if err := validate(req, streaming); err != nil {
		return nil, err
	}
	name := req.User
	if name == "" {
		name = s.cfg.User
	}
	u, err := users.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("resolving user: %w", err)
	}
	env, err := buildEnv(s.defaultEnv(), req.Env, u)
	if err != nil {
		return nil, err
	}
	sp := &execSpec{env: env, dirFD: -1, maxOut: req.MaxOutputBytes}
	sp.timeout = time.Duration(req.TimeoutMs) * time.Millisecond
	if sp.maxOut == 0 && !streaming {
		sp.maxOut = defaultBufferedMax
	}
	groups := make([]uint32, len(u.Groups))
	for i, g := range u.Groups {
		groups[i] = uint32(g)
	}
	sp.cred = &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), Groups: groups}

	if err := sp.openCwd(req.Cwd, s.cfg.Workdir, u); err != nil {
		return nil, err
	}
	if req.Shell != "" {
		sp.argv0, sp.argv = "/bin/sh", []string{"/bin/sh", "-c", req.Shell}
	} else {
		sp.argv = req.Cmd
		sp.argv0 = req.Cmd[0]
		if !strings.Contains(sp.argv0, "/") {
			path := lookupEnv(env, "PATH")
			p, ok := lookPath(sp.argv0, path)
			if !ok {
				sp.notFound = fmt.Sprintf("agentbox: %s: command not found in PATH (%s); install it or pass its absolute path\n", sp.argv0, path)
				sp.notFoundCode = 127
			}
			sp.argv0 = p
		}
	}
	return sp, nil
}

// openCwd picks the exec's cwd (the request's, else the sandbox's workdir,
// else the user's home if it exists, else /), opens it without following
// magic links (a cwd through /proc/*/fd, /proc/*/cwd or /proc/*/root is
// how runc's CVE-2024-21626 leaked host directories), and checks that the
// user may enter it.
func (sp *execSpec) openCwd(reqCwd, workdir string, u users.User) error {
	// Without an explicit cwd, try the sandbox's workdir, then the user's
	// home, then /, taking the first that exists and the user may enter
	// (the template's workdir is often root's home, closed to others).
	if reqCwd == "" {
		for _, c := range []string{workdir, u.Home, "/"} {
			if c == "" {
				continue
			}
			fd, err := openDir(c)
			if err != nil {
				continue
			}
			var st unix.Stat_t
			if unix.Fstat(fd, &st) == nil && mayEnter(&st, sp.cred) {
				sp.cwd, sp.dirFD = c, fd
				return nil
			}
			unix.Close(fd)
		}
		return errdefs.Invalid("no usable working directory for uid %d; pass cwd", sp.cred.Uid)
	}
	cwd := reqCwd
	fd, err := openDir(cwd)
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOENT):
			return errdefs.Invalid("cwd %q does not exist; create it first or pick another directory", cwd)
		case errors.Is(err, unix.ENOTDIR):
			return errdefs.Invalid("cwd %q is not a directory", cwd)
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
			return errdefs.Invalid("cwd %q goes through a /proc magic link (or a symlink loop); use a real directory path", cwd)
		default:
			return errdefs.Invalid("cwd %q cannot be opened: %v", cwd, err)
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return fmt.Errorf("stat of cwd %q: %w", cwd, err)
	}
	if !mayEnter(&st, sp.cred) {
		unix.Close(fd)
		return errdefs.New(errdefs.ErrPermissionDenied, "uid %d may not enter cwd %q (mode %04o, owner %d:%d); pick a directory that user can use",
			sp.cred.Uid, cwd, st.Mode&0o7777, st.Uid, st.Gid)
	}
	sp.cwd, sp.dirFD = cwd, fd
	return nil
}

func openDir(path string) (int, error) {
	for {
		fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_NO_MAGICLINKS,
		})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// mayEnter is the search-permission check the kernel makes on chdir, from
// the mode bits (ACLs aside), so that a refusal is reported as a cwd
// problem rather than as an exec failure.
func mayEnter(st *unix.Stat_t, c *syscall.Credential) bool {
	switch {
	case c.Uid == 0:
		return true
	case st.Uid == c.Uid:
		return st.Mode&0o100 != 0
	case st.Gid == c.Gid:
		return st.Mode&0o010 != 0
	}
	for _, g := range c.Groups {
		if g == st.Gid {
			return st.Mode&0o010 != 0
		}
	}
	return st.Mode&0o001 != 0
}

// lookPath finds a program name in PATH the way execvp does (empty PATH
// entries are skipped rather than meaning the cwd).
func lookPath(name, path string) (string, bool) {
	for dir := range strings.SplitSeq(path, ":") {
		if dir == "" {
			continue
		}
		p := dir + "/" + name
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0 {
			return p, true
		}
	}
	return name, false
}

// proc is one started exec.
type proc struct {
	pid     int
	started time.Time
	exited  <-chan syscall.WaitStatus
	// stdout and stderr are the parent's read ends, non-blocking (they use
	// the runtime's poller, so a deadline can cut them).
	stdout, stderr *os.File
	// stdin is the parent's write end when input is streamed or too big
	// to pre-write; nil otherwise.
	stdin *os.File
	cg    *execCgroup
	// oomBefore is the sandbox's OOM kill count when p started; -1:
	// unknown (oom.go).
	oomBefore int64

	killOnce sync.Once
	killDone chan struct{}
}

// stdinSource says where the child's stdin comes from.
type stdinSource struct {
	data   []byte // written in full, then EOF
	stream bool   // the caller writes p.stdin
}

// start starts sp. A program that could not be found is not an error
// here: see notFound. Errors from fork or exec are classified:
// ENOENT -> 127 and EACCES/ENOEXEC -> 126 (shell conventions, with a
// message on stderr), EAGAIN/ENOMEM -> resource exhausted.
func (s *Server) start(sp *execSpec, in stdinSource) (p *proc, err error) {
	var cu cleanup
	defer cu.run()

	p = &proc{killDone: make(chan struct{}), oomBefore: s.oom.count()}
	var outR, outW, errR, errW int
	if outR, outW, err = pipe(true); err != nil {
		return nil, err
	}
	cu.add(func() { unix.Close(outR) })
	defer unix.Close(outW)
	if errR, errW, err = pipe(true); err != nil {
		return nil, err
	}
	cu.add(func() { unix.Close(errR) })
	defer unix.Close(errW)

	stdinFD := s.devNull
	switch {
	case in.stream || len(in.data) > pipeCap:
		r, w, err := pipe(false)
		if err != nil {
			return nil, err
		}
		defer unix.Close(r)
		stdin := os.NewFile(uintptr(w), "stdin")
		p.stdin = stdin
		cu.add(func() { stdin.Close() })
		stdinFD = r
	case len(in.data) > 0:
		r, w, err := pipe(false)
		if err != nil {
			return nil, err
		}
		defer unix.Close(r)
		_, werr := unix.Write(w, in.data) // fits in the empty pipe
		unix.Close(w)
		if werr != nil {
			return nil, fmt.Errorf("writing stdin: %w", werr)
		}
		stdinFD = r
	case stdinFD < 0:
		// No /dev/null in this root: an empty pipe gives EOF the same way.
		r, w, err := pipe(false)
		if err != nil {
			return nil, err
		}
		unix.Close(w)
		defer unix.Close(r)
		stdinFD = r
	}

	if s.cgroups != nil {
		cg, err := s.cgroups.take()
		if err != nil {
			return nil, err
		}
		// Not p.cg in the closure: p is the named result, nil by the time
		// an error return runs the cleanup.
		p.cg = cg
		cu.add(func() { s.cgroups.release(cg) })
	}

	dir := sp.cwd
	if s.procFD {
		dir = "/proc/self/fd/" + strconv.Itoa(sp.dirFD)
	}
	sys := &syscall.SysProcAttr{Setsid: true, Credential: sp.cred}
	if p.cg != nil {
		if fd, ok := p.cg.v2FD(); ok {
			sys.UseCgroupFD, sys.CgroupFD = true, fd
		}
	}
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   sp.env,
		Files: []uintptr{uintptr(stdinFD), uintptr(outW), uintptr(errW)},
		Sys:   sys,
	}

	var exited <-chan syscall.WaitStatus
	if p.cg != nil && p.cg.hasV1() {
		p.pid, exited, err = s.startV1(p.cg, sp, attr)
	} else {
		p.pid, exited, err = s.reaper.start(sp.argv0, sp.argv, attr)
	}
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOENT):
			sp.notFound, sp.notFoundCode = fmt.Sprintf("agentbox: %s: no such file or directory (or its interpreter is missing)\n", sp.argv0), 127
			return nil, nil
		case errors.Is(err, unix.EACCES), errors.Is(err, unix.ENOEXEC), errors.Is(err, unix.EISDIR), errors.Is(err, unix.EPERM):
			sp.notFound, sp.notFoundCode = fmt.Sprintf("agentbox: %s: cannot execute: %v\n", sp.argv0, err), 126
			return nil, nil
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.ENOMEM):
			return nil, errdefs.Exhausted("starting %s: %v; the sandbox is at its process or memory limit, end some processes or raise the limit", sp.argv0, err)
		}
		return nil, fmt.Errorf("starting %s: %w", sp.argv0, err)
	}
	p.started = time.Now()
	p.exited = exited
	p.stdout = os.NewFile(uintptr(outR), "stdout")
	p.stderr = os.NewFile(uintptr(errR), "stderr")
	cu.release()
	return p, nil
}

// startV1 starts the process inside the exec's v1 cgroups: on a locked
// thread it moves the thread into them, forks (the child inherits the
// thread's cgroups, so it is inside before its first instruction) and
// moves the thread back. It runs on its own goroutine so that a thread
// that cannot move back is thrown away with it rather than left to run
// other goroutines from inside the exec's cgroup. The caller has the new
// process before the thread has moved back: the moves back overlap the
// process's run, and cg.out says when they are done (release and kill
// wait for it).
func (s *Server) startV1(cg *execCgroup, sp *execSpec, attr *syscall.ProcAttr) (int, <-chan syscall.WaitStatus, error) {
	type result struct {
		pid    int
		exited <-chan syscall.WaitStatus
		err    error
	}
	res := make(chan result, 1)
	cg.out = make(chan struct{})
	go func() {
		defer close(cg.out)
		runtime.LockOSThread()
		tid := strconv.AppendInt(make([]byte, 0, 12), int64(unix.Gettid()), 10)
		var r result
		if r.err = cg.enterV1(tid); r.err == nil {
			r.pid, r.exited, r.err = s.reaper.start(sp.argv0, sp.argv, attr)
		}
		res <- r
		if err := cg.leaveV1(tid); err != nil {
			s.log.Error("moving starter thread out of exec cgroup failed; discarding the thread", "cgroup", cg.name, "err", err)
			return // still locked: the runtime ends the thread
		}
		runtime.UnlockOSThread()
	}()
	r := <-res
	return r.pid, r.exited, r.err
}

// pipe makes a close-on-exec pipe whose parent end is non-blocking (for
// the runtime's poller) and whose child end stays blocking, as programs
// expect of their stdio: the read end for output (parentReads), the write
// end for stdin.
func pipe(parentReads bool) (r, w int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, -1, fmt.Errorf("creating pipe: %w", err)
	}
	parent := p[1]
	if parentReads {
		parent = p[0]
		// A larger pipe lets the writer run ahead while the stream
		// delivers, and one read take more: fewer wake-ups and frames
		// per byte on every hop (docs/PERFORMANCE.md, "The exec
		// stream's throughput"). Refused past the user's pipe quota
		// (fs.pipe-user-pages-soft): the default size then stays.
		_, _ = unix.FcntlInt(uintptr(parent), unix.F_SETPIPE_SZ, outputPipeSize)
	}
	if err := unix.SetNonblock(parent, true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return -1, -1, fmt.Errorf("creating pipe: %w", err)
	}
	return p[0], p[1], nil
}

// kill kills the exec's whole tree, once; killDone closes when done.
// With cgroups that is every process in its child cgroup (double forks
// and setsid included); without (tests), its process group and every
// process of its session.
func (p *proc) kill(s *Server) {
	p.killOnce.Do(func() {
		defer close(p.killDone)
		if p.cg != nil {
			if err := p.cg.kill(); err != nil {
				s.log.Error("killing exec tree", "pid", p.pid, "err", err)
			}
			return
		}
		unix.Kill(-p.pid, unix.SIGKILL)
		killSession(p.pid)
	})
}

// killed reports whether kill was started, and waits for it to finish.
func (p *proc) waitKill() {
	started := true
	p.killOnce.Do(func() { started = false; close(p.killDone) })
	if started {
		<-p.killDone
	}
}

// killSession SIGKILLs every process whose session or process group is
// sid, from /proc. Processes that left the session (setsid) escape it:
// only cgroups catch those.
func killSession(sid int) {
	d, err := os.Open("/proc")
	if err != nil {
		return
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	buf := make([]byte, 512)
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		fd, err := unix.Open("/proc/"+n+"/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		k, _ := unix.Read(fd, buf)
		unix.Close(fd)
		if k <= 0 {
			continue
		}
		// pid (comm) state ppid pgrp session ...
		i := strings.LastIndexByte(string(buf[:k]), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(buf[i+1 : k]))
		if len(f) < 4 {
			continue
		}
		if f[2] == strconv.Itoa(sid) || f[3] == strconv.Itoa(sid) {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// finish waits for any kill to end, closes the exec's files, and hands
// its cgroup over for removal (it lingers while background processes
// remain).
func (s *Server) finish(p *proc) {
	p.waitKill()
	p.stdout.Close()
	p.stderr.Close()
	if p.stdin != nil {
		p.stdin.Close()
	}
	if p.cg != nil {
		s.cgroups.release(p.cg)
	}
}

// exitStatus turns a wait status into an exit code and signal name:
// a process killed by signal n reports 128+n, as shells do.
func exitStatus(ws syscall.WaitStatus) (code int, signal string) {
	if ws.Signaled() {
		sig := ws.Signal()
		name := unix.SignalName(sig)
		if name == "" {
			name = "SIG" + strconv.Itoa(int(sig))
		}
		return 128 + int(sig), name
	}
	return ws.ExitStatus(), ""
}

// waitReaders waits for n reader goroutines to report on done; once the
// main process has exited they get outputGrace more, then their pipes are
// cut with a deadline.
func waitReaders(done <-chan struct{}, n int, files ...*os.File) {
	for n > 0 {
		select {
		case <-done:
			n--
			continue
		default:
		}
		break
	}
	if n == 0 {
		return
	}
	t := time.NewTimer(outputGrace)
	defer t.Stop()
	for n > 0 {
		select {
		case <-done:
			n--
		case <-t.C:
			for _, f := range files {
				f.SetReadDeadline(time.Now())
			}
		}
	}
}

// cleanup is a stack of undo steps, run unless released.
type cleanup struct{ fns []func() }

func (c *cleanup) add(f func()) { c.fns = append(c.fns, f) }
func (c *cleanup) release()     { c.fns = nil }
func (c *cleanup) run() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
}
