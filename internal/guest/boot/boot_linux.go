// Package boot turns the guest agent's first process into a sandbox's init:
// it receives the BootSpec from the daemon, builds the root filesystem inside
// the sandbox's own user and mount namespaces (overlay, /proc, /dev, /sys,
// masked paths), pivots into it, detaches the host's tree, hardens the
// process (no_new_privs, empty bounding set, seccomp) and hands over to the
// guest server. Nothing here runs after the sandbox serves its first request.
package boot

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/guest/proto"
)

// Prepared is what boot leaves for the guest server.
type Prepared struct {
	Spec proto.BootSpec
	// CgroupFDs are O_DIRECTORY fds of the sandbox's own cgroups (one per
	// v1 controller, or the v2 directory), inherited from the daemon.
	CgroupFDs []CgroupFD
}

// CgroupFD is one cgroup directory the guest may create children in.
type CgroupFD struct {
	FD         int
	HomeFD     int
	Controller string // "pids", "freezer", "memory", "cpu", or "" for v2
	NoChild    bool
}

// Received is what the daemon sends on the boot channel when it gives
// this process its sandbox (proto.BootChannelFD).
type Received struct {
	Spec proto.BootSpec
	// Listener is the guest's listening socket, Log the sandbox's log
	// file (to become stdout and stderr).
	Listener, Log int
	// cgroups holds the workload and home directory of each entry of
	// Spec.Cgroups, in order.
	cgroups []int
}

// Announce tells the daemon on the boot channel fd that this init is
// ready to wait for a sandbox (proto.BootReady): its bounding set is empty
// and Stage is done.
func Announce(fd int) error {
	for {
		_, err := unix.Write(fd, []byte{proto.BootReady})
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("announcing on the boot channel: %w", err)
		}
		return nil
	}
}

// maxSpec bounds the boot spec (its env comes from an API request).
const maxSpec = 4 << 20

// Receive waits on the boot channel fd for the daemon's one message: the
// spec and its files. A pre-spawned init blocks here until it is given a
// sandbox; EOF before any byte means the daemon is gone (or never meant
// to use this process), and is an error to exit on. The fds it returns
// are close-on-exec.
func Receive(fd int) (*Received, error) {
	buf := make([]byte, 64<<10)
	// Room for the most files a spec names: listener, log and two per
	// v1 hierarchy.
	oob := make([]byte, unix.CmsgSpace(4*(proto.BootFiles+2*8)))
	n, oobn, _, _, err := recvmsgRetry(fd, buf, oob)
	if err != nil {
		return nil, fmt.Errorf("reading the boot channel: %w", err)
	}
	if n == 0 {
		return nil, errors.New("the boot channel closed before a sandbox was assigned (the daemon stopped)")
	}
	files, err := rightsOf(oob[:oobn])
	if err != nil {
		return nil, err
	}
	body := append([]byte(nil), buf[:n]...)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the boot spec: %w", err)
		}
		if n == 0 {
			break
		}
		if body = append(body, buf[:n]...); len(body) > maxSpec {
			return nil, fmt.Errorf("boot spec over %d bytes", maxSpec)
		}
	}
	r := &Received{}
	if err := json.Unmarshal(body, &r.Spec); err != nil {
		return nil, fmt.Errorf("reading boot spec: %w", err)
	}
	if want := proto.BootFiles + 2*len(r.Spec.Cgroups); len(files) != want {
		return nil, fmt.Errorf("boot channel: got %d files, the spec needs %d", len(files), want)
	}
	r.Listener, r.Log, r.cgroups = files[0], files[1], files[proto.BootFiles:]
	return r, nil
}

func recvmsgRetry(fd int, p, oob []byte) (n, oobn, flags int, from unix.Sockaddr, err error) {
	for {
		n, oobn, flags, from, err = unix.Recvmsg(fd, p, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			return
		}
	}
}

