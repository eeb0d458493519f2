// Package container is the `container` isolation tier: the guest agent runs
// as init of fresh user, mount, pid, uts, ipc, net and cgroup namespaces,
// with the sandbox's root mapped to an unprivileged host uid range, cgroup
// limits applied before it runs a single instruction, seccomp, no
// capabilities for user processes, and pivot_root onto an overlay of the
// template and a private writable layer. It is written here rather than
// driving an OCI runtime because spawning one costs ~60 ms per start; this
// costs a fork+exec with namespaces (~5 ms).
//
// The kernel is shared with the host: a kernel bug reachable through an
// allowed syscall is an escape. Use the gvisor tier for untrusted
// multi-tenant code.
package container

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"

	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/drivers/internal/guestconn"
	"github.com/agentbox/agentbox/drivers/internal/lifecycle"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/cgroups"
	"github.com/agentbox/agentbox/internal/guest/harden"
	"github.com/agentbox/agentbox/internal/guest/harden/filter"
	"github.com/agentbox/agentbox/internal/guest/launcher"
	"github.com/agentbox/agentbox/internal/guest/proto"
	"github.com/agentbox/agentbox/internal/idrange"
)

// Name is the tier's name in the API.
const Name = "container"

func init() {
	driver.Register(Name, func(o driver.Options) (driver.Driver, error) { return New(o) })
}

// The container tier's optional abilities (driver/abilities.go); Standby
// is in standby_linux.go.
var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.Pauser        = (*Driver)(nil)
	_ driver.Resizer       = (*Driver)(nil)
	_ driver.StartNotifier = (*Driver)(nil)
)

// Driver is the container tier.
type Driver struct {
	opts driver.Options
	log  *slog.Logger
	cg   cgroups.Manager
	// guestExe is the guest binary, open: every init is executed from it
	// (proto.BootExeFD).
	guestExe *os.File

	// seccompFilter is the guest's filter, assembled once (a boot would
	// spend ~0.6 ms of CPU on it).
	seccompFilter []byte
	// stage is the empty directory every init mounts its staged /proc,
	// /dev and /sys over, in its own mount namespace (proto.BootStageEnv).
	stage string
	// initPrefix begins the names of this driver's waiting inits' cgroups
	// ("init-<random>-"), so that Cleanup tells them from leftovers.
	initPrefix string

	exits lifecycle.Exits // of the sandboxes' inits
	// ranges are the sandboxes' uid ranges, for those with one of their
	// own.
	ranges idrange.Owners

	launchState          // the pre-forked launcher (launch_linux.go)
	pre         prespawn // inits waiting for a sandbox (prespawn_linux.go)
	// cpuHint is the latest create's CPU limit (math.Float64bits; v1):
	// the next waiting inits' cgroups get it while they wait, so a
	// create asking the same writes no CPU limit.
	cpuHint atomic.Uint64
}

// New checks the host and returns the driver.
func New(o driver.Options) (*Driver, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.UIDCount == 0 {
		o.UIDCount = 65536
	}
	if o.UIDBase <= 0 {
		return nil, errdefs.Invalid("container driver: uid_base must be > 0 (sandbox root must not be host root)")
	}
	if o.CgroupParent == "" {
		o.CgroupParent = "agentbox"
	}
	fi, err := os.Stat(o.GuestBinary)
	if err != nil {
		return nil, errdefs.Precondition("guest agent binary %q: %v; build it with `make build` or set guest_binary in the config", o.GuestBinary, err)
	}
	if fi.Mode()&0o111 == 0 {
		return nil, errdefs.Precondition("guest agent binary %q is not executable", o.GuestBinary)
	}
	mgr, err := cgroups.New(o.CgroupParent)
	if err != nil {
		return nil, fmt.Errorf("container driver: cgroups: %w", err)
	}
	exe, err := os.Open(o.GuestBinary)
	if err != nil {
		return nil, errdefs.Precondition("guest agent binary %q: %v", o.GuestBinary, err)
	}
	d := &Driver{opts: o, log: o.Logger, cg: mgr, guestExe: exe}
	d.initPrefix = driver.PrespawnCgroupPrefix + randomSuffix() + "-"
	d.stage = filepath.Join(o.RunRoot, "stage")
	if o.RunRoot == "" {
		d.stage = filepath.Join(os.TempDir(), "agentbox-stage")
	}
	if err := os.MkdirAll(d.stage, 0o755); err != nil {
		return nil, fmt.Errorf("container driver: the inits' stage directory: %w", err)
	}
	if o.Seccomp {
		prog, err := filter.Program()
		if err != nil {
			return nil, fmt.Errorf("container driver: %w", err)
		}
		d.seccompFilter = harden.EncodeFilter(prog)
	}
	d.launch = launcher.NewClient(o.GuestBinary)
	d.pre.ready = make(chan *initProc, max(o.Prespawn, 0))
	d.refill()
	return d, nil
}

