// Package gvisor is the `gvisor` isolation tier: every sandbox is a runsc
// (gVisor) sandbox, so the guest's system calls are served by gVisor's
// user-space kernel and never reach the host kernel directly. The daemon
// mounts the sandbox's root (the template's layers under its btrfs
// writable layer) as an overlay on the host, writes an OCI bundle whose
// first process is `agentbox-guest serve`, and talks to that agent over a
// unix socket the agent creates in a host directory bind-mounted into the
// sandbox (runsc --host-uds=create).
//
// The driver makes the sandbox's cgroups itself and starts `runsc run
// --detach` inside them: the sandbox process and its gofer inherit them,
// and memory, CPU and host threads are limited there from their first
// instruction. `runsc run` reads a cgroup tree of the driver's instead
// (view_linux.go), which gives the Sentry the sandbox's CPU count and
// memory; every other runsc command runs with --ignore-cgroups.
package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/drivers/internal/guestconn"
	"github.com/agentbox/agentbox/drivers/internal/lifecycle"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/cgroups"
	"github.com/agentbox/agentbox/internal/guest/harden"
	"github.com/agentbox/agentbox/internal/guest/harden/filter"
	"github.com/agentbox/agentbox/internal/idrange"
)

// Name is the tier's name in the API.
const Name = "gvisor"

func init() {
	driver.Register(Name, func(o driver.Options) (driver.Driver, error) { return New(o) })
}

// The gvisor tier's optional abilities (driver/abilities.go); Checkpointer
// is in checkpoint_linux.go.
var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.Pauser        = (*Driver)(nil)
	_ driver.NetNSAtCreate = (*Driver)(nil)
	_ driver.ExitReporter  = (*Driver)(nil)
)

// Driver is the gvisor tier.
type Driver struct {
	opts driver.Options
	log  *slog.Logger
	cg   cgroups.Manager

	// seccompFilter is the agent's seccomp filter (serveAllow allowed),
	// assembled once here rather than inside every sandbox.
	seccompFilter []byte

	// hostCPUs is the Sentry's CPU count without a quota, and its
	// ceiling; cgroupRoot is where runsc looks for cgroups, where each
	// `runsc run` gets its view (view_linux.go).
	hostCPUs   int
	cgroupRoot string
	// viewsDir holds the views' trees (viewDir).
	viewsDir string

	exits lifecycle.Exits // of the sandboxes' runsc sandbox processes
	// ranges are the sandboxes' uid ranges, for those with one of their
	// own.
	ranges idrange.Owners
}

// private is the driver's part of a Handle.
type private struct {
	Root   string `json:"root"`   // runsc --root
	Rootfs string `json:"rootfs"` // the host overlay mount
}

// New checks runsc and the host and returns the driver.
func New(o driver.Options) (*Driver, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.CgroupParent == "" {
		o.CgroupParent = "agentbox"
	}
	if o.UIDCount == 0 {
		o.UIDCount = 65536
	}
	if o.UIDBase <= 0 {
		return nil, errdefs.Invalid("gvisor driver: uid_base must be > 0 (template files are stored shifted to it)")
	}
	if fi, err := os.Stat(o.GuestBinary); err != nil || fi.Mode()&0o111 == 0 {
		return nil, errdefs.Precondition("gvisor: guest agent binary %q missing or not executable (%v); build it with `make build`", o.GuestBinary, err)
	}
	if err := check(os.TempDir()); err != nil {
		return nil, err
	}
	mgr, err := cgroups.New(o.CgroupParent)
	if err != nil {
		return nil, fmt.Errorf("gvisor driver: cgroups: %w", err)
	}
	prog, err := filter.ProgramAllowing(serveAllow...)
	if err != nil {
		return nil, fmt.Errorf("gvisor driver: %w", err)
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("gvisor driver: %w", err)
	}
	defer mi.Close()
	// The views are remade as sandboxes need them: none is in use before
	// the daemon starts sandboxes. A driver without a run root (driver
	// tests) has a directory of its own.
	var views string
	if o.RunRoot != "" {
		views = filepath.Join(o.RunRoot, "gvisor-views")
		err = os.RemoveAll(views)
	} else {
		views, err = os.MkdirTemp("", "agentbox-gvisor-views-")
	}
	if err != nil {
		return nil, fmt.Errorf("gvisor driver: the Sentry's cgroup views: %w", err)
	}
	return &Driver{opts: o, log: o.Logger, cg: mgr, seccompFilter: harden.EncodeFilter(prog),
		hostCPUs: runtime.NumCPU(), cgroupRoot: runscCgroupRoot(mi), viewsDir: views}, nil
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return Name }