// rightsOf returns the fds of the SCM_RIGHTS messages in oob.
func rightsOf(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("boot channel: %w", err)
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			return nil, fmt.Errorf("boot channel: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// Prepare builds the sandbox's root on what Stage made in the directory
// stage and pivots into it. It must run as the first process of fresh
// user, mount, pid, uts, ipc and net namespaces.
func Prepare(r *Received, stage string) (*Prepared, error) {
	spec := r.Spec
	p := &Prepared{Spec: spec}
	// A cgroup namespace rooted at the cgroups the daemon put us in: the
	// launcher made one at the clone, in them, unless this init was
	// moved since (or started by a launcher older than that).
	if err := ensureCgroupNamespace(); err != nil {
		return nil, err
	}
	if spec.Hostname != "" {
		if err := unix.Sethostname([]byte(spec.Hostname)); err != nil {
			return nil, fmt.Errorf("sethostname: %w", err)
		}
	}
	if err := mountOverlay(spec); err != nil {
		return nil, err
	}
	if err := enterStage(stage, spec); err != nil {
		return nil, err
	}
	// Stage wrote the default inotify counts; a sandbox that asks for
	// others gets them now (ucounts_linux.go, LimitUserNS).
	if err := setUserRlimits(spec.UserLimits); err != nil {
		return nil, err
	}
	if l := api.DefaultUserLimits.Over(spec.UserLimits); l.InotifyInstances != api.DefaultUserLimits.InotifyInstances ||
		l.InotifyWatches != api.DefaultUserLimits.InotifyWatches {
		if err := limitUserNSFiles(spec.UserLimits); err != nil {
			return nil, err
		}
	}
	for i, c := range spec.Cgroups {
		p.CgroupFDs = append(p.CgroupFDs, CgroupFD{FD: r.cgroups[2*i], HomeFD: r.cgroups[2*i+1], Controller: c.Controller, NoChild: c.NoChild})
	}
	if err := pivot(spec.Rootfs); err != nil {
		return nil, err
	}
	if spec.ResolvConf != "" {
		if err := writeResolvConf(spec.ResolvConf); err != nil {
			// As when the daemon writes it through the guest: the sandbox
			// still works, only names do not resolve.
			fmt.Fprintf(os.Stderr, "agentbox-guest: writing /etc/resolv.conf: %v\n", err)
		}
	}
	return p, nil
}

// writeResolvConf writes body to /etc/resolv.conf of the new root (after
// the pivot, so a symlink resolves inside it), as root with mode 0644,
// like PUT /files does: never blocking on a fifo, only into a regular
// file.
func writeResolvConf(body string) error {
	const name = "/etc/resolv.conf"
	fd, err := unix.Open(name, unix.O_WRONLY|unix.O_CREAT|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s is not a regular file", name)
	}
	if err := unix.Ftruncate(fd, 0); err != nil {
		return err
	}
	if err := unix.Fchown(fd, 0, 0); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, 0o644); err != nil {
		return err
	}
	_, err = f.WriteString(body)
	return err
}

// ensureCgroupNamespace makes a cgroup namespace rooted at the process's
// cgroups unless it is in one already: every line of /proc/self/cgroup
// then reads "/" (a namespace made by the clone in the cgroups the
// daemon prepared; launcher.StartIn), and moving every thread into a new
// one (unshareCgroupAllThreads, a stop of the world that spins on a busy
// host: 3.5% of all CPU while creating sandboxes at 90/s) is not needed.
func ensureCgroupNamespace() error {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return fmt.Errorf("reading /proc/self/cgroup: %w", err)
	}
	if cgroupsAtRoot(string(b)) {
		return nil
	}
	return unshareCgroupAllThreads()
}

// cgroupsAtRoot says every line of a /proc/PID/cgroup reads "/": the
// process is at the root of its cgroup namespace in every hierarchy.
func cgroupsAtRoot(procCgroup string) bool {
	n := 0
	for line := range strings.Lines(procCgroup) {
		line = strings.TrimRight(line, "\n")
		if line == "" {
			continue
		}
		// hierarchy-ID:controllers:path; the path may hold ':'.
		_, rest, ok := strings.Cut(line, ":")
		if !ok {
			return false
		}
		if _, path, ok := strings.Cut(rest, ":"); !ok || path != "/" {
			return false
		}
		n++
	}
	return n > 0
}

// unshareCgroupAllThreads makes a new cgroup namespace and moves every
// thread of the process into it. unshare(2) changes only the calling
// thread; without the setns on the others, processes the agent later
// starts from another thread would sit in the host's cgroup namespace and
// see host cgroup paths in /proc/self/cgroup.
func unshareCgroupAllThreads() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("unshare cgroup namespace: %w", err)
	}
	fd, err := unix.Open("/proc/thread-self/ns/cgroup", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the new cgroup namespace: %w", err)
	}
	defer unix.Close(fd)
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_SETNS, uintptr(fd), unix.CLONE_NEWCGROUP, 0); e != 0 {
		return fmt.Errorf("moving every thread into the new cgroup namespace (the guest must be built with CGO_ENABLED=0): %w", e)
	}
	return nil
}