// Close ends the inits waiting for a sandbox and the launcher; running
// sandboxes are not touched.
func (d *Driver) Close() error {
	d.closePrespawn()
	d.launch.Close()
	return nil
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return Name }

// CallsStarted implements driver.StartNotifier: Create and Prepare
// announce the init (announce) before it has its boot spec.
func (d *Driver) CallsStarted() {}

// The agent's reserve above the workload's limits.
const (
	agentReservePids   = 64
	agentReserveMemory = 48 << 20
)

// socketPath is where the guest listens, inside the sandbox's run dir.
func socketPath(runDir string) string { return filepath.Join(runDir, "guest.sock") }

// Create implements driver.Driver.
func (d *Driver) Create(ctx context.Context, spec *driver.Spec) (_ *driver.Handle, err error) {
	// The agent lives in the sandbox's cgroup; the workload in a child
	// with the requested limits. The parent adds a small reserve, so that
	// a fork bomb or a memory hog inside hits its own limits while the
	// agent keeps answering.
	agent := cgroups.Resources{CPU: spec.CPU, MemoryBytes: spec.MemoryMB<<20 + agentReserveMemory, Pids: spec.Pids + agentReservePids}
	workload := cgroups.Resources{MemoryBytes: spec.MemoryMB << 20, Pids: spec.Pids}
	p, err := d.takeInit()
	if err != nil {
		return nil, err
	}
	announce(spec, p) // its network is wired while the rest goes on
	var cg, home, work cgroups.Cgroup
	placed := p.cg != ""
	if placed {
		// v1: the init waits in cgroups made like a sandbox's; they
		// become this sandbox's.
		d.cpuHint.Store(math.Float64bits(agent.CPU)) // for the next inits
		if cg, err = d.cg.Rename(p.cg, spec.ID); err == nil {
			p.cg = ""
			home, work = cg, cg.Sub("workload")
			set := agent
			set.KeepCPU = p.cpu == agent.CPU // written while it waited
			if err = cg.Set(set); err == nil {
				err = work.Set(workload)
			}
			if err != nil {
				_ = cg.Destroy()
			}
		}
	} else {
		cg, home, work, err = d.makeCgroups(spec.ID, agent, workload, p.uid)
	}
	if err != nil {
		d.discard(p)
		return nil, fmt.Errorf("creating cgroup: %w", err)
	}
	h, exited, ids, err := d.spawn(ctx, spec, p, placed, d.controllers(), home.Paths(), work.Paths(), home.AddProc)
	if err != nil {
		_ = cg.Destroy()
		return nil, err
	}
	d.exits.Set(spec.ID, exited)
	if ids != nil {
		ids.SetOwner(spec.ID)
	}
	d.ranges.Set(spec.ID, ids)
	return h, nil
}

// uidOf is the first host uid of sandbox id's range.
func (d *Driver) uidOf(id string) int {
	if r := d.ranges.Get(id); r != nil {
		return r.Base()
	}
	return d.opts.UIDBase
}

// announce tells spec.Started, if set, that p is the sandbox's init: its
// namespaces exist and it runs nothing of the sandbox's before its spec.
func announce(spec *driver.Spec, p *initProc) {
	if spec.Started != nil {
		spec.Started(p.pid)
	}
}

// v1Controllers are the hierarchies a sandbox's cgroups are in on v1.
var v1Controllers = []string{"pids", "freezer", "memory", "cpu", "cpuacct"}

