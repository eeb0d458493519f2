// Package vminit is `agentbox-guest vm`: PID 1 of a microvm-tier sandbox's
// virtual machine (drivers/microvm). The guest kernel starts it as the
// initramfs's /init. It loads the kernel modules the daemon put in the
// initramfs (virtio, erofs, ext4, overlay), mounts the template's layers
// (read-only erofs disks) under the sandbox's writable ext4 disk as an
// overlay, switches into that root, and serves the guest protocol on the
// virtio-serial port proto.VMPort through a stream multiplexer (yamux):
// the port is one byte stream, the host opens one stream per connection.
// When the host goes away (a daemon restart) the port reads EOF and the
// agent waits for the next host to connect, whose first line is a
// proto.VMHello (the boot spec, on the first connection only; and again
// on the first after a restore from another VM's saved state, whose
// identity and network the agent then takes).
package vminit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/guest/boot"
	"github.com/agentbox/agentbox/internal/guest/harden"
	"github.com/agentbox/agentbox/internal/guest/proto"
	"github.com/agentbox/agentbox/internal/version"
)

// ModulesDir holds the initramfs's kernel modules, loaded in name order
// (the daemon numbers them, dependencies first).
const ModulesDir = "/modules"

// Run is `agentbox-guest vm`. Call it on the main thread, locked to it;
// it unlocks it. It returns only on failure (the kernel then panics and
// QEMU exits: -no-reboot, panic=-1).
func Run() error {
	if os.Getpid() != 1 {
		return errors.New("vm mode is the init of a microvm guest (pid 1)")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	for _, m := range []struct{ src, dst, fs string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"},
	} {
		_ = os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.fs, unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mounting %s: %w", m.dst, err)
		}
	}
	if err := loadModules(ModulesDir); err != nil {
		return err
	}
	lowers, err := cmdlineInt(proto.VMLowersArg)
	if err != nil {
		return err
	}
	trial := lowers == 0
	if !trial {
		if err := mountRoot(lowers); err != nil {
			return err
		}
		if err := switchRoot("/newroot"); err != nil {
			return err
		}
		if err := mountSpecial(); err != nil {
			return err
		}
	}
	if err := boot.LoopbackUp(); err != nil {
		log.Warn("loopback", "err", err)
	}
	port, err := findPort(proto.VMPort)
	if err != nil {
		return err
	}
	// The first host connection gives the sandbox.
	f, err := os.OpenFile(port, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", port, err)
	}
	hello, err := accept(f, log)
	if err != nil {
		return err
	}
	spec := proto.BootSpec{}
	if hello.Boot != nil {
		spec = *hello.Boot
	}
	if spec.Hostname != "" {
		if err := unix.Sethostname([]byte(spec.Hostname)); err != nil {
			return fmt.Errorf("hostname: %w", err)
		}
	}
	// The guest kernel's own per-user counts and the rlimits every
	// process inherits, as the container tier's init sets them.
	if err := boot.LimitUserNS(spec.UserLimits); err != nil {
		return fmt.Errorf("user limits: %w", err)
	}
	if hello.Net != nil {
		if err := configureNet(hello.Net); err != nil {
			return fmt.Errorf("network: %w", err)
		}
	}
	var cgs []guest.CgroupDir
	if !trial {
		if cgs, err = workloadCgroup(hello.Pids); err != nil {
			return fmt.Errorf("sandbox cgroups: %w", err)
		}
		// Last of the writes under /proc/sys (the hostname, the user
		// limits, the network's).
		if err := maskProc(); err != nil {
			return err
		}
	}
	// From here on as the other tiers' agents: no capabilities for any
	// exec (every thread drops its bounding set before it forks one), the
	// seccomp filter on every thread, nothing of ours readable.
	err = harden.DropBoundingSetOnThread()
	runtime.UnlockOSThread()
	if err != nil {
		return err
	}
	if spec.Seccomp {
		err = harden.InstallEncoded(spec.SeccompFilter) // the driver's, with syslog allowed
	} else {
		err = harden.NoNewPrivs()
	}
	if err != nil {
		return fmt.Errorf("hardening: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl dumpable: %w", err)
	}
	srv := guest.NewServer(guest.Config{
		Env:     spec.Env,
		User:    spec.User,
		Workdir: spec.Workdir,
		Cgroups: cgs,
		Logger:  log.With("sandbox", spec.SandboxID),
		Version: version.Version,
	})
	for {
		serveSession(srv, f, log)
		if hello, err = accept(f, log); err != nil {
			return err
		}
		assume(srv, hello, log)
	}
}

