// Package launcher is the pre-forked launcher: a small helper process (the
// guest binary started once as `agentbox-guest launcher`) that starts
// sandbox inits for the daemon. Go forks with CLONE_VM|CLONE_VFORK only
// when no user namespace is asked for, so every sandbox start from the
// daemon copied the page tables of the daemon's whole address space and
// held its mmap lock meanwhile: measured here, Start of /bin/true with
// CLONE_NEWUSER|CLONE_NEWNET takes ~1.5 ms from a fresh process, ~5 ms
// from one with a 30 MB heap and ~14 ms with 120 MB, and the daemon's
// other threads stall on page faults while it runs. The launcher's heap
// stays a few MB, so its forks stay cheap however large the daemon grows.
//
// The daemon holds one end of a SOCK_SEQPACKET socket pair, the launcher
// the other (its fd 3). A request is one message: the exec.Cmd to start
// as JSON, with its files (stdout, stderr, extra files, the cgroup fd) as
// SCM_RIGHTS. The reply carries the child's pid and a pidfd, which the
// daemon watches for the child's exit (no thread blocked per sandbox, and
// a pidfd never names a recycled pid). The launcher reaps its children and
// exits when the daemon's end closes; children outlive it, as they would
// outlive the daemon.
//
// The launcher runs as root in the host's namespaces, like the daemon; only
// the daemon holds the other end of its socket.
package launcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// request is one exec.Cmd to start; file fields index the message's fds.
type request struct {
	Path   string   `json:"path"`
	Args   []string `json:"args"`
	Env    []string `json:"env"`
	Dir    string   `json:"dir"`
	Stdout int      `json:"stdout"` // -1: none
	Stderr int      `json:"stderr"`
	Extra  []int    `json:"extra"`

	Setsid                     bool                   `json:"setsid"`
	Cloneflags                 uintptr                `json:"cloneflags"`
	UidMappings                []syscall.SysProcIDMap `json:"uid_mappings"`
	GidMappings                []syscall.SysProcIDMap `json:"gid_mappings"`
	GidMappingsEnableSetgroups bool                   `json:"gid_setgroups"`
	Credential                 *syscall.Credential    `json:"credential,omitempty"`
	CgroupFD                   int                    `json:"cgroup_fd"` // -1: none
	// NSOwner, when not 0, is the host uid (and gid) the clone runs as,
	// so that the user namespace it makes is that uid's (StartOwned).
	NSOwner int `json:"ns_owner,omitempty"`
	// CgroupTasks are the passed files (indexes) of cgroup v1 tasks
	// files the starting thread joins before the clone (StartIn).
	CgroupTasks []int `json:"cgroup_tasks,omitempty"`
}

// reply answers a request; the pidfd travels as the message's one fd.
type reply struct {
	Pid   int    `json:"pid"`
	Error string `json:"error,omitempty"`
	// InCgroups: the child was born in the request's CgroupTasks (a
	// launcher older than the field ignores it and leaves this false).
	InCgroups bool `json:"in_cgroups,omitempty"`
}

const maxMsg = 256 << 10

// Serve answers requests on conn until it is closed, starting each
// command and reaping it when it exits.
func Serve(conn *net.UnixConn) error {
	buf := make([]byte, maxMsg)
	oob := make([]byte, unix.CmsgSpace(4*128))
	for {
		n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
		if n == 0 && (err == nil || errors.Is(err, io.EOF)) {
			return nil // the daemon closed its end
		}
		if err != nil {
			return err
		}
		files, err := filesOf(oob[:oobn])
		rep, pidfd := reply{}, -1
		if err == nil {
			rep.Pid, pidfd, rep.InCgroups, err = start(buf[:n], files)
		}
		for _, f := range files {
			f.Close()
		}
		if err != nil {
			rep.Error = err.Error()
		}
		b, _ := json.Marshal(rep)
		var rights []byte
		if pidfd >= 0 {
			rights = unix.UnixRights(pidfd)
		}
		_, _, werr := conn.WriteMsgUnix(b, rights, nil)
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
		if werr != nil {
			return werr
		}
	}
}