// controllers are the v1 hierarchies a sandbox's cgroups are in, or ""
// for the one v2 directory.
func (d *Driver) controllers() []string {
	if d.cg.Version() == 1 {
		return v1Controllers
	}
	return []string{""}
}

// makeCgroups makes the cgroups of a sandbox (or of an init waiting for
// one) named name: its own with limits agent, the agent's home in it (v1:
// the same; v2: a leaf "agent") and the workload's child with limits
// workload, delegated to the sandbox's root, host uid uid. On error
// nothing is left.
func (d *Driver) makeCgroups(name string, agent, workload cgroups.Resources, uid int) (cg, home, work cgroups.Cgroup, err error) {
	made, err := d.cg.Create(name, agent)
	if err != nil {
		return nil, nil, nil, err
	}
	// made, not cg: an error return sets cg to nil before this runs.
	defer func() {
		if err != nil {
			_ = made.Destroy()
		}
	}()
	cg = made
	v1 := d.cg.Version() == 1
	home = cg
	if !v1 {
		// v2: a cgroup that hands controllers to children holds no
		// processes itself, so the agent gets a leaf of its own.
		if home, err = cg.Child("agent", cgroups.Resources{}); err != nil {
			return nil, nil, nil, fmt.Errorf("creating agent cgroup: %w", err)
		}
	}
	if work, err = cg.Child("workload", workload); err != nil {
		return nil, nil, nil, fmt.Errorf("creating workload cgroup: %w", err)
	}
	if err = d.delegate(home, work, uid); err != nil {
		return nil, nil, nil, err
	}
	return cg, home, work, nil
}

// delegate gives the sandbox's root, host uid uid, the workload's cgroup
// and (v1) its own cgroup's tasks file.
func (d *Driver) delegate(home, work cgroups.Cgroup, uid int) error {
	if err := work.Delegate(uid, uid, d.controllers()...); err != nil {
		return fmt.Errorf("delegating cgroup: %w", err)
	}
	if d.cg.Version() == 1 {
		// The guest's starter thread goes into workload/exec-N to fork and
		// then back home: it may write its own cgroup's tasks file, and
		// nothing else of it (no mkdir, no limits).
		for _, dir := range home.Paths() {
			if err := os.Chown(filepath.Join(dir, "tasks"), uid, uid); err != nil {
				return fmt.Errorf("delegating the agent's cgroup: %w", err)
			}
		}
	}
	return nil
}