// TakesNetNSAtCreate implements driver.NetNSAtCreate: runsc reads the
// sandbox's interfaces once, when it starts (network_linux.go).
func (d *Driver) TakesNetNSAtCreate() {}

// Host-side reserve above the sandbox's memory for gVisor itself (the
// sentry and the gofer), and the host threads they may use.
const (
	sentryReserveMemory = 96 << 20
	sentryPids          = 512
)

// Create implements driver.Driver.
func (d *Driver) Create(ctx context.Context, spec *driver.Spec) (*driver.Handle, error) {
	h, err := d.create(ctx, spec, "")
	if err != nil && ctx.Err() == nil && strings.Contains(err.Error(), "waiting for sandbox to start: EOF") {
		// About one boot in a few hundred dies before it reports to
		// runsc run (seen under heavy load, cause not found yet). The
		// failed attempt left nothing (its undo ran); its boot log is
		// kept in the warning, and the sandbox is booted once more.
		d.log.Warn("gvisor: runsc boot died before it was ready; retrying once", "id", spec.ID, "err", err, "boot_log", bootLog(spec.RunDir))
		_ = os.RemoveAll(filepath.Join(spec.RunDir, "runsc"))
		_ = os.RemoveAll(filepath.Join(spec.RunDir, "logs"))
		return d.create(ctx, spec, "")
	}
	return h, err
}

// bootLog is the tail of runsc's own logs of a sandbox (--debug-log),
// where a boot that failed says why.
func bootLog(runDir string) string {
	files, _ := filepath.Glob(filepath.Join(runDir, "logs", "*"))
	var out []string
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if s := lastLines(b, 6); s != "" {
			out = append(out, filepath.Base(f)+": "+s)
		}
	}
	return strings.Join(out, " | ")
}