// filesOf turns the SCM_RIGHTS of a message into files.
func filesOf(oob []byte) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parsing the request's fds: %w", err)
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "passed"))
		}
	}
	return files, nil
}

// start runs one request and returns the child's pid and a pidfd, and
// whether it was born in the request's cgroups.
func start(msg []byte, files []*os.File) (pid, pidfd int, inCgroups bool, err error) {
	var req request
	if err := json.Unmarshal(msg, &req); err != nil {
		return 0, -1, false, fmt.Errorf("decoding the request: %w", err)
	}
	file := func(i int) (*os.File, error) {
		if i < 0 {
			return nil, nil
		}
		if i >= len(files) {
			return nil, fmt.Errorf("request names fd %d of %d", i, len(files))
		}
		return files[i], nil
	}
	cmd := &exec.Cmd{Path: req.Path, Args: req.Args, Env: req.Env, Dir: req.Dir}
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	var ferr error
	for _, w := range []struct {
		i  int
		to *io.Writer
	}{{req.Stdout, &cmd.Stdout}, {req.Stderr, &cmd.Stderr}} {
		f, err := file(w.i)
		ferr = errors.Join(ferr, err)
		if f != nil {
			*w.to = f
		}
	}
	for _, i := range req.Extra {
		f, err := file(i)
		ferr = errors.Join(ferr, err)
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	}
	if ferr != nil {
		return 0, -1, false, ferr
	}
	pidfd = -1
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:                     req.Setsid,
		Cloneflags:                 req.Cloneflags,
		UidMappings:                req.UidMappings,
		GidMappings:                req.GidMappings,
		GidMappingsEnableSetgroups: req.GidMappingsEnableSetgroups,
		Credential:                 req.Credential,
		PidFD:                      &pidfd,
	}
	if req.CgroupFD >= 0 {
		f, err := file(req.CgroupFD)
		if err != nil {
			return 0, -1, false, err
		}
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(f.Fd())
	}
	var tasks []*os.File
	for _, i := range req.CgroupTasks {
		f, err := file(i)
		if err != nil {
			return 0, -1, false, err
		}
		tasks = append(tasks, f)
	}
	if err := StartIn(cmd, req.NSOwner, tasks); err != nil {
		return 0, -1, false, err
	}
	// The client gets a pidfd of its own, a separate open file: it makes
	// its pidfd non-blocking to poll it, and that flag is per open file.
	// Had it the clone's pidfd, which os.Process's wait shares (a dup),
	// Wait's waitid would answer EAGAIN and leave the child a zombie. The
	// child cannot be reaped (its pid reused) before pidfd_open: only the
	// reaper reaps, through the clone's pidfd, after adopt.
	pid = cmd.Process.Pid
	own, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	// Reaped by the reaper, not by a cmd.Wait per child (a thread blocked
	// in waitid for every live sandbox).
	_ = cmd.Process.Release()
	if aerr := adopt(pidfd); aerr != nil {
		// Not the reaper's: killed and reaped here.
		_ = unix.Kill(pid, unix.SIGKILL)
		var info unix.Siginfo
		_ = unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED, nil)
		if own >= 0 {
			unix.Close(own)
		}
		return 0, -1, false, aerr
	}
	if err != nil {
		_ = unix.Kill(pid, unix.SIGKILL) // the reaper reaps it
		return 0, -1, false, fmt.Errorf("pidfd_open of the child: %w", err)
	}
	return pid, own, len(tasks) > 0, nil
}