func mountOverlay(spec proto.BootSpec) error {
	if len(spec.LowerDirs) == 0 || spec.UpperDir == "" || spec.WorkDir == "" {
		return errors.New("boot spec needs lower_dirs, upper_dir and work_dir")
	}
	for _, d := range append(append([]string{}, spec.LowerDirs...), spec.UpperDir, spec.WorkDir, spec.Rootfs) {
		if strings.ContainsAny(d, ",:") {
			return fmt.Errorf("overlay path %q contains ',' or ':'", d)
		}
	}
	// The layers are named by fd, not by path: overlayfs shows its
	// options in /proc/self/mountinfo as given, and the sandbox must see
	// nothing of the host's layout there (/proc/self/fd/N names nothing).
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	byFD := func(dir string) (string, error) {
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", fmt.Errorf("opening overlay directory %s: %w", dir, err)
		}
		fds = append(fds, fd)
		return fmt.Sprintf("/proc/self/fd/%d", fd), nil
	}
	var lower []string
	for _, d := range spec.LowerDirs {
		p, err := byFD(d)
		if err != nil {
			return err
		}
		lower = append(lower, p)
	}
	upper, err := byFD(spec.UpperDir)
	if err != nil {
		return err
	}
	work, err := byFD(spec.WorkDir)
	if err != nil {
		return err
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr", strings.Join(lower, ":"), upper, work)
	if err := unix.Mount("overlay", spec.Rootfs, "overlay", unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mounting overlay root (lowerdir=%s,upperdir=%s,workdir=%s): %w",
			strings.Join(spec.LowerDirs, ":"), spec.UpperDir, spec.WorkDir, err)
	}
	return nil
}

// Files of /proc hidden behind /dev/null, and directories behind an empty
// read-only tmpfs (the runc/Docker list, plus a few).
var (
	maskedFiles = []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
		"/proc/latency_stats", "/proc/interrupts", "/proc/kallsyms", "/proc/kpagecount",
		"/proc/kpageflags", "/proc/kpagecgroup", "/proc/sysrq-trigger", "/proc/config.gz",
		"/proc/vmallocinfo", "/proc/pagetypeinfo", "/proc/slabinfo"}
	maskedDirs    = []string{"/proc/acpi", "/proc/scsi", "/proc/asound", "/proc/driver", "/proc/bus", "/proc/irq", "/proc/fs", "/proc/tty", "/sys/firmware", "/sys/kernel", "/sys/fs", "/sys/devices/virtual/powercap"}
	readonlyPaths = []string{"/proc/sys"}
	devices       = []string{"null", "zero", "full", "random", "urandom", "tty"}
)

// ProcMasks are the files of /proc hidden behind /dev/null and the
// directories of /proc hidden behind an empty read-only tmpfs in every
// sandbox's /proc, and the paths of /proc made read-only: the microvm
// tier's guest agent applies them to its guest's /proc too.
func ProcMasks() (files, dirs, readonly []string) {
	for _, d := range maskedDirs {
		if strings.HasPrefix(d, "/proc/") {
			dirs = append(dirs, d)
		}
	}
	return slices.Clone(maskedFiles), dirs, slices.Clone(readonlyPaths)
}

// Stage does what every sandbox's root needs and no sandbox decides, so
// that a pre-spawned init does it before it is given one: it makes the
// mount tree private, brings up lo, and builds on a tmpfs over the empty
// directory dir the sandbox's /proc (of its pid namespace, paths masked,
// /proc/sys read-only), /dev (a read-only tmpfs with the safe devices,
// devpts, mqueue) and /sys (of its net namespace, read-only, paths
// masked), with the views of the machine a program inside sees
// (view_linux.go; lxcfs is the mounted LXCFS, "" for none). enterStage
// moves them into the root.
func Stage(dir, lxcfs string) error {
	if dir == "" {
		return fmt.Errorf("%s not set: the daemon passes the stage directory", proto.BootStageEnv)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=755,size=64k"); err != nil {
		return fmt.Errorf("mounting the stage on %s: %w", dir, err)
	}
	if err := stageSpecial(dir, lxcfs); err != nil {
		return err
	}
	if err := limitUserNSFiles(nil); err != nil { // the defaults; Prepare sets others
		return err
	}
	return LoopbackUp()
}

// staged are the mounts Stage makes, moved into the root in this order.
var staged = []string{"/proc", "/dev", "/sys"}

