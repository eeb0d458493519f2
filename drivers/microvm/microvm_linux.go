// Package microvm is the `microvm` isolation tier: every sandbox is a
// QEMU virtual machine (`-M microvm`) with its own guest kernel (Debian's,
// unpacked by scripts/install-microvm.sh), so a kernel bug reached from
// the sandbox stays inside the guest. KVM is used when QEMU's unprivileged
// user may open /dev/kvm and a trial VM boots under it, QEMU's software
// emulation (TCG) otherwise: the same machine, devices and code path, only
// slower.
//
// The guest boots an initramfs the driver builds (the guest agent as
// /init, in its `vm` mode, internal/guest/vminit, plus the kernel modules
// it needs); the template's layers are read-only erofs disks, the
// sandbox's writable layer is a sparse ext4 disk, assembled as an overlay
// inside the guest. The agent's channel is a virtio-serial port backed by
// a unix socket on the host that the driver listens on and hands to QEMU;
// the driver keeps one multiplexed (yamux) session on it and DialGuest
// opens a stream, so the daemon speaks the same guest protocol as on the
// other tiers.
//
// QEMU runs with no default devices, its seccomp sandbox on, as an
// unprivileged host uid, inside the sandbox's cgroups (cpu, memory and
// pids cover the VMM and the guest). A sandbox with egress joins the
// namespace the service prepared through a tap (network_linux.go); pause
// freezes QEMU in its cgroups; reset is the service's full path. Pause to
// disk, snapshots with memory and fork with memory save the VM's device
// state with QEMU's migration to a file and its RAM, a memfd the driver
// gives QEMU, as an image beside it (checkpoint_linux.go); the VMs
// restored from one image share its unwritten pages copy-on-write
// (ram_linux.go). Snapshots and forks of the files alone are refused
// (driver.Unsupported).
package microvm

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/drivers/internal/guestconn"
	"github.com/agentbox/agentbox/drivers/internal/lifecycle"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/cgroups"
	"github.com/agentbox/agentbox/internal/guest/harden"
	"github.com/agentbox/agentbox/internal/guest/harden/filter"
	"github.com/agentbox/agentbox/internal/guest/proto"
	"github.com/agentbox/agentbox/internal/guestclient"
	"github.com/agentbox/agentbox/internal/idrange"
)

// Name is the tier's name in the API.
const Name = "microvm"

// KernelRelease is the guest kernel scripts/install-microvm.sh unpacks.
const KernelRelease = "6.1.0-57-amd64"

// Where the kernel is installed and where the driver keeps its cache
// (initramfs, layer images, trial results); the environment overrides
// them (tests, other layouts).
const (
	DirEnv       = "AGENTBOX_MICROVM_DIR"
	CacheEnv     = "AGENTBOX_MICROVM_CACHE"
	defaultDir   = "/usr/local/lib/agentbox/microvm"
	defaultCache = "/var/cache/agentbox/microvm"
)

func init() {
	driver.Register(Name, func(o driver.Options) (driver.Driver, error) { return New(o) })
}

var (
	_ driver.Driver = (*Driver)(nil)
	_ io.Closer     = (*Driver)(nil)
)

// Driver is the microvm tier.
type Driver struct {
	opts      driver.Options
	log       *slog.Logger
	cg        cgroups.Manager
	qemu      string
	kernel    string
	initramfs string
	cache     string // host-wide: initramfs, trial results
	layers    string // the daemon's: template layer images
	mkfsErofs string
	mkfsExt4  string
	setpriv   string
	// Accel is "kvm" or "tcg", chosen once by New.
	Accel string
	// qemuUID is the host uid (and gid) QEMU runs as: the last of the
	// sandboxes' range, which owns no template file.
	qemuUID int
	kvmGID  int // the group of /dev/kvm, for QEMU under KVM; -1 none

	seccompFilter []byte
	exits         lifecycle.Exits
	ranges        idrange.Owners // the sandboxes' uid ranges

	mu   sync.Mutex
	mine map[string]*yamux.Session // sessions this instance opened, by socket

	images ramImages // checkpoints' RAM images that running VMs map
}

// private is the driver's part of a Handle.
type private struct {
	RunDir   string `json:"run_dir"`
	Writable string `json:"writable"` // the writable disk image
	// The VM's shape, which a restore of its checkpoint repeats: the
	// template layers (host directories) its disks were made of, its
	// vCPUs and memory, and whether it has a network device. Handles
	// from before checkpoints have none (their VMs cannot be saved).
	Layers   []string `json:"layers,omitempty"`
	CPUs     int      `json:"cpus,omitempty"`
	MemoryMB int64    `json:"memory_mb,omitempty"`
	Net      bool     `json:"net,omitempty"`
	// RAMFD is the VM's RAM's descriptor in QEMU when the VM maps a
	// memfd of its own (ram_linux.go: its checkpoints save the device
	// state and copy the RAM); 0 when its RAM is a checkpoint's image,
	// mapped copy-on-write, or anonymous (from before RAM files).
	RAMFD int `json:"ram_fd,omitempty"`
}