// The launcher's children are reaped through their pidfds: each child's
// clone pidfd is in one epoll set, which reports it readable when the
// child exits, and a waitid on that pidfd reaps it. The cost is one
// wakeup per exit, whatever the number of live children: waiting on
// every SIGCHLD for each known pid (what this did before) cost a wait4 per
// live sandbox at every create and every exit, 2,000 calls at 2,000 live,
// and wait4(-1) walks the list of every child too (about 200 us per call
// with 2,000). Only the pidfds of children it started are waited on, so
// a process that runs Serve in-process (the tests) keeps its other
// children to itself.
var reaper struct {
	once sync.Once
	ep   int
	err  error
}

// adopt hands the reaper the clone pidfd of a child, which it closes
// once the child is reaped. A child that already exited is reported at
// once (epoll is level-triggered).
func adopt(pidfd int) error {
	reaper.once.Do(func() {
		if reaper.ep, reaper.err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); reaper.err == nil {
			go reap(reaper.ep)
		}
	})
	if reaper.err != nil {
		unix.Close(pidfd)
		return fmt.Errorf("the reaper's epoll: %w", reaper.err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(pidfd)}
	if err := unix.EpollCtl(reaper.ep, unix.EPOLL_CTL_ADD, pidfd, &ev); err != nil {
		unix.Close(pidfd)
		return fmt.Errorf("adding the child's pidfd to the reaper: %w", err)
	}
	return nil
}

// reap waits for children to exit and reaps each, for the process's life.
func reap(ep int) {
	events := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(ep, events, -1)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			fmt.Fprintf(os.Stderr, "agentbox-guest launcher: the reaper's epoll_wait failed, exited children stay zombies: %v\n", err)
			return
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			var info unix.Siginfo
			if err := unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOHANG, nil); err == unix.EAGAIN {
				continue // not yet (a spurious wakeup): still in the set
			}
			_ = unix.EpollCtl(ep, unix.EPOLL_CTL_DEL, fd, nil)
			unix.Close(fd)
		}
	}
}

// Client starts commands through a launcher process, starting (and after
// a failure restarting) it as needed. It is safe for concurrent use; the
// requests go one at a time, each taking about a fork.
type Client struct {
	bin string

	mu   sync.Mutex
	conn *net.UnixConn
	proc *os.Process
}

// NewClient returns a client whose launcher is `bin launcher` (the guest
// binary). Nothing starts until the first Start.
func NewClient(bin string) *Client { return &Client{bin: bin} }

// ensureLocked starts the launcher if it does not run.
func (c *Client) ensureLocked() error {
	if c.conn != nil {
		return nil
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("launcher socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "launcher"), os.NewFile(uintptr(fds[1]), "launcher")
	defer theirs.Close()
	cmd := exec.Command(c.bin, "launcher")
	cmd.Args[0] = "agentbox-launcher"
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		ours.Close()
		return fmt.Errorf("starting the launcher: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	fc, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("launcher socket: %w", err)
	}
	c.conn, c.proc = fc.(*net.UnixConn), cmd.Process
	return nil
}

// resetLocked drops a launcher that failed; the next Start makes another.
func (c *Client) resetLocked() {
	if c.conn != nil {
		c.conn.Close()
	}
	if c.proc != nil {
		_ = c.proc.Kill()
	}
	c.conn, c.proc = nil, nil
}

// Close stops the launcher. Children it started keep running.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		c.conn.Close() // the launcher exits on EOF
	}
	c.conn, c.proc = nil, nil
}

// Start starts cmd in the launcher, as cmd.Start would in this process:
// cmd's path, args, env, dir, stdout and stderr (files or nil), extra
// files and SysProcAttr (Setsid, Cloneflags, uid and gid mappings,
// credential, cgroup fd) are carried over; anything else is refused. It
// returns the child's pid and a channel closed when the child exits
// (the caller only receives from it). Errors wrapping ErrUnavailable
// mean no launcher could be reached: the caller may start cmd itself.
func (c *Client) Start(cmd *exec.Cmd) (pid int, exited chan struct{}, err error) {
	return c.StartOwned(cmd, 0)
}