// assume applies a later hello's sandbox: one restored from a checkpoint
// of another VM (a snapshot with memory, a fork, a resume from disk)
// takes its own hostname, default environment, pids limit and address
// here, and the host's time (its clock stood still while it was saved).
// A re-adopting host's hello carries none of them. The agent is hardened
// by now: the hostname is written through /proc (sethostname is not in
// the seccomp filter).
func assume(srv *guest.Server, hello proto.VMHello, log *slog.Logger) {
	if hello.Time > 0 {
		// The driver's seccomp filter lets clock_settime through for
		// this: no exec holds CAP_SYS_TIME, so the kernel refuses it
		// to every other process.
		ts := unix.NsecToTimespec(hello.Time)
		if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
			log.Warn("restore: setting the clock", "err", err)
		}
	}
	if b := hello.Boot; b != nil {
		if b.Hostname != "" {
			err := errors.New("no handle on /proc/sys/kernel/hostname")
			if hostnameFile != nil {
				_, err = unix.Pwrite(int(hostnameFile.Fd()), []byte(b.Hostname), 0)
			}
			if err != nil {
				log.Warn("restore: hostname", "err", err)
			}
		}
		srv.SetEnv(b.Env)
	}
	if hello.Pids > 0 {
		if err := os.WriteFile("/sys/fs/cgroup/pids/workload/pids.max", []byte(strconv.FormatInt(hello.Pids, 10)), 0); err != nil {
			log.Warn("restore: pids.max", "err", err)
		}
	}
	if hello.Net != nil {
		if err := reconfigureNet(hello.Net); err != nil {
			log.Warn("restore: network", "err", err)
		}
	}
}

// serveSession serves one host connection until it ends.
func serveSession(srv *guest.Server, port *os.File, log *slog.Logger) {
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.EnableKeepAlive = false // the host notices a dead guest by its QEMU's exit
	sess, err := yamux.Server(keepOpen{port}, cfg)
	if err != nil {
		log.Warn("multiplexer", "err", err)
		return
	}
	err = srv.Serve(sess)
	log.Info("host session ended", "err", err)
	_ = sess.Close()
}

// keepOpen is the port for one session: the session's end does not close
// it. The agent keeps the port open for the VM's life, because closing a
// virtio-serial port drops what it holds, and a new host's hello may be
// there already.
type keepOpen struct{ *os.File }

func (keepOpen) Close() error { return nil }

// accept waits on the port for a host to connect and say hello, and acks
// it (proto.VMAckFor its nonce). While no host is connected the port
// reads EOF at once, so it retries with a short sleep. Bytes that are not
// a hello (a former session's, or what is left of a hello that a failed
// session read) are skipped, also before a hello on its line: the host,
// when it got no ack, says hello again.
func accept(port io.ReadWriter, log *slog.Logger) (proto.VMHello, error) {
	for delay := time.Millisecond; ; delay = min(delay*2, 20*time.Millisecond) {
		line, err := readLine(port, 1<<20)
		if err == nil {
			hello, err := parseHello(line)
			if err == nil {
				if _, err = io.WriteString(port, proto.VMAckFor(hello.Nonce)); err == nil {
					log.Info("host connected")
					return hello, nil
				}
			}
			log.Info("not a hello; waiting for the host again", "err", err)
			continue
		}
		if !errors.Is(err, io.EOF) {
			return proto.VMHello{}, fmt.Errorf("reading the agent's port: %w", err)
		}
		time.Sleep(delay)
	}
}

// parseHello finds the hello in line: the first proto.VMHelloPrefix that
// the rest of the line follows as a VMHello.
func parseHello(line []byte) (proto.VMHello, error) {
	err := errors.New("no hello on the line")
	for rest := line; ; {
		i := bytes.Index(rest, []byte(proto.VMHelloPrefix))
		if i < 0 {
			return proto.VMHello{}, err
		}
		rest = rest[i+len(proto.VMHelloPrefix):]
		var hello proto.VMHello
		if err = json.Unmarshal(rest, &hello); err == nil {
			return hello, nil
		}
	}
}

// readLine reads one line byte by byte, so that nothing after it (the
// multiplexer's first frame) is consumed.
func readLine(r io.Reader, max int) ([]byte, error) {
	var buf []byte
	b := make([]byte, 1)
	for len(buf) < max {
		n, err := r.Read(b)
		if n == 1 {
			if b[0] == '\n' {
				return buf, nil
			}
			buf = append(buf, b[0])
			continue
		}
		if err == nil {
			err = io.EOF
		}
		return nil, err
	}
	return nil, errors.New("the host's hello is too long")
}

