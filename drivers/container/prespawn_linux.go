package container

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/drivers/internal/guestconn"
	"github.com/agentbox/agentbox/internal/cgroups"
	"github.com/agentbox/agentbox/internal/guest/proto"
	"github.com/agentbox/agentbox/internal/idrange"
)

// Pre-spawned inits. Everything a sandbox's init does before it reads its
// boot spec is the same for every sandbox: the clone into fresh user, pid,
// mount, uts, ipc and net namespaces with the uid map, the exec of the
// guest binary and its runtime's start, the drop of its main thread's
// capability bounding set, and the mounts of Stage. The driver keeps a few such
// processes waiting on their boot channel (proto.BootChannelFD), each counted
// only once it has said it is ready there (proto.BootReady), so that a
// create only places one in its cgroups and sends it the spec; a create
// that finds none starts one on the spot, the same way. A waiting init
// belongs to no sandbox: it has no files of one, a cgroup of its own (v1)
// and no network but its own empty namespace, and it exits when the
// daemon goes (its boot channel closes). Its mounts, in its own mount
// namespace, are the sandbox's /proc, /dev and /sys on a tmpfs over the
// driver's stage directory (internal/guest/boot.Stage), moved into the
// root when it has one. docs/PERFORMANCE.md measures what it saves.

// initProc is an init started ahead of its sandbox.
type initProc struct {
	pid      int
	pidStart uint64
	exited   chan struct{}
	// boot is our end of its boot channel; -1 once given or closed.
	boot int
	// ready: its proto.BootReady byte was read (awaitReady).
	ready bool
	// out is its stdout and stderr until it gets its sandbox's log (a
	// memfd): why it exited, if it did before that.
	out *os.File
	// cg names the cgroup it waits in (v1: made like a sandbox's, without
	// limits, so that a create renames it instead of making one), until a
	// sandbox takes it over; "" then, and on v2.
	cg string
	// ids is its host uid range (nil: the canonical one, uid_base), and
	// uid that range's first id: its user namespace maps 0 there, and
	// its cgroups are delegated to it. When owns, it holds ids (releases
	// it if it ends without a sandbox) until spawn hands it on; else ids
	// is its sandbox's, borrowed (a standby).
	ids  *idrange.Range
	uid  int
	owns bool
	// cpu is the CPU limit its cgroup (cg) has: the latest create's, so
	// that a create asking the same writes none (Driver.cpuHint).
	cpu float64
}

// output is what p printed before it was given a sandbox, for errors.
func (p *initProc) output() string {
	b, _ := io.ReadAll(io.NewSectionReader(p.out, 0, 4096))
	if b = bytes.TrimSpace(b); len(b) == 0 {
		return ""
	}
	return ": " + string(b)
}

// discard ends p and removes the cgroup it waited in, if it still has it.
func (d *Driver) discard(p *initProc) {
	p.closeBoot() // it exits on EOF
	select {
	case <-p.exited:
	default:
		_ = unix.Kill(p.pid, unix.SIGKILL)
	}
	<-p.exited
	p.out.Close()
	d.dropInitCgroup(p)
	if p.owns {
		p.ids.Release()
	}
	p.ids = nil
}

// dropInitCgroup removes the cgroup p waited in (once p is out of it).
func (d *Driver) dropInitCgroup(p *initProc) {
	if p.cg == "" {
		return
	}
	if cg, err := d.cg.Open(p.cg); err == nil {
		if err := cg.Destroy(); err != nil {
			d.log.Warn("removing a sandbox init's cgroup", "cgroup", p.cg, "err", err)
		}
	}
	p.cg = ""
}

// prespawn holds the driver's waiting inits.
type prespawn struct {
	// ready has room for the number kept waiting (driver.Options.Prespawn).
	ready chan *initProc

	// seq numbers the inits' cgroups (Driver.initPrefix).
	seq atomic.Uint64

	mu      sync.Mutex
	filling bool
	closed  bool
}