func stageSpecial(root, lxcfs string) error {
	in := func(p string) string { return filepath.Join(root, p) }
	mkdir := func(p string) error {
		if err := os.MkdirAll(in(p), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("mkdir %s: %w", p, err)
		}
		return nil
	}
	for _, d := range staged {
		if err := mkdir(d); err != nil {
			return err
		}
	}
	const noexec = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := unix.Mount("proc", in("/proc"), "proc", noexec, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	if err := unix.Mount("tmpfs", in("/dev"), "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755,size=65536k"); err != nil {
		return fmt.Errorf("mounting /dev: %w", err)
	}
	for _, d := range devices {
		target := in("/dev/" + d)
		if err := os.WriteFile(target, nil, 0o666); err != nil {
			return fmt.Errorf("creating /dev/%s: %w", d, err)
		}
		if err := unix.Mount("/dev/"+d, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding /dev/%s: %w", d, err)
		}
	}
	for _, d := range []string{"/dev/pts", "/dev/shm", "/dev/mqueue"} {
		if err := mkdir(d); err != nil {
			return err
		}
	}
	if err := unix.Mount("devpts", in("/dev/pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC,
		"newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mounting /dev/pts: %w", err)
	}
	if err := unix.Mount("mqueue", in("/dev/mqueue"), "mqueue", noexec, ""); err != nil {
		// Not essential: leave the directory empty.
		_ = os.Remove(in("/dev/mqueue"))
	}
	for name, target := range map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd",
		"stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, in("/dev/"+name)); err != nil {
			return fmt.Errorf("linking /dev/%s: %w", name, err)
		}
	}
	if err := unix.Mount("sysfs", in("/sys"), "sysfs", noexec|unix.MS_RDONLY, ""); err != nil {
		// An empty, read-only /sys is an acceptable fallback.
		if err := unix.Mount("tmpfs", in("/sys"), "tmpfs", noexec|unix.MS_RDONLY, "size=0"); err != nil {
			return fmt.Errorf("mounting /sys: %w", err)
		}
	}
	// Read-only from here on; /dev/shm is mounted on its directory later,
	// sized for the sandbox.
	if err := unix.Mount("", in("/dev"), "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NOEXEC|unix.MS_RDONLY, "mode=755,size=65536k"); err != nil {
		return fmt.Errorf("remounting /dev read-only: %w", err)
	}
	for _, f := range maskedFiles {
		if _, err := os.Stat(in(f)); err != nil {
			continue
		}
		if err := unix.Mount("/dev/null", in(f), "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("masking %s: %w", f, err)
		}
	}
	// One empty directory of the stage's own tmpfs, bound read-only over
	// every masked directory: a superblock of their own would cost the
	// host at every memory cgroup's creation and removal (each memory
	// cgroup has a table of every superblock's shrinker, and a removal
	// walks every superblock's lists), and sandboxes are many. The stage
	// itself is out of reach once the init has pivoted: only these binds
	// and the view's files are left of it.
	empty := in("/.empty")
	if err := os.Mkdir(empty, 0o555); err != nil {
		return fmt.Errorf("mkdir %s: %w", empty, err)
	}
	for _, d := range maskedDirs {
		if fi, err := os.Stat(in(d)); err != nil || !fi.IsDir() {
			continue
		}
		if err := unix.Mount(empty, in(d), "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("masking %s: %w", d, err)
		}
		if err := unix.Mount("", in(d), "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|noexec, ""); err != nil {
			return fmt.Errorf("making the mask over %s read-only: %w", d, err)
		}
	}
	if err := stageView(root, in("/.view"), lxcfs); err != nil {
		return err
	}
	for _, p := range readonlyPaths {
		if err := unix.Mount(in(p), in(p), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("binding %s: %w", p, err)
		}
		if err := unix.Mount("", in(p), "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|noexec, ""); err != nil {
			return fmt.Errorf("making %s read-only: %w", p, err)
		}
	}
	return nil
}

// enterStage moves Stage's /proc, /dev and /sys (each with the mounts on
// it) into the sandbox's root and mounts its /dev/shm, sized for it.
func enterStage(stage string, spec proto.BootSpec) error {
	root := spec.Rootfs
	for _, d := range append(staged, "/tmp") {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("mkdir %s: %w", d, err)
		}
	}
	for _, d := range staged {
		if err := unix.Mount(filepath.Join(stage, d), filepath.Join(root, d), "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("moving %s into the root: %w", d, err)
		}
	}
	shm := spec.ShmSizeMB
	if shm <= 0 {
		shm = 64
	}
	if err := unix.Mount("shm", filepath.Join(root, "/dev/shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC,
		fmt.Sprintf("mode=1777,size=%dm", shm)); err != nil {
		return fmt.Errorf("mounting /dev/shm: %w", err)
	}
	return nil
}

func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("chdir to new root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	return nil
}

// LoopbackUp brings up lo in the sandbox's network namespace (or, on
// the microvm tier, in the guest kernel).
func LoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("reading lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	return nil
}