// spawn makes a sandbox of spec out of the init p (prespawn_linux.go) in
// cgroups that exist (home holds the agent, work the workload; ctrls are
// the v1 controllers, or "" on v2) and returns once it answers. Unless p
// is placed there already, addProc moves it into the sandbox's cgroups
// before it gets its boot spec. spawn owns p: on error p and everything
// spawn made are gone.
//
// It returns the range the sandbox's init runs in when p held it (nil:
// the canonical one, or a range p borrowed), which the caller owns from
// then on.
func (d *Driver) spawn(ctx context.Context, spec *driver.Spec, p *initProc, placed bool, ctrls []string, homePaths, workPaths map[string]string, addProc func(int) error) (_ *driver.Handle, _ chan struct{}, _ *idrange.Range, err error) {
	given := false
	defer func() {
		if err != nil && !given {
			d.discard(p)
		}
	}()
	var undo lifecycle.Undo
	defer undo.Run()
	rootfs := filepath.Join(spec.RunDir, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, nil, nil, fmt.Errorf("creating rootfs mount point: %w", err)
	}
	sock := socketPath(spec.RunDir)
	_ = os.Remove(sock)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("guest socket: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	lnFile, err := ln.File()
	ln.Close()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("guest socket fd: %w", err)
	}
	defer lnFile.Close()
	undo.Add(func() { _ = os.Remove(sock) })
	logFile, err := os.OpenFile(filepath.Join(spec.RunDir, "guest.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, nil, err
	}
	defer logFile.Close()
	files := []*os.File{lnFile, logFile} // proto.BootFiles
	// The workload's and the agent's cgroup dirs, for per-exec child
	// cgroups and the guest's thread moves.
	var bootCgs []proto.BootCgroup
	for _, c := range ctrls {
		if _, ok := workPaths[c]; !ok {
			continue
		}
		for _, p := range []string{workPaths[c], homePaths[c]} {
			f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_DIRECTORY, 0)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("opening cgroup dir: %w", err)
			}
			defer f.Close()
			files = append(files, f)
		}
		bootCgs = append(bootCgs, proto.BootCgroup{Controller: c,
			NoChild: c == "memory" || c == "cpu" || c == "cpuacct"})
	}
	// In a range of its own the init sees the storage through the
	// range's views (internal/idrange).
	lower, upper, work := spec.Layers, spec.UpperDir, spec.WorkDir
	if p.ids != nil {
		if lower, upper, work, err = p.ids.Overlay(spec.Layers, spec.UpperDir, spec.WorkDir); err != nil {
			return nil, nil, nil, err
		}
	}
	boot := &proto.BootSpec{
		SandboxID: spec.ID,
		Hostname:  spec.Hostname,
		LowerDirs: lower,
		UpperDir:  upper,
		WorkDir:   work,
		Rootfs:    rootfs,
		Env:       spec.Env,
		User:      spec.User,
		Workdir:   spec.Workdir,
		ShmSizeMB: shmSize(spec.MemoryMB),
		Cgroups:   bootCgs,
		Seccomp:   d.opts.Seccomp,
		// Written at boot, since this driver calls spec.Started.
		ResolvConf: spec.ResolvConf,
		UserLimits: spec.UserLimits,
		DiskQuota:  spec.DiskQuota,
	}
	if d.opts.Seccomp {
		boot.SeccompFilter = d.seccompFilter
	}
	given = true // giveInit owns p now
	if p, err = d.giveInit(p, placed, boot, files, addProc, func(p *initProc) { announce(spec, p) }); err != nil {
		return nil, nil, nil, err
	}
	undo.Add(func() { d.discard(p) })

	h := &driver.Handle{ID: spec.ID, Pid: p.pid, Socket: sock, PidStart: p.pidStart}
	if p.ids != nil {
		h.UIDBase = p.uid
	}
	if err := d.waitReady(ctx, h, p.exited, spec.RunDir, p.output); err != nil {
		return nil, nil, nil, err
	}
	p.out.Close()
	undo.Release()
	var ids *idrange.Range
	if p.owns {
		ids = p.ids
	}
	p.ids = nil
	return h, p.exited, ids, nil
}

// randomSuffix is 8 lowercase hex digits.
func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func shmSize(memMB int64) int64 {
	if memMB <= 0 {
		return 64
	}
	return max(memMB/2, 16)
}

// waitReady sends one /ping; the guest answers once it serves. The socket
// exists before the guest starts, so this is a single round trip. early is
// what the init printed before it had the sandbox's log.
func (d *Driver) waitReady(ctx context.Context, h *driver.Handle, exited <-chan struct{}, runDir string, early func() string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- guestconn.Ready(ctx, h.Socket) }()
	select {
	case err := <-errc:
		if err == nil {
			return nil
		}
		return fmt.Errorf("guest agent did not answer: %w%s%s", err, early(), guestLog(runDir))
	case <-exited:
		return fmt.Errorf("guest agent exited during boot%s%s", early(), guestLog(runDir))
	}
}

func guestLog(runDir string) string {
	b, _ := os.ReadFile(filepath.Join(runDir, "guest.log"))
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return ": " + string(b)
}

// DialGuest implements driver.Driver.
func (d *Driver) DialGuest(ctx context.Context, h *driver.Handle) (net.Conn, error) {
	return guestconn.Dial(ctx, h)
}

// Exited implements driver.Driver.
func (d *Driver) Exited(h *driver.Handle) <-chan struct{} { return d.exits.Exited(h.ID) }