// New checks the host and the installed pieces, then boots a trial VM
// (its result is cached per agent, kernel, QEMU and accelerator): the
// tier is offered only when that works.
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
		return nil, errdefs.Invalid("microvm driver: uid_base must be > 0")
	}
	d := &Driver{opts: o, log: o.Logger, qemuUID: o.UIDBase + o.UIDCount - 1, kvmGID: -1}
	var err error
	for _, b := range []struct {
		p    *string
		name string
	}{{&d.qemu, "qemu-system-x86_64"}, {&d.mkfsErofs, "mkfs.erofs"}, {&d.mkfsExt4, "mkfs.ext4"}, {&d.setpriv, "setpriv"}} {
		if *b.p, err = lookPath(b.name); err != nil {
			return nil, errdefs.Precondition("microvm: %s not found (run scripts/install-deps.sh)", b.name)
		}
	}
	dir := envOr(DirEnv, defaultDir)
	d.kernel = filepath.Join(dir, "kernel-"+KernelRelease, "vmlinux")
	if _, err := os.Stat(d.kernel); err != nil {
		return nil, errdefs.Precondition("microvm: no guest kernel at %s (run scripts/install-deps.sh)", d.kernel)
	}
	if fi, err := os.Stat(o.GuestBinary); err != nil || fi.Mode()&0o111 == 0 {
		return nil, errdefs.Precondition("microvm: guest agent binary %q missing or not executable (%v)", o.GuestBinary, err)
	}
	d.cache = envOr(CacheEnv, defaultCache)
	d.layers = filepath.Join(d.cache, "layers")
	if o.CacheDir != "" {
		d.layers = filepath.Join(o.CacheDir, "layers")
	}
	for _, dir := range []string{d.cache, d.layers} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("microvm: cache: %w", err)
		}
	}
	var why string
	d.Accel, d.kvmGID, why = chooseAccel("/dev/kvm")
	if why != "" {
		d.log.Info("microvm: not using KVM: "+why, "accel", d.Accel)
	}
	if d.cg, err = cgroups.New(o.CgroupParent); err != nil {
		return nil, fmt.Errorf("microvm driver: cgroups: %w", err)
	}
	// clock_settime: the agent of a restored VM sets the guest's clock
	// (vminit.assume); no exec holds CAP_SYS_TIME to use it.
	prog, err := filter.ProgramAllowing("syslog", "clock_settime")
	if err != nil {
		return nil, fmt.Errorf("microvm driver: %w", err)
	}
	d.seccompFilter = harden.EncodeFilter(prog)
	if err := d.prepareInitramfs(dir); err != nil {
		return nil, fmt.Errorf("microvm: initramfs: %w", err)
	}
	if err := d.trial(); err != nil {
		if d.Accel != "kvm" {
			return nil, errdefs.Precondition("microvm: a trial boot (%s) failed: %v", d.Accel, err)
		}
		// A /dev/kvm that opens is no promise that KVM runs a guest: under
		// some nested hypervisors the guest stops at its first instruction
		// KVM cannot emulate. The tier is still there, emulated.
		d.log.Warn("microvm: a trial boot under KVM failed; using TCG (software emulation) instead", "err", err)
		d.Accel, d.kvmGID = "tcg", -1
		if terr := d.trial(); terr != nil {
			return nil, errdefs.Precondition("microvm: a trial boot failed under kvm (%v) and under tcg (%v)", err, terr)
		}
	}
	d.log.Info("microvm tier ready", "accel", d.Accel, "kernel", KernelRelease)
	return d, nil
}