// takeInit returns a waiting init, or starts one if none is ready, and
// starts refilling.
func (d *Driver) takeInit() (*initProc, error) {
	defer d.refill()
	for {
		select {
		case p := <-d.pre.ready:
			select {
			case <-p.exited:
				d.log.Warn("a pre-spawned sandbox init exited while waiting" + p.output())
				d.discard(p)
				continue
			default:
				return p, nil
			}
		default:
			return d.startInit()
		}
	}
}

// refill starts inits in the background, one at a time, until the pool is
// full; at most one refill runs.
func (d *Driver) refill() {
	pre := &d.pre
	pre.mu.Lock()
	defer pre.mu.Unlock()
	if pre.filling || pre.closed || cap(pre.ready) == 0 {
		return
	}
	pre.filling = true
	go func() {
		for {
			pre.mu.Lock()
			if pre.closed || len(pre.ready) == cap(pre.ready) {
				pre.filling = false
				pre.mu.Unlock()
				return
			}
			pre.mu.Unlock()
			p, err := d.startInit()
			if err != nil {
				d.log.Warn("pre-spawning a sandbox init", "err", err)
				pre.mu.Lock()
				pre.filling = false
				pre.mu.Unlock()
				return
			}
			// Counted as waiting only once it says so: its bounding set
			// is empty and its mounts are staged.
			if err := p.awaitReady(readyTimeout); err != nil {
				d.log.Warn("pre-spawning a sandbox init", "err", fmt.Errorf("%w%s", err, p.output()))
				d.discard(p)
				pre.mu.Lock()
				pre.filling = false
				pre.mu.Unlock()
				return
			}
			pre.mu.Lock()
			if pre.closed {
				pre.mu.Unlock()
				d.discard(p)
				continue
			}
			pre.ready <- p // room: only this goroutine adds
			pre.mu.Unlock()
			time.AfterFunc(maxWait.Load().(time.Duration), func() { d.expire(p) })
		}
	}()
}

// maxWait is how long an init waits for a sandbox before it is replaced
// (2 minutes; a time.Duration, shorter in tests). Its mount namespace is
// a copy of the host's as it was when it started: a filesystem unmounted
// on the host since stays in use there (a loop device cannot be
// detached, say) until the init goes.
var maxWait atomic.Value

func init() { maxWait.Store(2 * time.Minute) }

// expire replaces p if it is still waiting.
func (d *Driver) expire(p *initProc) {
	pre := &d.pre
	pre.mu.Lock()
	var found bool
	for n := len(pre.ready); n > 0; n-- {
		q := <-pre.ready
		if q == p {
			found = true
			continue
		}
		pre.ready <- q
	}
	pre.mu.Unlock()
	if found {
		d.discard(p)
		d.refill()
	}
}

// closePrespawn ends every waiting init and stops refills.
func (d *Driver) closePrespawn() {
	pre := &d.pre
	pre.mu.Lock()
	pre.closed = true
	pre.mu.Unlock()
	for {
		select {
		case p := <-pre.ready:
			d.discard(p)
		default:
			return
		}
	}
}

// startInit starts `agentbox-guest init` in fresh namespaces, waiting for
// its boot spec, in a range of its own (when the driver has ranges).
func (d *Driver) startInit() (*initProc, error) { return d.startInitIn(nil, true) }