// Destroy implements driver.Driver. It kills the init and waits for it
// first: the kernel ends every other process of the sandbox's pid
// namespace before the init is gone, so the cgroups are empty by then and
// their kill loop (the safety net) has nothing to chase.
func (d *Driver) Destroy(ctx context.Context, h *driver.Handle) error {
	if h.Pid > 0 && guestconn.Alive(h) {
		_ = unix.Kill(h.Pid, unix.SIGKILL)
		if d.frozen(h.ID) {
			d.thawTree(h.ID) // a frozen init takes its SIGKILL only once thawed (v1)
		}
	}
	var errs []error
	if ch, ours := d.exits.Take(h.ID); ours {
		select {
		case <-ch:
		case <-time.After(200 * time.Millisecond):
			// The pid namespace cannot end while a process of it is
			// frozen: an exec cgroup the agent froze to kill its tree
			// stays frozen if the agent died meanwhile.
			d.thawTree(h.ID)
			select {
			case <-ch:
			case <-ctx.Done():
				errs = append(errs, fmt.Errorf("waiting for sandbox init to exit: %w", ctx.Err()))
			}
		}
	} else if h.Pid > 0 {
		waitGone(ctx, h)
	}
	if cg, err := d.cg.Open(h.ID); err == nil {
		if err := cg.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("removing cgroup: %w", err))
		}
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		errs = append(errs, err)
	}
	if h.Socket != "" {
		_ = os.Remove(h.Socket)
	}
	d.ranges.Destroyed(h.ID, len(errs) == 0, d.log)
	return errors.Join(errs...)
}

// thawTree thaws every frozen cgroup of sandbox id, children included.
func (d *Driver) thawTree(id string) {
	if cg, err := d.cg.Open(id); err == nil {
		_ = cg.ThawTree()
	}
}

// waitGone waits until a non-child init has exited, using a pidfd.
func waitGone(ctx context.Context, h *driver.Handle) {
	fd, err := unix.PidfdOpen(h.Pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if !guestconn.Alive(h) {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	ms := int(time.Until(deadline) / time.Millisecond)
	_, _ = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, max(ms, 0))
}

// Adopt implements driver.Driver.
func (d *Driver) Adopt(ctx context.Context, h *driver.Handle) error {
	if h.Pid <= 0 || !guestconn.Alive(h) {
		return errdefs.NotFound("sandbox %s: init process %d is gone", h.ID, h.Pid)
	}
	// A paused sandbox's agent is frozen too and cannot answer.
	if !d.frozen(h.ID) {
		if _, err := guestconn.Ping(ctx, h.Socket); err != nil {
			return errdefs.NotFound("sandbox %s: guest agent does not answer: %v", h.ID, err)
		}
	}
	ch, err := guestconn.WatchExit(h.Pid)
	if err != nil {
		return errdefs.NotFound("sandbox %s: pidfd: %v", h.ID, err)
	}
	if err := d.ranges.Adopt(d.opts.IDRanges, h.ID, h.UIDBase); err != nil {
		return err
	}
	d.killStrays(h)
	d.exits.Set(h.ID, ch)
	return nil
}

// Cleanup implements driver.Driver: it removes cgroups of unknown sandboxes
// (killing whatever still runs in them).
func (d *Driver) Cleanup(ctx context.Context, keep map[string]bool) ([]string, error) {
	// The cgroups of this driver's waiting inits are not leftovers (those
	// of an earlier daemon's are: their inits exited with it), also one
	// made while this runs: the pre-spawning starts with the driver, and
	// a list taken before it made one had a fresh init killed ("a
	// pre-spawned sandbox init exited while waiting" at a daemon's
	// start). TestCleanupKeepsInitsMadeMeanwhile.
	return cgroups.RemoveUnless(d.cg, func(n string) bool {
		return keep[n] || strings.HasPrefix(n, d.initPrefix)
	})
}

// Pause implements driver.Pauser: freeze every process of the sandbox.
func (d *Driver) Pause(ctx context.Context, h *driver.Handle) error {
	cg, err := d.cg.Open(h.ID)
	if err != nil {
		return err
	}
	return cg.Freeze()
}

// frozen reports whether sandbox id's cgroup is frozen (paused).
func (d *Driver) frozen(id string) bool { return lifecycle.Frozen(d.cg, id) }

// Resume implements driver.Pauser.
func (d *Driver) Resume(ctx context.Context, h *driver.Handle) error {
	cg, err := d.cg.Open(h.ID)
	if err != nil {
		return err
	}
	return cg.Thaw()
}