// chooseAccel picks KVM when the device at path opens and QEMU, which
// runs as an unprivileged uid with at most the device's group, can open
// it too; else TCG, with why KVM was passed over (empty when there is no
// device at all). gid is the group to give QEMU, or -1.
func chooseAccel(path string) (accel string, gid int, why string) {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "tcg", -1, ""
		}
		return "tcg", -1, fmt.Sprintf("%s does not open: %v", path, err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "tcg", -1, fmt.Sprintf("%s: %v", path, err)
	}
	switch {
	case st.Mode&0o006 == 0o006:
		return "kvm", -1, ""
	case st.Mode&0o060 == 0o060 && st.Gid != 0: // never root's group
		return "kvm", int(st.Gid), ""
	}
	return "tcg", -1, fmt.Sprintf("%s is mode %04o (owner uid %d, gid %d) and QEMU runs unprivileged: give it a group"+
		" that may read and write it, as Debian's udev rule does (groupadd --system kvm; chgrp kvm %[1]s; chmod 0660 %[1]s)",
		path, st.Mode&0o7777, st.Uid, st.Gid)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func lookPath(name string) (string, error) {
	for _, dir := range []string{"/usr/bin", "/usr/sbin", "/sbin", "/bin", "/usr/local/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return exec.LookPath(name)
}

// prepareInitramfs builds (or finds in the cache) the initramfs of this
// guest binary and kernel.
func (d *Driver) prepareInitramfs(dir string) error {
	sum, err := fileDigest(d.opts.GuestBinary)
	if err != nil {
		return err
	}
	// The module list is part of the key: a new one is a new initramfs.
	sum = fmt.Sprintf("%x", sha256.Sum256([]byte(sum+"\x00"+strings.Join(guestModules, ","))))
	d.initramfs = filepath.Join(d.cache, "initramfs-"+KernelRelease+"-"+sum[:16]+".cpio")
	pruneCache(d.cache, d.initramfs)
	if _, err := os.Stat(d.initramfs); err == nil {
		now := time.Now()
		_ = os.Chtimes(d.initramfs, now, now) // in use: not pruned
		return nil
	}
	mods, err := moduleOrder(filepath.Join(dir, "kernel-"+KernelRelease, "modules"), guestModules)
	if err != nil {
		return err
	}
	return buildInitramfs(d.initramfs, d.opts.GuestBinary, mods)
}

// staleAfter is how long an initramfs (of another agent build) and its
// trial result stay in the host cache unused: a running VM read its
// initramfs at start, so only a daemon that starts within this time with
// that build would want it again.
const staleAfter = 24 * time.Hour

// pruneCache removes initramfs files and trial results older than
// staleAfter, but keep's.
func pruneCache(dir, keep string) {
	for _, pat := range []string{"initramfs-*.cpio", "trial-*.ok"} {
		files, _ := filepath.Glob(filepath.Join(dir, pat))
		for _, f := range files {
			if fi, err := os.Stat(f); err == nil && f != keep && time.Since(fi.ModTime()) > staleAfter {
				_ = os.Remove(f)
			}
		}
	}
}

// trial boots a VM with no disks (the agent serves from its initramfs)
// and waits for its agent to answer.
func (d *Driver) trial() error {
	qfi, err := os.Stat(d.qemu)
	if err != nil {
		return err
	}
	// The "ramfd" mark: a trial boots with its RAM in a memfd (ram_linux.go).
	stamp := filepath.Join(d.cache, fmt.Sprintf("trial-%s-%s-%d-%d-ramfd.ok", d.Accel,
		strings.TrimSuffix(filepath.Base(d.initramfs), ".cpio"), qfi.Size(), qfi.ModTime().Unix()))
	if _, err := os.Stat(stamp); err == nil {
		now := time.Now()
		_ = os.Chtimes(stamp, now, now)
		return nil
	}
	runDir, err := os.MkdirTemp("", "agentbox-microvm-trial-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(runDir)
	// KVM boots in well under a second; a KVM guest that has not answered
	// in 20 s has stopped (the caller then tries TCG), while TCG under
	// load can take tens of seconds.
	limit := 60 * time.Second
	if d.Accel == "kvm" {
		limit = 20 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	start := time.Now()
	ram, err := newRAM(128 << 20)
	if err != nil {
		return err
	}
	defer ram.Close()
	vm, err := d.launch(ctx, launchSpec{runDir: runDir, id: "trial", cpus: 1, memoryMB: 128, ram: ram, ramShared: true})
	if err != nil {
		return err
	}
	defer vm.kill()
	if err := d.connect(ctx, vm, &proto.VMHello{}); err != nil {
		return fmt.Errorf("%v%s", err, consoleTail(runDir))
	}
	d.log.Info("microvm: trial boot answered", "accel", d.Accel, "took", time.Since(start).Round(time.Millisecond))
	return os.WriteFile(stamp, nil, 0o644)
}

// launchSpec is one VM's shape.
type launchSpec struct {
	runDir   string
	id       string
	cpus     int
	memoryMB int64
	disks    []disk // layers topmost first, then the writable disk
	cgroup   cgroups.Cgroup
	// uid is the host uid (and gid) QEMU runs as; 0: the driver's
	// qemuUID.
	uid int
	// net is the VM's network (a sandbox with egress); nil: none.
	net *vmNet
	// ram is the VM's RAM, a memfd (ram_linux.go) QEMU maps shared when
	// ramShared (the VM's own), else privately, copy-on-write (a shared
	// image of a checkpoint).
	ram       *os.File
	ramShared bool
	// incoming, when set, is a saved VM state QEMU loads instead of
	// booting (a restore); the rest of the spec must be the saved VM's.
	// ignoreShared: the state leaves out the RAM, which ram holds.
	incoming     *os.File
	ignoreShared bool
}

type disk struct {
	path     string
	serial   string
	readOnly bool
}

// vm is a launched QEMU.
type vm struct {
	cmd    *exec.Cmd
	pid    int
	sock   string
	qmp    string // QEMU's control socket (qmp_linux.go)
	exited chan struct{}
	// ramFD is the VM's RAM's descriptor in QEMU when the VM maps it
	// shared (its own), else 0.
	ramFD int
	// incomingFD is the saved state's descriptor in QEMU, which waits
	// for migrate-incoming (startIncoming); 0 when it boots.
	incomingFD   int
	ignoreShared bool
}

// listenFile listens on the unix socket path (private to root) and
// returns the listener as a file for QEMU; the path stays when it closes.
func listenFile(path string) (*os.File, error) {
	_ = os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	f, err := ln.File()
	ln.Close()
	if err != nil {
		_ = os.Remove(path)
		return nil, err
	}
	_ = os.Chmod(path, 0o600)
	return f, nil
}

func (v *vm) kill() {
	_ = unix.Kill(v.pid, unix.SIGKILL)
	<-v.exited
}

// launch starts QEMU: hardened (no default devices, no user config, its
// seccomp sandbox on), as qemuUID with no capabilities, inside the
// sandbox's cgroups when given. Disks and the agent's socket are opened
// here and passed as file descriptors, so QEMU needs no access to any
// host path but the kernel and initramfs.
func (d *Driver) launch(ctx context.Context, s launchSpec) (_ *vm, err error) {
	var undo lifecycle.Undo
	defer undo.Run()
	sock := filepath.Join(s.runDir, "agent.sock")
	lnFile, err := listenFile(sock)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	defer lnFile.Close()
	undo.Add(func() { _ = os.Remove(sock) })
	qmpSock := filepath.Join(s.runDir, "qmp.sock")
	qmpFile, err := listenFile(qmpSock)
	if err != nil {
		return nil, fmt.Errorf("qemu's control socket: %w", err)
	}
	defer qmpFile.Close()
	undo.Add(func() { _ = os.Remove(qmpSock) })
	console, err := os.OpenFile(filepath.Join(s.runDir, "console.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer console.Close()

	extra := []*os.File{lnFile, qmpFile} // fds 3 and 4
	accel := []string{"-accel", "tcg,tb-size=64", "-cpu", "max"}
	cmdline := "console=ttyS0 quiet reboot=t panic=-1 tsc_early_khz=2000000"
	if d.Accel == "kvm" {
		accel = []string{"-accel", "kvm", "-cpu", "host"}
		cmdline = "console=ttyS0 quiet reboot=t panic=-1"
	}
	lowers := 0
	for _, dk := range s.disks {
		if dk.readOnly {
			lowers++
		}
	}
	cmdline += fmt.Sprintf(" %s=%d -- %s", proto.VMLowersArg, lowers, proto.VMMode)
	if s.ram == nil {
		return nil, errors.New("no guest RAM")
	}
	extra = append(extra, s.ram)
	ramFD := 3 + len(extra) - 1
	share := "off"
	if s.ramShared {
		share = "on"
	}
	args := []string{
		"-M", "microvm,memory-backend=" + ramID, "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
	}
	args = append(args, accel...)
	args = append(args,
		"-m", strconv.FormatInt(s.memoryMB, 10), "-smp", strconv.Itoa(s.cpus),
		// The backend opens a path read-write: the memfd's, reopened.
		"-object", fmt.Sprintf("memory-backend-file,id=%s,size=%dM,mem-path=/proc/self/fd/%d,share=%s", ramID, s.memoryMB, ramFD, share),
		"-kernel", d.kernel, "-initrd", d.initramfs, "-append", cmdline,
		"-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con",
		"-device", "virtio-serial-device",
		"-chardev", "socket,id=agent,fd=3,server=on,wait=off",
		"-device", "virtserialport,chardev=agent,name="+proto.VMPort,
		"-chardev", "socket,id=qmp,fd=4,server=on,wait=off", "-mon", "chardev=qmp,mode=control",
	)
	if s.net != nil {
		extra = append(extra, s.net.tap)
		args = append(args,
			"-netdev", fmt.Sprintf("tap,id=n0,fd=%d", 3+len(extra)-1),
			"-device", "virtio-net-device,netdev=n0,mac="+s.net.mac)
	}
	for i, dk := range s.disks {
		// QEMU takes from a set the descriptor whose access mode it
		// asks for, and opens a writable disk read-only too: the set of
		// a writable disk holds both.
		modes := []int{os.O_RDONLY}
		ro := "on"
		if !dk.readOnly {
			modes = append(modes, os.O_RDWR)
			ro = "off"
		}
		set := i + 1
		for _, mode := range modes {
			f, err := os.OpenFile(dk.path, mode|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, fmt.Errorf("disk %s: %w", dk.path, err)
			}
			defer f.Close()
			extra = append(extra, f)
			args = append(args, "-add-fd", fmt.Sprintf("fd=%d,set=%d", 3+len(extra)-1, set))
		}
		args = append(args,
			// No image locking: the driver alone opens these files, and a
			// VM left running after its state was saved takes its disks
			// back (cont), which QEMU's own locks on the descriptors of a
			// set refuse.
			"-drive", fmt.Sprintf("id=d%d,file=/dev/fdset/%d,file.locking=off,format=raw,if=none,read-only=%s,cache=unsafe", i, set, ro),
			"-device", fmt.Sprintf("virtio-blk-device,drive=d%d,serial=%s", i, dk.serial))
	}
	incomingFD := 0
	if s.incoming != nil {
		// The device model above is the saved VM's (checkpoint_linux.go):
		// QEMU loads its state from the file instead of booting, once
		// startIncoming has set the migration's capabilities.
		extra = append(extra, s.incoming)
		incomingFD = 3 + len(extra) - 1
		args = append(args, "-incoming", "defer")
	}
	// A shell, as root, moves itself into the sandbox's cgroups and execs
	// setpriv, which drops to the sandbox's QEMU uid with no capabilities
	// and no_new_privs and execs QEMU.
	uid := d.qemuUID
	if s.uid != 0 {
		uid = s.uid
	}
	var procs []string
	if s.cgroup != nil {
		for _, p := range s.cgroup.Paths() {
			procs = append(procs, filepath.Join(p, "cgroup.procs"))
		}
	}
	groups := "--clear-groups"
	if d.Accel == "kvm" && d.kvmGID >= 0 {
		groups = "--groups=" + strconv.Itoa(d.kvmGID)
	}
	shArgs := []string{"-c", `for f in $CGPROCS; do echo $$ > "$f" || exit 111; done; unset CGPROCS; exec "$@"`, "sh",
		d.setpriv, "--reuid=" + strconv.Itoa(uid), "--regid=" + strconv.Itoa(uid), groups,
		"--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", d.qemu}
	shArgs = append(shArgs, args...)
	cmd := exec.Command("/bin/sh", shArgs...)
	cmd.Env = []string{"CGPROCS=" + strings.Join(procs, " "), "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = console, console
	cmd.ExtraFiles = extra
	// Its own session: a daemon restart (or its process group's signals)
	// leaves the VM running, to be adopted. Its own empty network, mount,
	// IPC and UTS namespaces: QEMU needs none of the host's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true,
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting qemu: %w", err)
	}
	v := &vm{cmd: cmd, pid: cmd.Process.Pid, sock: sock, qmp: qmpSock, exited: make(chan struct{}),
		incomingFD: incomingFD, ignoreShared: s.ignoreShared}
	if s.ramShared {
		v.ramFD = ramFD
	}
	go func() { _ = cmd.Wait(); close(v.exited) }()
	undo.Release()
	return v, nil
}

// consoleTail is what a VM's serial console and QEMU's own output say
// about a failed boot: the agent's last lines (its error, before the
// kernel's panic), QEMU's, and the console's last lines.
func consoleTail(runDir string) string {
	b, _ := os.ReadFile(filepath.Join(runDir, "console.log"))
	var said []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "agentbox-guest") || strings.Contains(l, "level=") ||
			strings.Contains(l, "qemu-system") || strings.Contains(l, "Kernel panic") {
			said = append(said, strings.TrimSpace(l))
		}
	}
	if len(said) > 6 {
		said = said[len(said)-6:]
	}
	if s := lastLines(b, 3); s != "" {
		said = append(said, s)
	}
	if len(said) == 0 {
		return ""
	}
	return ": console: " + strings.Join(said, " | ")
}

// sessions are the open multiplexed sessions, by agent socket: one per VM
// in this process (the socket takes one host connection at a time, so a
// second driver instance in the same process, as in the conformance
// suite's restart, must share it).
var sessions sync.Map // string -> *yamux.Session

// connect opens the agent's channel: it connects to the socket QEMU
// listens on, says hello, starts the multiplexer and waits until the
// agent answers a ping.
func (d *Driver) connect(ctx context.Context, v *vm, hello *proto.VMHello) error {
	// The first hello waits as long as the boot may take.
	return d.open(ctx, v, hello, 0, "during boot")
}

// open dials v's agent with hello (dialSession; firstWait is its first
// wait for the ack, 0 for as long as ctx allows), waits until the agent
// answers a ping or QEMU exits (when: said in the error), and keeps the
// session.
func (d *Driver) open(ctx context.Context, v *vm, hello *proto.VMHello, firstWait time.Duration, when string) error {
	sess, err := dialSession(ctx, v.sock, hello, firstWait)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- ready(ctx, sess) }()
	select {
	case err = <-errc:
	case <-v.exited:
		err = errors.New("qemu exited " + when)
	}
	if err != nil {
		sess.Close()
		return err
	}
	d.keep(v.sock, sess)
	return nil
}

// keep records sess as the VM's session, opened by this instance.
func (d *Driver) keep(sock string, sess *yamux.Session) {
	sessions.Store(sock, sess)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mine == nil {
		d.mine = map[string]*yamux.Session{}
	}
	d.mine[sock] = sess
}

// Close implements io.Closer (the daemon calls it when it stops): the
// sessions this instance opened close, the VMs go on running, and their
// agents wait for the next daemon, which adopts them over new sessions.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for sock, sess := range d.mine {
		sessions.CompareAndDelete(sock, sess)
		sess.Close()
	}
	d.mine = nil
	return nil
}