// StartOwned is Start with the clone made as host uid owner (StartOwned,
// the function); 0 is Start.
func (c *Client) StartOwned(cmd *exec.Cmd, owner int) (pid int, exited chan struct{}, err error) {
	pid, exited, _, err = c.StartIn(cmd, owner, nil)
	return pid, exited, err
}

// StartIn is StartOwned with the child born in the cgroup v1 cgroups of
// tasks (each a hierarchy's tasks file, open for writing): see the
// function StartIn. inCgroups says the launcher did so; one older than
// this leaves the child in its own cgroups, for the caller to move.
func (c *Client) StartIn(cmd *exec.Cmd, owner int, tasks []*os.File) (pid int, exited chan struct{}, inCgroups bool, err error) {
	req, fds, err := encode(cmd)
	if err != nil {
		return 0, nil, false, err
	}
	req.NSOwner = owner
	for _, f := range tasks {
		req.CgroupTasks = append(req.CgroupTasks, len(fds))
		fds = append(fds, int(f.Fd()))
	}
	msg, err := json.Marshal(req)
	if err != nil {
		return 0, nil, false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// One retry with a fresh launcher if the old one is gone.
	for attempt := 0; ; attempt++ {
		if err := c.ensureLocked(); err != nil {
			return 0, nil, false, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		var rep reply
		exited, rep, err = c.roundTripLocked(msg, fds)
		if err == nil || attempt == 1 || !errors.Is(err, errTransport) {
			return rep.Pid, exited, rep.InCgroups, err
		}
		c.resetLocked()
	}
}

// ErrUnavailable: the launcher could not be started or did not answer.
var ErrUnavailable = errors.New("launcher unavailable")

var errTransport = ErrUnavailable

func (c *Client) roundTripLocked(msg []byte, fds []int) (chan struct{}, reply, error) {
	if _, _, err := c.conn.WriteMsgUnix(msg, unix.UnixRights(fds...), nil); err != nil {
		return nil, reply{}, fmt.Errorf("%w: %v", errTransport, err)
	}
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := c.conn.ReadMsgUnix(buf, oob)
	if err == nil && n == 0 {
		err = errors.New("closed")
	}
	if err != nil {
		return nil, reply{}, fmt.Errorf("%w: %v", errTransport, err)
	}
	var got []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if fds, err := unix.ParseUnixRights(&m); err == nil {
				got = append(got, fds...)
			}
		}
	}
	closeAll := func() {
		for _, fd := range got {
			unix.Close(fd)
		}
	}
	var rep reply
	if err := json.Unmarshal(buf[:n], &rep); err != nil {
		closeAll()
		return nil, reply{}, fmt.Errorf("%w: bad reply: %v", errTransport, err)
	}
	if rep.Error != "" {
		closeAll()
		return nil, reply{}, errors.New(rep.Error)
	}
	if len(got) != 1 {
		closeAll()
		return nil, reply{}, fmt.Errorf("%w: reply without a pidfd", errTransport)
	}
	return watch(got[0]), rep, nil
}

// watch returns a channel closed when the process of pidfd f exits. The
// pidfd is polled by the runtime's netpoller: no thread waits on it.
func watch(fd int) chan struct{} {
	ch := make(chan struct{})
	unix.CloseOnExec(fd)
	_ = unix.SetNonblock(fd, true)
	pf := os.NewFile(uintptr(fd), "pidfd") // non-blocking: the netpoller watches it
	go func() {
		defer close(ch)
		defer pf.Close()
		rc, err := pf.SyscallConn()
		if err != nil {
			waitBlocking(fd)
			return
		}
		_ = rc.Read(func(fd uintptr) bool {
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
			return err != unix.EINTR && (n > 0 || err != nil)
		})
	}()
	return ch
}

func waitBlocking(fd int) {
	for {
		if _, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1); err != unix.EINTR {
			return
		}
	}
}