// loadModules loads every module in dir, in name order; one already in
// the kernel is fine.
func loadModules(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("kernel modules: %w", err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".ko") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("loading module %s: %w", n, err)
		}
	}
	return nil
}

// cmdlineInt reads key=N from the kernel's command line (0 if absent).
func cmdlineInt(key string) (int, error) {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return 0, err
	}
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, nil
}

// disksBySerial waits until want virtio disks are there and maps each
// disk's serial to its device node.
func disksBySerial(want int) (map[string]string, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		out := map[string]string{}
		ents, _ := os.ReadDir("/sys/block")
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join("/sys/block", e.Name(), "serial"))
			if err != nil {
				continue
			}
			out[string(bytes.TrimSpace(b))] = "/dev/" + e.Name()
		}
		ready := len(out) >= want
		for _, dev := range out {
			if _, err := os.Stat(dev); err != nil {
				ready = false
			}
		}
		if ready {
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("found disks %v, want %d", out, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mountRoot mounts the sandbox's root on /newroot: the read-only layers
// (erofs, topmost first) under the writable disk's upper directory.
func mountRoot(lowers int) error {
	disks, err := disksBySerial(lowers + 1)
	if err != nil {
		return err
	}
	var lowerDirs []string
	for i := range lowers {
		dev, ok := disks["agentbox-l"+strconv.Itoa(i)]
		if !ok {
			return fmt.Errorf("layer disk %d missing (have %v)", i, disks)
		}
		dir := "/layers/" + strconv.Itoa(i)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(dev, dir, "erofs", unix.MS_RDONLY|unix.MS_NODEV, ""); err != nil {
			return fmt.Errorf("mounting layer %d (%s): %w", i, dev, err)
		}
		lowerDirs = append(lowerDirs, dir)
	}
	rw, ok := disks[proto.VMUpperSerial]
	if !ok {
		return fmt.Errorf("writable disk missing (have %v)", disks)
	}
	for _, d := range []string{"/rw", "/newroot"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount(rw, "/rw", "ext4", unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("mounting the writable disk %s: %w", rw, err)
	}
	for _, d := range []string{"/rw/upper", "/rw/work"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	opts := "lowerdir=" + strings.Join(lowerDirs, ":") + ",upperdir=/rw/upper,workdir=/rw/work"
	if err := unix.Mount("overlay", "/newroot", "overlay", 0, opts); err != nil {
		return fmt.Errorf("mounting the root overlay: %w", err)
	}
	return nil
}

// switchRoot frees the initramfs's files and makes root the new /: the
// initramfs cannot be pivoted away, so root is moved over it.
func switchRoot(root string) error {
	_ = os.RemoveAll(ModulesDir)
	_ = os.Remove("/init")
	for _, d := range []string{"/dev", "/proc", "/sys"} {
		target := root + d
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(d, target, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("moving %s: %w", d, err)
		}
	}
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("moving the root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	return unix.Chdir("/")
}

// hostnameFile is /proc/sys/kernel/hostname, opened for writing before
// maskProc made /proc/sys read-only: a later hello's hostname is written
// through it (assume), as a write through an open file is not refused by
// its mount's read-only flag.
var hostnameFile *os.File

// maskProc hides in the guest's /proc what the container tier hides in a
// sandbox's (boot.ProcMasks): the kernel's memory, symbols, keys and
// timers behind /dev/null, sysrq-trigger too, and /proc/sys read-only. A
// workload's root has no capabilities, but sysctls such as core_pattern
// and modprobe check only the file's mode, and either would make the
// guest kernel run a program of the sandbox's as its full root.
func maskProc() error {
	var err error
	if hostnameFile, err = os.OpenFile("/proc/sys/kernel/hostname", os.O_WRONLY, 0); err != nil {
		return fmt.Errorf("opening /proc/sys/kernel/hostname: %w", err)
	}
	files, dirs, readonly := boot.ProcMasks()
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			continue
		}
		if err := unix.Mount("/dev/null", f, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("masking %s: %w", f, err)
		}
	}
	const noexec = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	for _, d := range dirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			continue
		}
		if err := unix.Mount("tmpfs", d, "tmpfs", noexec|unix.MS_RDONLY, "size=0"); err != nil {
			return fmt.Errorf("masking %s: %w", d, err)
		}
	}
	for _, p := range readonly {
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("binding %s: %w", p, err)
		}
		if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|noexec, ""); err != nil {
			return fmt.Errorf("making %s read-only: %w", p, err)
		}
	}
	return nil
}