// dialSession connects to a VM's agent socket, says hello and waits for
// the agent's ack of that hello (proto.VMAckFor its nonce) until ctx is
// done or, when ackWait is set, that long; a guest that has not acked by
// then, or whose end closed, gets a new connection and a new hello, with
// twice the wait (up to 8 s), until ctx is done. That is the race the ack
// closes (proto.VMHello): an agent that reads the new host's hello as its
// old session's data drops it. Each connection's hello has its own nonce,
// so an ack of an older hello (one the agent answered after this side
// gave up on it, and which reached this connection) is skipped with
// whatever else came first, and never taken for this one's.
func dialSession(ctx context.Context, sock string, hello *proto.VMHello, ackWait time.Duration) (*yamux.Session, error) {
	for {
		hello.Nonce = newNonce()
		if hello.Time != 0 {
			hello.Time = time.Now().UnixNano() // the clock of this try
		}
		line, err := json.Marshal(hello)
		if err != nil {
			return nil, err
		}
		c, err := helloConn(ctx, sock, line, proto.VMAckFor(hello.Nonce), ackWait)
		if err == nil {
			return startClient(c)
		}
		if !errors.Is(err, errNoAck) || ctx.Err() != nil {
			return nil, err
		}
		if ackWait > 0 {
			ackWait = min(2*ackWait, 8*time.Second)
		}
	}
}