// create is Create; with image set it restores the checkpoint there
// (runsc restore) instead of booting (checkpoint_linux.go).
func (d *Driver) create(ctx context.Context, spec *driver.Spec, image string) (_ *driver.Handle, err error) {
	var undo lifecycle.Undo
	defer undo.Run()
	root := filepath.Join(spec.RunDir, "runsc")
	rootfs := filepath.Join(spec.RunDir, "rootfs")
	bundle := filepath.Join(spec.RunDir, "bundle")
	sock := filepath.Join(spec.RunDir, "sock")
	for _, dir := range []string{root, rootfs, bundle, sock} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("gvisor: run dir: %w", err)
		}
	}
	// A uid range of its own, when the daemon has ranges: runsc's user
	// namespace maps the sandbox's ids there, and its root is the
	// overlay seen through the range's id-mapping (internal/idrange).
	uid := d.opts.UIDBase
	var ids *idrange.Range
	if ids, err = d.ranges.Take(d.opts.IDRanges, spec.ID); err != nil {
		return nil, err
	}
	if ids != nil {
		undo.Add(ids.Release)
		uid = ids.Base()
	}
	// The channel's directory belongs to the sandbox's root (host
	// uid_base, or its range's first id), which creates the socket in it.
	if err := os.Chown(sock, uid, uid); err != nil {
		return nil, fmt.Errorf("gvisor: socket dir: %w", err)
	}
	// The sandbox's root: the template's layers under the writable layer,
	// mounted on the host (runsc's gofer serves it to the sandbox).
	if ids != nil {
		if err := ids.MountOverlay(spec.Layers, spec.UpperDir, spec.WorkDir, rootfs, unix.MS_NOSUID|unix.MS_NODEV); err != nil {
			return nil, fmt.Errorf("gvisor: the sandbox's root: %w", err)
		}
	} else {
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", strings.Join(spec.Layers, ":"), spec.UpperDir, spec.WorkDir)
		if err := unix.Mount("overlay", rootfs, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return nil, fmt.Errorf("gvisor: mounting the sandbox's root overlay: %w", err)
		}
	}
	undo.Add(func() { _ = unmount(rootfs) })
	shm := shmSizeMB(spec.MemoryMB)
	if image != "" {
		if shm, err = checkpointShmMB(image, shm); err != nil {
			return nil, err
		}
	}
	if err := writeBundle(bundle, rootfs, d.opts.GuestBinary, sock, spec, uid, d.opts.UIDCount, d.seccompFilter, shm); err != nil {
		return nil, fmt.Errorf("gvisor: writing the OCI bundle: %w", err)
	}
	cg, err := d.cg.Create(spec.ID, cgroups.Resources{
		CPU:         spec.CPU,
		MemoryBytes: spec.MemoryMB<<20 + sentryReserveMemory,
		Pids:        sentryPids,
	})
	if err != nil {
		return nil, fmt.Errorf("gvisor: creating cgroup: %w", err)
	}
	undo.Add(func() { _ = cg.Destroy() })

	// runsc run --detach (create and start in one runsc process; restore
	// with an image), started inside the sandbox's cgroups: a shell moves
	// itself there and execs runsc, whose sandbox and gofer processes
	// inherit the cgroups. runsc writes the sandbox's host pid to pidFile.
	// The shell runs in the view's namespace, where the host's cgroups
	// are out of sight: it gets their cgroup.procs files open
	// (joinScript).
	procs, err := openProcs(cg.Paths())
	if err != nil {
		return nil, err
	}
	defer closeAll(procs)
	// runsc run reads the view's cgroup (view_linux.go), never the host's.
	flags := runscCgroups(createFlags(root, spec))
	args := append([]string{"-c", joinScript(len(procs)), "sh", runscPath()}, flags...)
	// runsc's own logs (create, boot, gofer) at info level, for a boot
	// that fails before the guest answers (bootLog).
	args = append(args, "--debug-log="+filepath.Join(spec.RunDir, "logs")+"/")
	if image != "" && ids != nil {
		// A checkpoint restores into a range of the new sandbox's own,
		// not the one it was taken in: runsc's check that the spec's uid
		// mapping is the checkpoint's would refuse it. The spec is the
		// driver's, the same but for that mapping; runsc then logs the
		// difference instead.
		args = append(args, "--restore-spec-validation=warning")
	}
	pidFile := filepath.Join(spec.RunDir, "sandbox.pid")
	verb := "run"
	if image == "" {
		args = append(args, "run", "--detach", "--pid-file", pidFile, "--bundle", bundle, spec.ID)
	} else {
		verb = "restore"
		args = append(args, "restore", "--image-path", image, "--detach", "--pid-file", pidFile, "--bundle", bundle, spec.ID)
	}
	run := exec.CommandContext(ctx, "/bin/sh", args...)
	run.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	run.ExtraFiles = procs
	run.Dir = bundle
	logf, err := os.OpenFile(filepath.Join(spec.RunDir, "runsc.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	run.Stdout, run.Stderr = logf, logf
	// runsc undoes a failed run itself, unless it is killed midway.
	undo.Add(func() {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = runsc(kctx, root, "delete", "--force", spec.ID)
	})
	// The Sentry's CPU count and MemTotal: the sandbox's (view_linux.go).
	// A restore takes them anew too: the Sentry sets them from its boot's
	// flags, not from the checkpoint.
	view, err := viewDir(d.viewsDir, viewOf(spec, d.hostCPUs))
	if err != nil {
		return nil, err
	}
	if err := startInView(run, view, d.cgroupRoot); err != nil {
		return nil, fmt.Errorf("gvisor: runsc %s: %v%s", verb, err, runscLog(spec.RunDir))
	}
	if err := run.Wait(); err != nil {
		return nil, fmt.Errorf("gvisor: runsc %s: %v%s", verb, err, runscLog(spec.RunDir))
	}
	if err := d.viewHeld(); err != nil {
		return nil, err
	}
	pid, err := readPidFile(pidFile)
	if err != nil {
		return nil, fmt.Errorf("gvisor: runsc %s: %w", verb, err)
	}
	pv, _ := json.Marshal(private{Root: root, Rootfs: rootfs})
	h := &driver.Handle{ID: spec.ID, Pid: pid, Socket: filepath.Join(sock, "guest.sock"), Private: pv}
	if ids != nil {
		h.UIDBase = uid
	}
	h.PidStart, _ = guestconn.PidStartTime(pid)
	exited, _ := guestconn.WatchExit(pid)
	if err := waitReady(ctx, h, exited); err != nil {
		return nil, fmt.Errorf("gvisor: %w%s", err, runscLog(spec.RunDir))
	}
	d.exits.Set(spec.ID, exited)
	undo.Release()
	d.ranges.Set(spec.ID, ids)
	return h, nil
}

// readPidFile reads the host pid runsc run/restore --pid-file wrote (the
// sandbox process, as `runsc state` shows it).
func readPidFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("the sandbox's pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("the sandbox's pid file %s holds %q, want a pid", path, b)
	}
	return pid, nil
}