// startInitIn starts an init in range ids. With owns, the init holds
// ids from then on (a new range when ids is nil and the driver has
// ranges), and releases it if it fails to start; without, ids (nil: the
// canonical range) is borrowed from its sandbox.
func (d *Driver) startInitIn(ids *idrange.Range, owns bool) (_ *initProc, err error) {
	if ids == nil && owns && d.opts.IDRanges != nil {
		if ids, err = d.opts.IDRanges.Acquire(); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil && owns {
			ids.Release()
		}
	}()
	uid := d.opts.UIDBase
	if ids != nil {
		uid = ids.Base()
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("boot channel: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "boot")
	defer theirs.Close()
	mfd, err := unix.MemfdCreate("agentbox-init", unix.MFD_CLOEXEC)
	if err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("init output: %w", err)
	}
	out := os.NewFile(uintptr(mfd), "init-output")
	defer func() {
		if err != nil {
			unix.Close(fds[0])
			out.Close()
		}
	}()

	// Executed from the open binary, not its path (proto.BootExeFD).
	cmd := exec.Command("/proc/self/fd/"+strconv.Itoa(proto.BootExeFD), "init")
	cmd.Args[0] = "agentbox-guest" // not the host path
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", proto.BootStageEnv + "=" + d.stage}
	if d.opts.LxcfsDir != "" {
		cmd.Env = append(cmd.Env, proto.BootLxcfsEnv+"="+d.opts.LxcfsDir)
	}
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{theirs, d.guestExe} // fd 3: proto.BootChannelFD, fd 4: proto.BootExeFD
	if ids != nil {
		// The range's views, from fd 5 (proto.BootViewFD): the init
		// attaches them in its own mount namespace; the host's holds none.
		views, paths, err := ids.Views()
		if err != nil {
			return nil, err
		}
		defer func() {
			for _, v := range views {
				v.Close()
			}
		}()
		cmd.ExtraFiles = append(cmd.ExtraFiles, views...)
		cmd.Env = append(cmd.Env, proto.BootViewsEnv+"="+strings.Join(paths, "\n"))
	}
	base, count := uid, d.opts.UIDCount
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid: true,
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
			syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: count}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: count}},
		GidMappingsEnableSetgroups: true,
		// Become uid 0 of the new user namespace before exec, so the guest
		// starts as the sandbox's root (host uid UIDBase) with its
		// capabilities in that namespace only.
		Credential: &syscall.Credential{Uid: 0, Gid: 0},
	}
	// On v1 the init waits in cgroups of its own, as a sandbox's but
	// unlimited (but for the CPU limit the latest create asked for): a
	// create renames them (one rename per hierarchy) and writes the
	// limits. They are made first, and the init is born in them with a
	// cgroup namespace rooted there (launcher.StartIn); its memory is
	// charged there from the start.
	var cgName string
	var cg, home cgroups.Cgroup
	var tasks []*os.File
	cpu := math.Float64frombits(d.cpuHint.Load())
	if d.cg.Version() == 1 {
		cgName = d.initPrefix + strconv.FormatUint(d.pre.seq.Add(1), 10)
		// With the CPU limit the latest create asked for, written now,
		// off the create path (a CPU limit write walks every CPU cgroup).
		if cg, home, _, err = d.makeCgroups(cgName, cgroups.Resources{CPU: cpu}, cgroups.Resources{}, uid); err != nil {
			return nil, fmt.Errorf("a sandbox init's cgroup: %w", err)
		}
		defer func() {
			for _, f := range tasks {
				f.Close()
			}
			if err != nil && cg != nil {
				_ = cg.Destroy()
			}
		}()
		if tasks, err = tasksFiles(home); err != nil {
			return nil, fmt.Errorf("a sandbox init's cgroup: %w", err)
		}
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWCGROUP
	}
	// The user namespace is owned by the sandbox's root's host uid: what
	// the kernel counts per user one level up (inotify, message queues,
	// queued signals) is charged to it, not to the host's root.
	pid, exited, inCgroups, err := d.startGuest(cmd, uid, tasks) // through the launcher (launch_linux.go)
	if err != nil {
		return nil, fmt.Errorf("starting guest agent: %w", err)
	}
	p := &initProc{pid: pid, exited: exited, boot: fds[0], out: out, ids: ids, uid: uid, owns: owns, cg: cgName, cpu: cpu}
	p.pidStart, _ = guestconn.PidStartTime(pid)
	if home != nil && !inCgroups {
		// A launcher older than StartIn: moved now (the init's cgroup
		// namespace is then rooted elsewhere, and it unshares one).
		if aerr := home.AddProc(pid); aerr != nil {
			cg = nil    // discard removes it once the init is gone
			p.ids = nil // released by the deferred function
			d.discard(p)
			return nil, fmt.Errorf("a sandbox init's cgroup: %w", aerr)
		}
	}
	return p, nil
}