// errNoAck: the connection gave no ack of its hello in time, or ended
// before it (QEMU closes the socket's connection when the guest's end
// resets); the hello is said again on a new one.
var errNoAck = errors.New("the guest agent did not ack the hello")

// newNonce is a hello's nonce: 16 random hex digits.
func newNonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail
	return hex.EncodeToString(b)
}

// helloConn connects to sock, writes the hello line and reads up to ack.
func helloConn(ctx context.Context, sock string, line []byte, ack string, ackWait time.Duration) (net.Conn, error) {
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	msg := make([]byte, 0, len(proto.VMHelloPrefix)+len(line)+1)
	msg = append(append(append(msg, proto.VMHelloPrefix...), line...), '\n')
	if _, err := c.Write(msg); err != nil {
		c.Close()
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	if ackWait > 0 && (deadline.IsZero() || time.Until(deadline) > ackWait) {
		deadline = time.Now().Add(ackWait)
	}
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Now()) })
	defer stop()
	c.SetReadDeadline(deadline)
	// Byte by byte up to the ack, so that nothing after it is taken from
	// the multiplexer; what comes before it is an old session's, or the
	// agent's answer to an older hello.
	var got []byte
	b := make([]byte, 1)
	for !bytes.HasSuffix(got, []byte(ack)) {
		if _, err := c.Read(b); err != nil {
			c.Close()
			if ctx.Err() != nil {
				return nil, fmt.Errorf("guest agent did not answer: %w", ctx.Err())
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return nil, errNoAck
			}
			if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
				// Not fatal: a new connection after a pause.
				select {
				case <-ctx.Done():
					return nil, fmt.Errorf("guest agent did not answer: %w", ctx.Err())
				case <-time.After(20 * time.Millisecond):
				}
				return nil, errNoAck
			}
			return nil, fmt.Errorf("guest agent's hello: %v", err)
		}
		if got = append(got, b[0]); len(got) > 1<<20 {
			c.Close()
			return nil, errors.New("guest agent's hello: no ack in 1 MiB")
		}
	}
	c.SetReadDeadline(time.Time{})
	return c, nil
}