// encode turns cmd into a request and the fds it passes (borrowed from
// cmd's files: the caller keeps them open until Start returns).
func encode(cmd *exec.Cmd) (*request, []int, error) {
	if cmd.Stdin != nil {
		return nil, nil, errors.New("launcher: stdin is not supported")
	}
	req := &request{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir, Stdout: -1, Stderr: -1, CgroupFD: -1}
	if req.Env == nil {
		return nil, nil, errors.New("launcher: set cmd.Env (the launcher's own environment is empty)")
	}
	var fds []int
	add := func(fd int) int {
		fds = append(fds, fd)
		return len(fds) - 1
	}
	for _, w := range []struct {
		w  io.Writer
		to *int
	}{{cmd.Stdout, &req.Stdout}, {cmd.Stderr, &req.Stderr}} {
		switch f := w.w.(type) {
		case nil:
		case *os.File:
			*w.to = add(int(f.Fd()))
		default:
			return nil, nil, errors.New("launcher: stdout and stderr must be files")
		}
	}
	for _, f := range cmd.ExtraFiles {
		if f == nil {
			return nil, nil, errors.New("launcher: nil extra files are not supported")
		}
		req.Extra = append(req.Extra, add(int(f.Fd())))
	}
	if a := cmd.SysProcAttr; a != nil {
		if a.Chroot != "" || a.Setpgid || a.Setctty || a.Noctty || a.Foreground || a.Pdeathsig != 0 ||
			a.Unshareflags != 0 || len(a.AmbientCaps) > 0 || a.Ptrace || a.PidFD != nil {
			return nil, nil, errors.New("launcher: SysProcAttr fields beyond setsid, clone flags, id mappings, credential and cgroup fd are not supported")
		}
		req.Setsid, req.Cloneflags = a.Setsid, a.Cloneflags
		req.UidMappings, req.GidMappings = a.UidMappings, a.GidMappings
		req.GidMappingsEnableSetgroups, req.Credential = a.GidMappingsEnableSetgroups, a.Credential
		if a.UseCgroupFD {
			req.CgroupFD = add(a.CgroupFD)
		}
	}
	return req, fds, nil
}

// ServeInherited is `agentbox-guest launcher`: it serves the socket the
// daemon passed as fd 3 until the daemon closes it. It runs on the host,
// never in a sandbox.
func ServeInherited() error {
	f := os.NewFile(3, "launcher")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("launcher socket on fd 3: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("fd 3 is not a unix socket")
	}
	return Serve(uc)
}

// StartOwned starts cmd, as cmd.Start does, from a thread whose effective
// uid and gid are owner (0: cmd.Start itself), with the capabilities it
// has kept (SECBIT_NO_SETUID_FIXUP). A user namespace belongs to the
// effective uid that made it, and the kernel charges what processes in it
// hold per user (inotify instances and watches, message queue bytes,
// queued signals) to the namespace's owner too, one level up: a sandbox
// whose namespace its own root's host uid owns takes those from no one
// else, where one made by root took them from root. The mappings are
// written by the same thread, which keeps CAP_SETUID in the host's
// namespace. The thread is never handed back to the runtime: it ends
// with the goroutine that ran the start.
func StartOwned(cmd *exec.Cmd, owner int) error { return StartIn(cmd, owner, nil) }