// giveInit gives p (already in the sandbox's cgroups when placed, else
// moved there with addProc, its own cgroup then removed) boot and files.
// An init that died while it waited (its channel is closed: EPIPE) is
// replaced by a fresh one. It returns the init that took the sandbox; on
// error p (or its replacement) is discarded. replaced is called with a
// replacement before it is placed.
func (d *Driver) giveInit(p *initProc, placed bool, boot *proto.BootSpec, files []*os.File, addProc func(int) error, replaced func(*initProc)) (*initProc, error) {
	for attempt := 0; ; attempt++ {
		var err error
		if !placed {
			if err = addProc(p.pid); err != nil {
				err = fmt.Errorf("placing sandbox in its cgroup: %w", err)
			} else {
				d.dropInitCgroup(p)
			}
		}
		if err == nil {
			err = p.give(boot, files)
		}
		if err == nil {
			return p, nil
		}
		gone := errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.ESRCH) || errors.Is(err, errInitExited)
		err = fmt.Errorf("%w%s", err, p.output())
		ids, owns := p.ids, p.owns
		if gone && attempt < 2 {
			p.ids = nil // kept for the replacement
		}
		d.discard(p)
		if !gone || attempt == 2 {
			return nil, err
		}
		d.log.Warn("a pre-spawned sandbox init was gone; starting another", "err", err)
		// In the same range: the sandbox's cgroups are delegated to it
		// and the boot spec's paths are its views.
		if p, err = d.startInitIn(ids, owns); err != nil {
			return nil, err
		}
		replaced(p)
		placed = false
	}
}

// readyTimeout bounds the wait for an init's proto.BootReady: a guest
// runtime start and a few mounts, generous for a loaded host.
const readyTimeout = time.Minute

// errInitExited: an init closed its boot channel before it was ready.
var errInitExited = errors.New("the sandbox init exited before it was ready")

// awaitReady reads p's proto.BootReady byte, waiting up to timeout.
func (p *initProc) awaitReady(timeout time.Duration) error {
	if p.ready {
		return nil
	}
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("the sandbox init was not ready after %v", timeout)
		}
		fds := []unix.PollFd{{Fd: int32(p.boot), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if err == unix.EINTR || (err == nil && n == 0) {
			continue
		}
		if err != nil {
			return fmt.Errorf("waiting for the sandbox init: %w", err)
		}
		var b [1]byte
		m, err := unix.Read(p.boot, b[:])
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return fmt.Errorf("%w: %w", errInitExited, err)
		}
		if m == 0 {
			return errInitExited
		}
		if b[0] != proto.BootReady {
			return fmt.Errorf("the sandbox init sent %q on its boot channel, want %q", b[0], proto.BootReady)
		}
		p.ready = true
		return nil
	}
}

// give hands p its sandbox: spec, then the listener, the log and the
// cgroup directories (proto.BootChannelFD's message), and closes the
// channel.
func (p *initProc) give(spec *proto.BootSpec, files []*os.File) error {
	body, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	defer p.closeBoot()
	if err := p.awaitReady(readyTimeout); err != nil {
		return err
	}
	if err := unix.Sendmsg(p.boot, body[:1], unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL); err != nil {
		return fmt.Errorf("sending boot spec: %w", err)
	}
	for rest := body[1:]; len(rest) > 0; {
		n, err := unix.SendmsgN(p.boot, rest, nil, nil, unix.MSG_NOSIGNAL)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("sending boot spec: %w", err)
		}
		rest = rest[n:]
	}
	return nil
}

func (p *initProc) closeBoot() {
	if p.boot >= 0 {
		unix.Close(p.boot)
		p.boot = -1
	}
}

// tasksFiles opens the tasks file of each of c's v1 hierarchies (one per
// directory: controllers mounted together share one) for writing.
func tasksFiles(c cgroups.Cgroup) ([]*os.File, error) {
	var out []*os.File
	seen := map[string]bool{}
	for _, dir := range c.Paths() {
		if seen[dir] {
			continue
		}
		seen[dir] = true
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
}