func startClient(c net.Conn) (*yamux.Session, error) {
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.EnableKeepAlive = false
	sess, err := yamux.Client(c, cfg)
	if err != nil {
		c.Close()
		return nil, err
	}
	return sess, nil
}

// ready pings the agent over sess until it answers.
func ready(ctx context.Context, sess *yamux.Session) error {
	c := guestclient.Dial(func(ctx context.Context) (net.Conn, error) { return sess.Open() })
	info, err := c.Ping(ctx)
	if err != nil {
		return fmt.Errorf("guest agent did not answer: %w", err)
	}
	if err := proto.Supported(info); err != nil {
		return errdefs.Precondition("the guest agent answered, but %v", err)
	}
	return nil
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return Name }

// MinMemoryMB is the least memory a microvm sandbox may ask for: its
// VM's RAM, which the guest kernel and its initramfs share with the
// workload (the driver's trial VM boots in as much).
const MinMemoryMB = 128

// qemuReserve is the host memory above the guest's for QEMU itself (its
// code, TCG's translation cache, device state); qemuPids its threads.
const (
	qemuReserve = 192 << 20
	qemuPids    = 128
)

// Create implements driver.Driver.
func (d *Driver) Create(ctx context.Context, spec *driver.Spec) (*driver.Handle, error) {
	return d.start(ctx, spec, nil)
}