// mountSpecial mounts what a root needs beyond /dev, /proc and /sys.
func mountSpecial() error {
	for _, m := range []struct{ src, dst, fs, data string }{
		{"devpts", "/dev/pts", "devpts", "newinstance,ptmxmode=0666,mode=0620"},
		{"shm", "/dev/shm", "tmpfs", "mode=1777"},
		{"tmpfs", "/run", "tmpfs", "mode=0755"},
		{"cgroup", "/sys/fs/cgroup", "tmpfs", "mode=0755"},
	} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dst, m.fs, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, m.data); err != nil {
			return fmt.Errorf("mounting %s: %w", m.dst, err)
		}
	}
	_ = os.Remove("/dev/ptmx")
	if err := os.Symlink("pts/ptmx", "/dev/ptmx"); err != nil {
		return fmt.Errorf("/dev/ptmx: %w", err)
	}
	return nil
}

// workloadCgroup mounts the guest kernel's pids and cpuacct hierarchies,
// each with the workload's cgroup, as the gvisor tier's agent does: v1,
// because the exec path puts a child into a v2 cgroup with clone3, which
// the seccomp filter refuses (ENOSYS, so that libc falls back to clone).
func workloadCgroup(pids int64) ([]guest.CgroupDir, error) {
	return guest.MountOwnCgroups("/sys/fs/cgroup", pids)
}

// findPort finds the virtio-serial port called name.
func findPort(name string) (string, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		ents, _ := os.ReadDir("/sys/class/virtio-ports")
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join("/sys/class/virtio-ports", e.Name(), "name"))
			if err == nil && string(bytes.TrimSpace(b)) == name {
				dev := "/dev/" + e.Name()
				if _, err := os.Stat(dev); err == nil {
					return dev, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no virtio-serial port %q", name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// vmLink is the VM's one network interface: the first that is not lo.
func vmLink() (netlink.Link, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	for _, l := range links {
		if l.Attrs().Flags&net.FlagLoopback == 0 {
			return l, nil
		}
	}
	return nil, errors.New("the VM has no network interface (virtio_net not loaded?)")
}

// reconfigureNet gives a restored VM its new sandbox's network: the
// interface goes down (its routes and neighbours, the old gateway's
// among them, go with it), takes the new MAC, loses its old addresses,
// and is configured as at boot.
func reconfigureNet(n *proto.VMNet) error {
	link, err := vmLink()
	if err != nil {
		return err
	}
	if err := netlink.LinkSetDown(link); err != nil {
		return fmt.Errorf("bringing %s down: %w", link.Attrs().Name, err)
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("listing addresses: %w", err)
	}
	for _, a := range addrs {
		if a.IP.To4() != nil {
			if err := netlink.AddrDel(link, &a); err != nil {
				return fmt.Errorf("removing %s: %w", a.IPNet, err)
			}
		}
	}
	return configureNet(n)
}

// configureNet gives the VM's one network interface the sandbox's
// address (and MAC, when given), brings it up and routes everything
// through the gateway.
func configureNet(n *proto.VMNet) error {
	link, err := vmLink()
	if err != nil {
		return err
	}
	if n.MAC != "" && n.MAC != link.Attrs().HardwareAddr.String() {
		mac, err := net.ParseMAC(n.MAC)
		if err != nil {
			return fmt.Errorf("mac %q: %w", n.MAC, err)
		}
		if err := netlink.LinkSetHardwareAddr(link, mac); err != nil {
			return fmt.Errorf("mac %s: %w", n.MAC, err)
		}
	}
	addr, err := netlink.ParseAddr(n.Address)
	if err != nil {
		return fmt.Errorf("address %q: %w", n.Address, err)
	}
	if n.MTU > 0 {
		if err := netlink.LinkSetMTU(link, n.MTU); err != nil {
			return fmt.Errorf("mtu: %w", err)
		}
	}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("adding %s: %w", n.Address, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("bringing %s up: %w", link.Attrs().Name, err)
	}
	gw := net.ParseIP(n.Gateway)
	if gw == nil {
		return fmt.Errorf("gateway %q is not an address", n.Gateway)
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw}); err != nil {
		return fmt.Errorf("default route via %s: %w", n.Gateway, err)
	}
	return nil
}