// state answers the sandbox's host pid and runsc status.
func state(ctx context.Context, root, id string) (int, string, error) {
	out, err := runsc(ctx, root, "state", id)
	if err != nil {
		return 0, "", errdefs.NotFound("gvisor: sandbox %s: %v", id, err)
	}
	var st struct {
		Pid    int    `json:"pid"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return 0, "", fmt.Errorf("gvisor: runsc state: %w", err)
	}
	return st.Pid, st.Status, nil
}

func runscLog(runDir string) string {
	b, _ := os.ReadFile(filepath.Join(runDir, "runsc.log"))
	if s := lastLines(b, 8); s != "" {
		return ": " + s
	}
	return ""
}

// waitReady pings the guest until it answers: the agent creates its socket
// once it runs.
func waitReady(ctx context.Context, h *driver.Handle, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	delay := 2 * time.Millisecond
	for {
		err := guestconn.Ready(ctx, h.Socket)
		if err == nil || errors.Is(err, errdefs.ErrFailedPrecondition) {
			return err
		}
		select {
		case <-exited:
			return errors.New("the sandbox exited during boot")
		case <-ctx.Done():
			return fmt.Errorf("guest agent did not answer: %v", err)
		case <-time.After(delay):
		}
		delay = min(delay*2, 20*time.Millisecond)
	}
}

// DialGuest implements driver.Driver.
func (d *Driver) DialGuest(ctx context.Context, h *driver.Handle) (net.Conn, error) {
	return guestconn.Dial(ctx, h)
}

// Exited implements driver.Driver.
func (d *Driver) Exited(h *driver.Handle) <-chan struct{} { return d.exits.Exited(h.ID) }

// ExitReason implements driver.ExitReporter: the OOM kills of the
// sandbox's cgroup (the Sentry's memory is the sandbox's) and what
// runsc's own logs say of it: a panic, else the last error. Called
// before Destroy removes both.
func (d *Driver) ExitReason(h *driver.Handle) string {
	var parts []string
	if cg, err := d.cg.Open(h.ID); err == nil {
		if st, err := cg.Stats(); err == nil && st.OOMKills > 0 {
			parts = append(parts, fmt.Sprintf("the host OOM killer killed %d process(es) in its cgroup", st.OOMKills))
		}
	}
	if root := priv(h).Root; root != "" {
		if s := sentryLastWords(filepath.Join(filepath.Dir(root), "logs")); s != "" {
			parts = append(parts, "runsc: "+s)
		}
	}
	return strings.Join(parts, "; ")
}

// sentryLastWords reads the end of the Sentry's log (runsc's *.boot.txt
// in dir) and returns its first panic or fatal line with the few after
// it, else its last error line, else "".
func sentryLastWords(dir string) string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.boot.txt"))
	if len(files) == 0 {
		return ""
	}
	f, err := os.Open(files[len(files)-1]) // the latest boot (a restore starts another)
	if err != nil {
		return ""
	}
	defer f.Close()
	const tail = 64 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > tail {
		_, _ = f.Seek(fi.Size()-tail, 0)
	}
	b, _ := io.ReadAll(io.LimitReader(f, tail))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") || strings.Contains(l, "FATAL ERROR") {
			return strings.Join(lines[i:min(len(lines), i+4)], " | ")
		}
	}
	// Else the last error or fatal line (glog's E and F levels); the
	// info and warning lines before an exit say nothing of it.
	for i := len(lines) - 1; i >= 0; i-- {
		if l := lines[i]; len(l) > 1 && (l[0] == 'E' || l[0] == 'F') && l[1] >= '0' && l[1] <= '9' {
			return l
		}
	}
	return ""
}

func priv(h *driver.Handle) private {
	var p private
	_ = json.Unmarshal(h.Private, &p)
	return p
}

// Destroy implements driver.Driver: kill and delete the runsc sandbox,
// unmount its root, remove its cgroups (killing any straggler).
func (d *Driver) Destroy(ctx context.Context, h *driver.Handle) error {
	hooked.Delete(h.ID) // checkpoint_linux.go
	p := priv(h)
	var errs []error
	if p.Root != "" {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		_, _ = runsc(kctx, p.Root, "kill", "--all", h.ID, "9")
		if _, err := runsc(kctx, p.Root, "delete", "--force", h.ID); err != nil && !strings.Contains(err.Error(), "does not exist") {
			d.log.Debug("runsc delete", "sandbox", h.ID, "err", err)
		}
		cancel()
	}
	if cg, err := d.cg.Open(h.ID); err == nil {
		if err := cg.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("removing cgroup: %w", err))
		}
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		errs = append(errs, err)
	}
	if d.cg.Version() == 1 {
		if err := removeRunscCgroups(d.opts.CgroupParent, h.ID); err != nil {
			errs = append(errs, err)
		}
	}
	if ch, ours := d.exits.Take(h.ID); ours {
		select {
		case <-ch:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("waiting for the sandbox to exit: %w", ctx.Err()))
		}
	}
	if p.Root != "" {
		// runsc --network=none binds an empty netns here and leaves it.
		if err := unmount(filepath.Join(p.Root, "null-netns")); err != nil {
			errs = append(errs, err)
		}
	}
	if p.Rootfs != "" {
		if err := unmount(p.Rootfs); err != nil {
			errs = append(errs, err)
		}
	}
	if h.Socket != "" {
		_ = os.Remove(h.Socket)
	}
	d.ranges.Destroyed(h.ID, len(errs) == 0, d.log)
	return errors.Join(errs...)
}

// unmount detaches every mount stacked at dir; absent is fine.
func unmount(dir string) error {
	for range 64 {
		err := unix.Unmount(dir, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unmounting %s: %w", dir, err)
		}
	}
	return fmt.Errorf("unmounting %s: still mounted after 64 unmounts", dir)
}

// Adopt implements driver.Driver.
func (d *Driver) Adopt(ctx context.Context, h *driver.Handle) error {
	if h.Pid <= 0 || !guestconn.Alive(h) {
		return errdefs.NotFound("sandbox %s: runsc sandbox process %d is gone", h.ID, h.Pid)
	}
	_, status, err := state(ctx, priv(h).Root, h.ID)
	if err != nil {
		return err
	}
	// A paused sandbox's agent cannot answer.
	if status != "paused" {
		if _, err := guestconn.Ping(ctx, h.Socket); err != nil {
			return errdefs.NotFound("sandbox %s: guest agent does not answer: %v", h.ID, err)
		}
	}
	if err := d.ranges.Adopt(d.opts.IDRanges, h.ID, h.UIDBase); err != nil {
		return err
	}
	ch, _ := guestconn.WatchExit(h.Pid)
	d.exits.Set(h.ID, ch)
	return nil
}

// Cleanup implements driver.Driver: it removes the cgroups of unknown
// sandboxes (killing their runsc processes; the cgroup parent is shared
// with the container tier, whose Cleanup does the same) and unmounts the
// root overlays and runsc's netns mounts of unknown gvisor sandboxes
// (<run>/sandboxes/<id>/rootfs next to a runsc state dir, and
// <run>/sandboxes/<id>/runsc/null-netns).
func (d *Driver) Cleanup(ctx context.Context, keep map[string]bool) ([]string, error) {
	removed, err := lifecycle.RemoveLeftovers(d.cg, keep)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if d.cg.Version() == 1 {
		for _, id := range strayRunscCgroups(d.opts.CgroupParent, keep) {
			if err := removeRunscCgroups(d.opts.CgroupParent, id); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, "runsc cgroup "+id)
		}
	}
	for _, m := range leftoverMounts(d.opts.RunRoot, keep) {
		if err := unmount(m); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "mount "+m)
	}
	return removed, errors.Join(errs...)
}

// leftoverMounts lists overlay mounts of this driver whose sandbox is not
// in keep. With runRoot set, only mounts under runRoot/sandboxes count:
// another daemon's sandboxes on the same host are not leftovers.
func leftoverMounts(runRoot string, keep map[string]bool) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		var dir string
		switch {
		case filepath.Base(f[4]) == "rootfs" && strings.Contains(line, " - overlay "):
			dir = filepath.Dir(f[4])
		case strings.HasSuffix(f[4], "/runsc/null-netns"):
			dir = filepath.Dir(filepath.Dir(f[4]))
		case filepath.Base(f[4]) == "netns" && strings.Contains(line, " - nsfs "):
			// The network namespace the service prepared (Spec.NetNS).
			dir = filepath.Dir(f[4])
		default:
			continue
		}
		if filepath.Base(filepath.Dir(dir)) != "sandboxes" || keep[filepath.Base(dir)] {
			continue
		}
		if runRoot != "" && filepath.Dir(dir) != filepath.Join(runRoot, "sandboxes") {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "runsc")); err != nil {
			continue
		}
		out = append(out, f[4])
	}
	return out
}

// Pause implements driver.Pauser (runsc pause stops gVisor's kernel).
func (d *Driver) Pause(ctx context.Context, h *driver.Handle) error {
	_, err := runsc(ctx, priv(h).Root, "pause", h.ID)
	return err
}

// Resume implements driver.Pauser.
func (d *Driver) Resume(ctx context.Context, h *driver.Handle) error {
	_, err := runsc(ctx, priv(h).Root, "resume", h.ID)
	return err
}