// start boots the VM of spec, or, with saved, restores it from the
// checkpoint saved describes (checkpoint_linux.go): then the VM's shape
// (vCPUs, memory, layers, network device) and writable disk are the
// saved VM's, everything else spec's.
func (d *Driver) start(ctx context.Context, spec *driver.Spec, saved *savedVM) (_ *driver.Handle, err error) {
	var undo lifecycle.Undo
	defer undo.Run()
	cpus := max(1, int(math.Ceil(spec.CPU)))
	memoryMB := spec.MemoryMB
	if saved == nil && memoryMB > 0 && memoryMB < MinMemoryMB {
		// Less does not boot the guest kernel with its initramfs: the
		// create would end in a dead VM and a refused socket.
		return nil, errdefs.Invalid("microvm: memory_mb %d is below the %d MiB the microvm tier needs (the sandbox's memory is its VM's RAM, guest kernel included): ask for %d or more, or use --isolation container or gvisor",
			memoryMB, MinMemoryMB, MinMemoryMB)
	}
	layers := spec.Layers
	if saved != nil {
		cpus, memoryMB, layers = saved.CPUs, saved.MemoryMB, saved.Layers
		if saved.Net != (spec.NetNS != "") {
			return nil, errdefs.Precondition("microvm: the saved VM had %s and this sandbox has %s: a VM restores only into a sandbox with the same network (egress none or not)",
				netWord(saved.Net), netWord(spec.NetNS != ""))
		}
	}
	var disks []disk
	for i, l := range layers {
		img, err := d.layerImage(ctx, l)
		if err != nil {
			return nil, fmt.Errorf("microvm: %w", err)
		}
		disks = append(disks, disk{path: img, serial: "agentbox-l" + strconv.Itoa(i), readOnly: true})
	}
	// The writable disk lives in the sandbox's writable layer (its work
	// directory, which no overlay uses on this tier), where storage's
	// disk limit and removal apply.
	writable := filepath.Join(spec.WorkDir, "microvm-rw.img")
	if saved != nil {
		_ = os.Remove(writable)
		err = cloneFile(ctx, saved.disk(), writable)
	} else {
		err = d.writableImage(ctx, writable, spec.DiskMB)
	}
	if err != nil {
		return nil, fmt.Errorf("microvm: %w", err)
	}
	undo.Add(func() { _ = os.Remove(writable) })
	disks = append(disks, disk{path: writable, serial: proto.VMUpperSerial})
	cg, err := d.cg.Create(spec.ID, cgroups.Resources{
		CPU:         spec.CPU,
		MemoryBytes: max(spec.MemoryMB, memoryMB)<<20 + qemuReserve,
		Pids:        qemuPids,
	})
	if err != nil {
		return nil, fmt.Errorf("microvm: creating cgroup: %w", err)
	}
	undo.Add(func() { _ = cg.Destroy() })
	vmDir := filepath.Join(spec.RunDir, "vm")
	if err := os.MkdirAll(vmDir, 0o700); err != nil {
		return nil, err
	}
	// QEMU runs as the last uid of the sandbox's own range (of the
	// canonical range without ranges): no two sandboxes' QEMUs share a
	// host uid, and it owns no template file (internal/idrange).
	var ids *idrange.Range
	qemuUID := 0
	if ids, err = d.ranges.Take(d.opts.IDRanges, spec.ID); err != nil {
		return nil, err
	}
	if ids != nil {
		undo.Add(ids.Release)
		qemuUID = ids.Base() + ids.Count() - 1
	}
	// A sandbox with egress: the VM joins the namespace the service
	// prepared through a tap (network_linux.go).
	var vnet *vmNet
	if spec.NetNS != "" {
		if vnet, err = setupNet(spec.NetNS); err != nil {
			return nil, fmt.Errorf("microvm: %w", err)
		}
		defer vnet.tap.Close() // QEMU holds its own
	}
	ls := launchSpec{runDir: vmDir, id: spec.ID, cpus: cpus, memoryMB: memoryMB, disks: disks, cgroup: cg, uid: qemuUID, net: vnet}
	// The VM's RAM (ram_linux.go): a snapshot's or fork's image shared
	// copy-on-write, or a memfd of its own (empty, or filled from the
	// image of its pause to disk).
	var img *ramImage
	switch {
	case saved != nil && saved.RAM == ramInImage && !saved.Stopped:
		if img, err = d.images.take(saved.ram(), memoryMB<<20); err != nil {
			return nil, fmt.Errorf("microvm: %w", err)
		}
		undo.Add(func() { d.images.put(img) })
		ls.ram, ls.ignoreShared = img.f, true
	case saved != nil && saved.RAM == ramInImage:
		if ls.ram, err = fillRAM(saved.ram(), memoryMB<<20, false); err != nil {
			return nil, fmt.Errorf("microvm: %w", err)
		}
		defer ls.ram.Close()
		ls.ramShared, ls.ignoreShared = true, true
	default:
		if ls.ram, err = newRAM(memoryMB << 20); err != nil {
			return nil, fmt.Errorf("microvm: %w", err)
		}
		defer ls.ram.Close()
		ls.ramShared = true
	}
	if saved != nil {
		if ls.incoming, err = os.Open(saved.state()); err != nil {
			return nil, fmt.Errorf("microvm: %w", err)
		}
		defer ls.incoming.Close()
	}
	v, err := d.launch(ctx, ls)
	if err != nil {
		return nil, fmt.Errorf("microvm: %w", err)
	}
	undo.Add(func() { v.kill(); _ = os.Remove(v.sock); _ = os.Remove(v.qmp) })
	boot := &proto.BootSpec{
		SandboxID: spec.ID, Hostname: spec.Hostname, Env: spec.Env, User: spec.User, Workdir: spec.Workdir,
		Seccomp: d.opts.Seccomp, SeccompFilter: d.seccompFilter, UserLimits: spec.UserLimits,
	}
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	hello := &proto.VMHello{Boot: boot, Pids: spec.Pids}
	if vnet != nil {
		hello.Net = &vnet.cfg
	}
	if saved != nil {
		err = d.connectRestored(cctx, v, hello)
	} else {
		err = d.connect(cctx, v, hello)
	}
	if err != nil {
		return nil, fmt.Errorf("microvm: %w%s", err, consoleTail(vmDir))
	}
	pv, _ := json.Marshal(private{RunDir: vmDir, Writable: writable, Layers: layers, CPUs: cpus, MemoryMB: memoryMB, Net: vnet != nil, RAMFD: v.ramFD})
	h := &driver.Handle{ID: spec.ID, Pid: v.pid, Socket: v.sock, Accelerator: d.Accel, Private: pv}
	if ids != nil {
		h.UIDBase = ids.Base()
	}
	h.PidStart, _ = guestconn.PidStartTime(v.pid)
	d.exits.Set(spec.ID, v.exited)
	undo.Release()
	if img != nil {
		go func() { <-v.exited; d.images.put(img) }()
	}
	d.ranges.Set(spec.ID, ids)
	return h, nil
}

func netWord(has bool) string {
	if has {
		return "a network interface"
	}
	return "no network interface"
}

func priv(h *driver.Handle) private {
	var p private
	_ = json.Unmarshal(h.Private, &p)
	return p
}

// DialGuest implements driver.Driver: a new stream on the VM's session.
func (d *Driver) DialGuest(ctx context.Context, h *driver.Handle) (net.Conn, error) {
	s, ok := sessions.Load(h.Socket)
	if !ok {
		return nil, errdefs.Unavailable("sandbox %s: guest agent unreachable: no session", h.ID)
	}
	c, err := s.(*yamux.Session).Open()
	if err != nil {
		return nil, errdefs.Unavailable("sandbox %s: guest agent unreachable: %v", h.ID, err)
	}
	return c, nil
}