// StartIn is StartOwned with the child born in given cgroup v1 cgroups:
// tasks are a tasks file of each hierarchy, open for writing, which the
// starting thread joins before the clone (a v1 child starts in the
// cgroups of the thread that forks it). With CLONE_NEWCGROUP in the
// clone flags its cgroup namespace is then rooted there, made with the
// rest of its namespaces: nothing for the child to unshare later, on
// every one of its threads. The thread is not used again.
func StartIn(cmd *exec.Cmd, owner int, tasks []*os.File) error {
	if owner == 0 && len(tasks) == 0 {
		return cmd.Start()
	}
	if len(tasks) > 0 {
		// Opened here, on a thread with the process's credentials.
		if _, err := ownTasks(); err != nil {
			return fmt.Errorf("the launcher's own cgroups: %w", err)
		}
	}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread's credentials and cgroups stay
		// changed, and the runtime ends it when this goroutine returns.
		runtime.LockOSThread()
		errc <- func() error {
			if len(tasks) > 0 {
				// Back into the launcher's own cgroups once the child is
				// started (or a join failed), before the start is
				// answered: a host thread must not stay in a sandbox's
				// cgroups (a kill of the cgroup's processes, the posture
				// check) until it exits.
				defer leaveCgroups()
				tid := strconv.Itoa(unix.Gettid())
				for _, f := range tasks {
					if _, err := f.WriteString(tid); err != nil {
						return fmt.Errorf("joining the child's cgroup: %w", err)
					}
				}
			}
			if owner == 0 {
				return cmd.Start()
			}
			bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
			if err != nil {
				return fmt.Errorf("reading securebits: %w", err)
			}
			if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits)|secbitNoSetuidFixup, 0, 0, 0); err != nil {
				return fmt.Errorf("keeping capabilities across a uid change: %w", err)
			}
			keep := ^uintptr(0) // -1: unchanged
			if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(owner), keep); e != 0 {
				return fmt.Errorf("setting the effective gid %d: %w", owner, e)
			}
			if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(owner), keep); e != 0 {
				return fmt.Errorf("setting the effective uid %d: %w", owner, e)
			}
			return cmd.Start()
		}()
	}()
	return <-errc
}

// ownTasks are the tasks files of the process's own cgroup v1 cgroups,
// opened for writing at its first start in a sandbox's cgroups (as root:
// a v1 tasks file checks the opener's credentials, and the thread that
// writes them back may have changed its own).
var ownTasks = sync.OnceValues(func() ([]*os.File, error) {
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []*os.File
	for _, dir := range v1Dirs(string(cg), string(mi)) {
		f, err := os.OpenFile(filepath.Join(dir, "tasks"), os.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, g := range out {
				g.Close()
			}
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
})

// leaveCgroups moves the calling thread back into the process's own v1
// cgroups. A failure is reported, not fatal: the thread is ended when its
// goroutine returns (StartIn never unlocks it) and leaves the cgroups
// then.
func leaveCgroups() {
	files, err := ownTasks()
	tid := strconv.Itoa(unix.Gettid())
	for _, f := range files {
		if _, werr := f.WriteString(tid); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentbox-guest launcher: moving a starting thread back into its own cgroups: %v\n", err)
	}
}

// v1Dirs maps each cgroup v1 hierarchy of a /proc/self/cgroup to the
// directory of that cgroup, through the hierarchies' mounts in
// mountinfo (the first mount of each).
func v1Dirs(procCgroup, mountinfo string) []string {
	type mount struct{ root, point string }
	byOpt := map[string]mount{} // a controller, or name=X
	for line := range strings.Lines(mountinfo) {
		left, right, ok := strings.Cut(strings.TrimSpace(line), " - ")
		if !ok {
			continue
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 5 || len(rf) < 3 || rf[0] != "cgroup" {
			continue
		}
		for _, opt := range strings.Split(rf[2], ",") {
			if _, dup := byOpt[opt]; !dup {
				byOpt[opt] = mount{root: lf[3], point: lf[4]}
			}
		}
	}
	var dirs []string
	for line := range strings.Lines(procCgroup) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 || parts[1] == "" {
			continue // the unified (v2) hierarchy: nothing to move in
		}
		m, ok := byOpt[strings.Split(parts[1], ",")[0]]
		if !ok {
			continue
		}
		rel, ok := strings.CutPrefix(parts[2], m.root)
		if !ok {
			continue
		}
		dirs = append(dirs, filepath.Join(m.point, rel))
	}
	return dirs
}

// secbitNoSetuidFixup keeps a thread's capabilities across a change of
// its uids (include/uapi/linux/securebits.h).
const secbitNoSetuidFixup = 1 << 2