// Exited implements driver.Driver.
func (d *Driver) Exited(h *driver.Handle) <-chan struct{} { return d.exits.Exited(h.ID) }

// Destroy implements driver.Driver: close the session, kill QEMU (and
// anything else in the sandbox's cgroups), remove the socket and the
// writable disk.
func (d *Driver) Destroy(ctx context.Context, h *driver.Handle) error {
	var errs []error
	if s, ok := sessions.LoadAndDelete(h.Socket); ok {
		s.(*yamux.Session).Close()
	}
	d.mu.Lock()
	delete(d.mine, h.Socket)
	d.mu.Unlock()
	if h.Pid > 0 && guestconn.Alive(h) {
		_ = unix.Kill(h.Pid, unix.SIGKILL)
	}
	if cg, err := d.cg.Open(h.ID); err == nil {
		if err := cg.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("removing cgroup: %w", err))
		}
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		errs = append(errs, err)
	}
	if ch, ours := d.exits.Take(h.ID); ours {
		select {
		case <-ch:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("waiting for qemu to exit: %w", ctx.Err()))
		}
	}
	if h.Socket != "" {
		_ = os.Remove(h.Socket)
	}
	if p := priv(h); p.RunDir != "" {
		_ = os.Remove(filepath.Join(p.RunDir, "qmp.sock"))
	}
	if p := priv(h); p.Writable != "" {
		if err := os.Remove(p.Writable); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	d.ranges.Destroyed(h.ID, len(errs) == 0, d.log)
	return errors.Join(errs...)
}

// Adopt implements driver.Driver: the QEMU process must still run, and
// its agent answer on a new session (it reopens its port when the old
// host went away).
func (d *Driver) Adopt(ctx context.Context, h *driver.Handle) error {
	if h.Pid <= 0 || !guestconn.Alive(h) {
		return errdefs.NotFound("sandbox %s: qemu process %d is gone", h.ID, h.Pid)
	}
	// A paused VM's agent cannot answer: its session is made at Resume.
	if !d.frozen(h.ID) {
		if err := d.reconnect(ctx, h); err != nil {
			return errdefs.NotFound("sandbox %s: %v", h.ID, err)
		}
	}
	if err := d.ranges.Adopt(d.opts.IDRanges, h.ID, h.UIDBase); err != nil {
		return err
	}
	ch, _ := guestconn.WatchExit(h.Pid)
	d.exits.Set(h.ID, ch)
	return nil
}

// reconnect makes a new session to the VM's agent unless it has an open
// one (after a daemon restart, or after a pause whose silence closed the
// old one: the agent then waits for the next hello).
func (d *Driver) reconnect(ctx context.Context, h *driver.Handle) error {
	if s, ok := sessions.Load(h.Socket); ok && !s.(*yamux.Session).IsClosed() {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sess, err := dialSession(actx, h.Socket, &proto.VMHello{}, time.Second)
	if err != nil {
		return err
	}
	if err := ready(actx, sess); err != nil {
		sess.Close()
		return err
	}
	d.keep(h.Socket, sess)
	return nil
}

// TakesNetNSAtCreate implements driver.NetNSAtCreate: a VM's NIC is
// made when QEMU starts (network_linux.go).
func (d *Driver) TakesNetNSAtCreate() {}

// Pause implements driver.Pauser: QEMU's processes are frozen in the
// sandbox's cgroups, so the VM stops where it is, its memory kept.
func (d *Driver) Pause(ctx context.Context, h *driver.Handle) error {
	cg, err := d.cg.Open(h.ID)
	if err != nil {
		return err
	}
	return cg.Freeze()
}

// Resume implements driver.Pauser: QEMU is thawed, and the agent's
// session made again if the pause closed it.
func (d *Driver) Resume(ctx context.Context, h *driver.Handle) error {
	cg, err := d.cg.Open(h.ID)
	if err != nil {
		return err
	}
	if err := cg.Thaw(); err != nil {
		return err
	}
	if err := d.reconnect(ctx, h); err != nil {
		return fmt.Errorf("sandbox %s: resumed, but %w", h.ID, err)
	}
	return nil
}

// frozen reports whether sandbox id's cgroup is frozen (paused).
func (d *Driver) frozen(id string) bool { return lifecycle.Frozen(d.cg, id) }

// Cleanup implements driver.Driver: the cgroups of unknown sandboxes go,
// and with them their QEMU processes (the cgroup parent is shared with
// the other tiers, whose Cleanup does the same).
func (d *Driver) Cleanup(ctx context.Context, keep map[string]bool) ([]string, error) {
	return lifecycle.RemoveLeftovers(d.cg, keep)
}

var _ driver.Unsupported = (*Driver)(nil)

// Unsupported implements driver.Unsupported: a snapshot or fork of the
// files alone. The tier's files are an ext4 disk image, not a layer
// directory the service can capture; a snapshot or fork with memory
// saves the disk with the VM (checkpoint_linux.go).
func (d *Driver) Unsupported(op driver.Op) error {
	if op != driver.OpFileSnapshot {
		return nil
	}
	return errdefs.Precondition("the microvm tier snapshots and forks with memory only (its files are a disk image saved with the VM): use a snapshot or fork with memory, or --isolation container or gvisor")
}
