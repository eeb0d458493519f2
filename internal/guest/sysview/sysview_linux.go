// Package sysview answers, for a container-tier sandbox's processes, the
// system calls whose figures no file of the sandbox's /proc can carry:
// sysinfo(2) (busybox's free, glibc's sysconf(_SC_PHYS_PAGES), GNU
// sort's buffer) from the sandbox's own /proc/meminfo, /proc/uptime and
// /proc/loadavg (LXCFS's views), statfs(2) and fstatfs(2) of a path on
// the root (df /, Python's shutil.disk_usage) from the disk limit and
// usage of the sandbox's writable layer (its btrfs quota group, read in
// sysfs), since btrfs's own statfs reports the storage pool, and
// sched_getaffinity(2) of a thread's own mask (the CPU count of most
// runtimes) narrowed to the sandbox's CPU limit, since narrowing the
// real mask would pin the sandbox to chosen CPUs.
//
// The init installs a seccomp filter that turns those four system calls
// into user notifications (SECCOMP_RET_USER_NOTIF) on every one of its
// threads, before any sandbox process exists, so every process of the
// sandbox inherits it; the init's listener answers each: with the
// sandbox's figures, written into the caller's buffer through
// /proc/PID/mem (the init is root of the sandbox's user namespace), or
// by letting the kernel run the call as asked
// (SECCOMP_USER_NOTIF_FLAG_CONTINUE) for every other path, for a call it
// cannot answer, and until the init has its sandbox. It is a view, not a
// boundary: the answer is never more than what the sandbox's own files
// say, and a call the listener lets through is the kernel's.
//
// The init makes none of those calls itself (its figures come from
// files and statx), so it never waits on its own listener.
package sysview

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// struct seccomp_data, struct seccomp_notif and struct
// seccomp_notif_resp (linux/seccomp.h).
type seccompData struct {
	Nr                 int32
	Arch               uint32
	InstructionPointer uint64
	Args               [6]uint64
}

type notif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Data  seccompData
}

type notifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// View is a sandbox init's listener.
type View struct {
	fd   int
	file *os.File // fd, in the runtime's poller; kept so that no finalizer closes it
	log  *slog.Logger
	cfg  atomic.Pointer[config]
	// disk holds the usage files OpenDisk opened until Ready takes them.
	disk *disk
	// cpus is the sandbox's CPU count (SetCPUs), nil until the init has
	// one: sched_getaffinity is the kernel's until then.
	cpus atomic.Pointer[func() int]
	// maskSize is how many bytes the kernel's sched_getaffinity copies
	// out at most (its cpumask_size()), minSize the shortest buffer it
	// takes (nr_cpu_ids bits, in whole longs), allowed how many CPUs the
	// init may run on, all read before the filter: 0 if unknown.
	maskSize, minSize, allowed int
}

type config struct {
	proc *procFiles // nil: sysinfo is the kernel's
	disk *disk      // nil: statfs is the kernel's
	// root is what a statfs of the root says but for its sizes, found
	// at the first call that needs it: a statfs of its own here would go
	// through the listener, and with the init's one P held by the
	// blocked call the listener would wait for the runtime to take it
	// back (up to 10 ms: it added 3 ms to a create).
	root func() (rootInfo, error)
}

// rootInfo is the root's mount id and the parts of its statfs that are
// not sizes.
type rootInfo struct {
	mnt uint64
	st  unix.Statfs_t
}

// disk is the writable layer's quota group in sysfs: its limit and its
// usage, the bytes it references plus those reserved for writes not yet
// committed (what a statfs right after a write must count).
type disk struct {
	max, referenced, reserved *os.File
}

// Install puts the filter on every thread of the calling process
// (SECCOMP_FILTER_FLAG_TSYNC) and starts the listener, which lets every
// call through until Ready. Call it before the process starts any other.
func Install(log *slog.Logger) (*View, error) {
	maskSize, minSize, allowed := ownMask()
	prog := program()
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	fd, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC|unix.SECCOMP_FILTER_FLAG_NEW_LISTENER|unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH,
		uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if e != 0 {
		return nil, fmt.Errorf("installing the system-call view's listener (kernel 5.7 or later): %w", e)
	}
	unix.CloseOnExec(int(fd))
	// The listener waits in the runtime's poller, not in a blocking
	// receive: a thread blocked in one holds the init's P (often its
	// only one) until the runtime's monitor takes it back, and the
	// goroutine answering a call waited for it (0.15 ms a call).
	if err := unix.SetNonblock(int(fd), true); err != nil {
		unix.Close(int(fd))
		return nil, fmt.Errorf("the system-call view's listener: %w", err)
	}
	f := os.NewFile(fd, "seccomp-listener")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("the system-call view's listener: %w", err)
	}
	v := &View{fd: int(fd), file: f, log: log, maskSize: maskSize, minSize: minSize, allowed: allowed}
	go v.loop(rc)
	return v, nil
}

// ownMask is the size of the kernel's CPU mask (the most
// sched_getaffinity copies out), the shortest buffer it takes (it
// answers EINVAL below) and the count of the CPUs the calling thread
// may run on; 0, 0 and 0 if it cannot tell.
func ownMask() (size, minSize, count int) {
	var buf [1024]uint64 // 65,536 CPUs, more than any kernel's NR_CPUS
	n, _, e := unix.RawSyscall(unix.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(buf), uintptr(unsafe.Pointer(&buf[0])))
	if e != 0 || n == 0 || n%8 != 0 {
		return 0, 0, 0
	}
	for _, w := range buf[:n/8] {
		count += bits.OnesCount64(w)
	}
	for minSize = 8; minSize < int(n); minSize += 8 {
		_, _, e := unix.RawSyscall(unix.SYS_SCHED_GETAFFINITY, 0, uintptr(minSize), uintptr(unsafe.Pointer(&buf[0])))
		if e == 0 {
			break
		}
	}
	return int(n), minSize, count
}

// CPUs is how many CPUs the init may run on, counted before the filter
// (a sched_getaffinity of the init's own would wait on its listener).
func (v *View) CPUs() int { return v.allowed }

// SetCPUs gives the listener the sandbox's CPU count: cpus returns
// ceil of its CPU limit, or 0 when the limit allows every CPU. From
// then on a sched_getaffinity of a thread's own mask (busybox's nproc,
// Python's os.sched_getaffinity and os.process_cpu_count, Node's
// os.availableParallelism, the Go runtime's GOMAXPROCS) answers the
// first cpus() CPUs of that mask when the mask holds more.
func (v *View) SetCPUs(cpus func() int) { v.cpus.Store(&cpus) }

// program is the filter: the calls of the native architecture's
// sysinfo, statfs, fstatfs and sched_getaffinity notify, everything
// else is allowed (the agentbox filter, installed with it, decides the
// rest).
func program() []unix.SockFilter {
	ld := func(off uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
	}
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	ret := func(k uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k} }
	return []unix.SockFilter{
		ld(4), // seccomp_data.arch
		jeq(auditArch, 0, 5),
		ld(0), // seccomp_data.nr
		jeq(unix.SYS_SYSINFO, 4, 0),
		jeq(unix.SYS_STATFS, 3, 0),
		jeq(unix.SYS_FSTATFS, 2, 0),
		jeq(unix.SYS_SCHED_GETAFFINITY, 1, 0),
		ret(unix.SECCOMP_RET_ALLOW),
		ret(unix.SECCOMP_RET_USER_NOTIF),
	}
}

// OpenDisk opens the usage files of the sysfs directory of the writable
// layer's quota group (proto.BootSpec.DiskQuota), a host path: call it
// before the init leaves the host's tree.
func (v *View) OpenDisk(dir string) error {
	var d disk
	for _, f := range []struct {
		name string
		to   **os.File
	}{{"max_referenced", &d.max}, {"referenced", &d.referenced}, {"rsv_data", &d.reserved}} {
		file, err := os.Open(dir + "/" + f.name)
		if err != nil {
			d.close()
			return fmt.Errorf("the disk view: %w", err)
		}
		*f.to = file
	}
	v.disk = &d
	return nil
}

func (d *disk) close() {
	for _, f := range []*os.File{d.max, d.referenced, d.reserved} {
		if f != nil {
			f.Close()
		}
	}
}

// Ready starts answering, once the sandbox's root is the init's root
// and its /proc is the sandbox's. It makes no call the listener takes.
func (v *View) Ready() error {
	proc, err := openProcFiles()
	v.cfg.Store(&config{proc: proc, disk: v.disk, root: sync.OnceValues(readRoot)})
	if err != nil {
		return fmt.Errorf("sysinfo's /proc files: %w", err)
	}
	return nil
}

// readRoot finds the root's mount and what its statfs says but for the
// sizes, without a statfs (see config.root): an overlay
// (OVERLAYFS_SUPER_MAGIC) whose blocks are the size statx gives for its
// root, NAME_MAX names, no inode counts (btrfs gives none), the mount's
// flags from mountinfo and an fsid from the device number.
func readRoot() (rootInfo, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, "/", 0, unix.STATX_MNT_ID, &stx); err != nil {
		return rootInfo{}, fmt.Errorf("the root's mount: %w", err)
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return rootInfo{}, errors.New("the kernel gives no mount id (statx STATX_MNT_ID, Linux 5.8)")
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return rootInfo{}, err
	}
	flags, ok := mountFlags(string(mi), stx.Mnt_id)
	if !ok {
		return rootInfo{}, fmt.Errorf("mount %d is not in mountinfo", stx.Mnt_id)
	}
	bs := int64(stx.Blksize)
	if bs <= 0 {
		bs = 4096
	}
	st := unix.Statfs_t{Type: unix.OVERLAYFS_SUPER_MAGIC, Bsize: bs, Frsize: bs, Namelen: unix.NAME_MAX, Flags: flags}
	st.Fsid.Val[0] = int32(unix.Mkdev(stx.Dev_major, stx.Dev_minor))
	return rootInfo{mnt: stx.Mnt_id, st: st}, nil
}

// mountFlags is statfs's f_flags (ST_*) of mount id in mountinfo: the
// per-mount options (the sixth field) the kernel reports there.
func mountFlags(mountinfo string, id uint64) (int64, bool) {
	for line := range strings.Lines(mountinfo) {
		f := strings.Fields(line)
		if len(f) < 6 || f[0] != strconv.FormatUint(id, 10) {
			continue
		}
		flags := int64(stValid)
		for _, o := range strings.Split(f[5], ",") {
			flags |= stFlags[o]
		}
		return flags, true
	}
	return 0, false
}

// statfs's f_flags (linux/statfs.h).
const stValid = 0x20

var stFlags = map[string]int64{
	"ro": unix.ST_RDONLY, "nosuid": unix.ST_NOSUID, "nodev": unix.ST_NODEV, "noexec": unix.ST_NOEXEC,
	"sync": unix.ST_SYNCHRONOUS, "mand": unix.ST_MANDLOCK, "noatime": unix.ST_NOATIME,
	"nodiratime": unix.ST_NODIRATIME, "relatime": unix.ST_RELATIME, "nosymfollow": 0x2000,
}

func (v *View) loop(rc syscall.RawConn) {
	for {
		var n notif
		var e syscall.Errno
		err := rc.Read(func(fd uintptr) bool {
			// The receive blocks whatever the fd's flags: only once a
			// call waits (POLLIN), else back to the poller.
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if k, err := unix.Poll(pfd, 0); err != nil || k == 0 || pfd[0].Revents&unix.POLLIN == 0 {
				if err == nil && pfd[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0 {
					e = unix.EBADF // no filter left to notify
					return true
				}
				return false
			}
			n = notif{}
			_, _, e = unix.Syscall(unix.SYS_IOCTL, fd, unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&n)))
			return true
		})
		if err == nil && e != 0 {
			err = e
		}
		switch {
		case err == nil:
			v.answer(n) // inline: a goroutine each cost a wake-up more
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.ENOENT): // interrupted; the caller went away
		default:
			// Closed, the calls fail with ENOSYS rather than wait for
			// an answer that will not come.
			v.log.Error("the system-call view's listener stopped: sysinfo, statfs and sched_getaffinity fail with ENOSYS in the sandbox from now on", "err", err)
			v.file.Close()
			return
		}
	}
}

// answer answers n: with the sandbox's figures where it can, otherwise
// by letting the call through.
func (v *View) answer(n notif) {
	resp := notifResp{ID: n.ID}
	answered := false
	if c := v.cfg.Load(); c != nil {
		switch int(n.Data.Nr) {
		case unix.SYS_SYSINFO:
			answered = c.proc != nil && v.sysinfo(c, n, &resp)
		case unix.SYS_STATFS, unix.SYS_FSTATFS:
			answered = v.statfs(c, n, &resp)
		case unix.SYS_SCHED_GETAFFINITY:
			answered = v.affinity(n, &resp)
		}
	}
	if !answered {
		resp = notifResp{ID: n.ID, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
	}
	// ENOENT: the caller was killed or its call interrupted meanwhile.
	_, _, _ = unix.Syscall(unix.SYS_IOCTL, uintptr(v.fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp)))
}

// valid reports whether notification id still waits (its caller has
// not gone, nor its pid been reused): checked after /proc/PID/mem is
// open and before it is used.
func (v *View) valid(id uint64) bool {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(v.fd), unix.SECCOMP_IOCTL_NOTIF_ID_VALID, uintptr(unsafe.Pointer(&id)))
	return e == 0
}

// callerMem opens the memory of n's caller, checked to be that caller's
// (the notification still waits, so its pid was not reused meanwhile).
func (v *View) callerMem(n notif) (*os.File, bool) {
	mem, err := os.OpenFile("/proc/"+strconv.FormatUint(uint64(n.Pid), 10)+"/mem", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	if !v.valid(n.ID) {
		mem.Close()
		return nil, false
	}
	return mem, true
}

// reply writes out (what the call returns) at addr in the caller's
// memory mem and sets the call's result: val, or EFAULT as the kernel
// answers a bad buffer.
func reply(mem *os.File, addr uint64, out []byte, val int64, resp *notifResp) {
	if addr > 1<<63-1 {
		resp.Error = -int32(unix.EFAULT)
		return
	}
	if _, err := mem.WriteAt(out, int64(addr)); err != nil {
		resp.Error = -int32(unix.EFAULT)
		return
	}
	resp.Val = val
}

// sysinfo answers from the sandbox's /proc files, which LXCFS serves
// (the same figures free, top and psutil read).
func (v *View) sysinfo(c *config, n notif, resp *notifResp) bool {
	var si unix.Sysinfo_t
	if !c.proc.fill(&si) {
		return false
	}
	mem, ok := v.callerMem(n)
	if !ok {
		return false
	}
	defer mem.Close()
	reply(mem, n.Data.Args[0], unsafe.Slice((*byte)(unsafe.Pointer(&si)), unsafe.Sizeof(si)), 0, resp)
	return true
}

// procFiles are the sandbox's /proc/meminfo and /proc/loadavg, open
// for the listener's life: a read at offset 0 of a file LXCFS serves is
// one round trip to it, where reading it anew is three (open, read,
// release). uptime is the sandbox's age, as LXCFS's /proc/uptime says
// it: the boot-time clock since the init started.
type procFiles struct {
	meminfo, loadavg *os.File      // read only by the listener's goroutine
	started          time.Duration // CLOCK_BOOTTIME at the init's start
}

func openProcFiles() (*procFiles, error) {
	p := &procFiles{}
	var err error
	if p.meminfo, err = os.Open("/proc/meminfo"); err != nil {
		return nil, err
	}
	if p.loadavg, err = os.Open("/proc/loadavg"); err != nil {
		p.meminfo.Close()
		return nil, err
	}
	st, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return nil, err
	}
	// starttime (field 22), in clock ticks (USER_HZ, 100) since boot.
	f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+2:]))
	if len(f) < 20 {
		return nil, fmt.Errorf("/proc/self/stat: %q", st)
	}
	ticks, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return nil, err
	}
	p.started = time.Duration(ticks) * 10 * time.Millisecond
	return p, nil
}

// fill fills si; false when a file cannot be read.
func (p *procFiles) fill(si *unix.Sysinfo_t) bool {
	var buf [4096]byte
	k, err := p.meminfo.ReadAt(buf[:], 0)
	if k == 0 && err != nil {
		return false
	}
	kb := map[string]uint64{}
	for line := range strings.Lines(string(buf[:k])) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if n, err := strconv.ParseUint(f[0], 10, 64); err == nil {
			kb[name] = n
		}
	}
	if kb["MemTotal"] == 0 {
		return false
	}
	si.Unit = 1
	si.Totalram, si.Freeram = kb["MemTotal"]<<10, kb["MemFree"]<<10
	si.Sharedram, si.Bufferram = kb["Shmem"]<<10, kb["Buffers"]<<10
	si.Totalswap, si.Freeswap = kb["SwapTotal"]<<10, kb["SwapFree"]<<10
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) == nil {
		si.Uptime = int64((time.Duration(ts.Nano()) - p.started) / time.Second)
	}
	k, _ = p.loadavg.ReadAt(buf[:], 0)
	f := strings.Fields(string(buf[:k]))
	for i := 0; i < 3 && i < len(f); i++ {
		if l, err := strconv.ParseFloat(f[i], 64); err == nil {
			si.Loads[i] = uint64(l * (1 << 16)) // SI_LOAD_SHIFT
		}
	}
	if len(f) > 3 {
		if _, total, ok := strings.Cut(f[3], "/"); ok {
			if t, err := strconv.ParseUint(total, 10, 16); err == nil {
				si.Procs = uint16(t)
			}
		}
	}
	return true
}

// statfs answers a statfs or fstatfs of a file on the root's mount from
// the quota group; any other file, and every doubt, goes to the kernel.
func (v *View) statfs(c *config, n notif, resp *notifResp) bool {
	if c.disk == nil {
		return false
	}
	mem, ok := v.callerMem(n)
	if !ok {
		return false
	}
	defer mem.Close()
	pid := strconv.FormatUint(uint64(n.Pid), 10)
	var target string
	if int(n.Data.Nr) == unix.SYS_FSTATFS {
		target = "/proc/" + pid + "/fd/" + strconv.Itoa(int(int32(n.Data.Args[0])))
	} else {
		path, ok := readPath(mem, n.Data.Args[0])
		if !ok || path == "" {
			return false
		}
		if path[0] == '/' {
			target = "/proc/" + pid + "/root" + path
		} else {
			target = "/proc/" + pid + "/cwd/" + path
		}
	}
	root, err := c.root()
	if err != nil {
		return false
	}
	onRoot, ok := onMount(n.Pid, target, root.mnt)
	if !ok || !onRoot {
		return false
	}
	max, used, ok := c.disk.usage()
	if !ok || max == 0 {
		return false
	}
	st := root.st
	bs := uint64(st.Bsize)
	free := uint64(0)
	if used < max {
		free = max - used
	}
	st.Blocks, st.Bfree, st.Bavail = max/bs, free/bs, free/bs
	reply(mem, n.Data.Args[1], unsafe.Slice((*byte)(unsafe.Pointer(&st)), unsafe.Sizeof(st)), 0, resp)
	return true
}

// affinity answers a sched_getaffinity with the first cpus() CPUs of
// the named thread's mask, when the mask holds more: the caller's own
// (pid 0 or its thread id) or, for a caller in the init's pid
// namespace (where the pid it names is the init's too), any thread's
// (taskset -p). The kernel answers otherwise, and for a buffer size it
// refuses (EINVAL), a pid of another namespace's and every doubt. It
// copies out and returns as many bytes as the kernel would.
func (v *View) affinity(n notif, resp *notifResp) bool {
	cpus := v.cpus.Load()
	if cpus == nil || v.maskSize == 0 {
		return false
	}
	pid, size := int32(n.Data.Args[0]), int(uint32(n.Data.Args[1]))
	if pid < 0 || size < v.minSize || size%8 != 0 {
		return false
	}
	target := n.Pid
	if pid != 0 && uint32(pid) != n.Pid {
		if !v.inOwnPidNS(n.Pid) {
			return false
		}
		target = uint32(pid)
	}
	size = min(size, v.maskSize)
	limit := (*cpus)()
	if limit <= 0 {
		return false
	}
	// The files are opened before the check that the caller still
	// waits, so that the caller's namespace above was the caller's.
	status, err := os.Open("/proc/" + strconv.FormatUint(uint64(target), 10) + "/status")
	if err != nil {
		return false // no such thread: the kernel's ESRCH
	}
	defer status.Close()
	mem, ok := v.callerMem(n)
	if !ok {
		return false
	}
	defer mem.Close()
	var buf [4096]byte
	k, err := status.ReadAt(buf[:], 0)
	if k == 0 && err != nil {
		return false
	}
	mask, ok := allowedMask(buf[:k], size)
	if !ok || !firstCPUs(mask, limit) {
		return false
	}
	reply(mem, n.Data.Args[2], mask, int64(size), resp)
	return true
}

// inOwnPidNS reports whether thread tid is in the init's pid
// namespace.
func (v *View) inOwnPidNS(tid uint32) bool {
	var own, caller unix.Stat_t
	if unix.Stat("/proc/self/ns/pid", &own) != nil ||
		unix.Stat("/proc/"+strconv.FormatUint(uint64(tid), 10)+"/ns/pid", &caller) != nil {
		return false
	}
	return own.Ino == caller.Ino && own.Dev == caller.Dev
}

// allowedMask is the Cpus_allowed line of a /proc/PID/status as the
// kernel's mask of size bytes (32-bit hex words, the highest first;
// little-endian words in memory, as on every architecture we build).
func allowedMask(status []byte, size int) ([]byte, bool) {
	_, rest, ok := bytes.Cut(status, []byte("\nCpus_allowed:"))
	if !ok {
		return nil, false
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	words := strings.Split(strings.TrimSpace(string(line)), ",")
	mask := make([]byte, size)
	for i, w := range words {
		word, err := strconv.ParseUint(w, 16, 32)
		if err != nil {
			return nil, false
		}
		at := 4 * (len(words) - 1 - i)
		for b := 0; b < 4; b++ {
			if byte(word>>(8*b)) == 0 {
				continue
			}
			if at+b >= size {
				return nil, false // a CPU beyond the kernel's mask
			}
			mask[at+b] = byte(word >> (8 * b))
		}
	}
	return mask, true
}

// firstCPUs keeps the first n CPUs of mask, reporting whether it held
// more (else mask is left as it is).
func firstCPUs(mask []byte, n int) bool {
	count := 0
	for _, b := range mask {
		count += bits.OnesCount8(b)
	}
	if count <= n {
		return false
	}
	for i := range mask {
		for bit := 0; bit < 8; bit++ {
			if mask[i]&(1<<bit) == 0 {
				continue
			}
			if n > 0 {
				n--
			} else {
				mask[i] &^= 1 << bit
			}
		}
	}
	return true
}

// readPath reads the NUL-terminated path at addr in the caller's memory
// (at most PATH_MAX bytes), a page at a time so that a path near the end
// of a mapping reads.
func readPath(mem *os.File, addr uint64) (string, bool) {
	if addr == 0 || addr > 1<<63-1 {
		return "", false
	}
	var out []byte
	for len(out) < unix.PathMax {
		page := 4096 - int(addr%4096)
		buf := make([]byte, min(page, unix.PathMax-len(out)))
		k, err := mem.ReadAt(buf, int64(addr))
		if k == 0 && err != nil {
			return "", false
		}
		if i := bytes.IndexByte(buf[:k], 0); i >= 0 {
			return string(append(out, buf[:i]...)), true
		}
		out = append(out, buf[:k]...)
		addr += uint64(k)
	}
	return "", false // ENAMETOOLONG: the kernel says so
}

// onMount reports whether target (a path through the caller's /proc
// entry) is on mount mnt, resolved with the caller's file-system ids and
// groups and without the init's own permission to read and search
// anything, so that a path the caller may not reach is the kernel's to
// refuse. ok is false when the answer is unknown.
func onMount(pid uint32, target string, mnt uint64) (on, ok bool) {
	uid, gid, groups, err := fsIDs(pid)
	if err != nil {
		return false, false
	}
	// The ids are set on this thread only (raw system calls, not Go's
	// process-wide ones); a thread whose own cannot be restored is not
	// handed back to the runtime.
	runtime.LockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps, own [2]unix.CapUserData
	ownGroups, err := threadGroups()
	if err != nil || unix.Capget(&hdr, &own[0]) != nil {
		runtime.UnlockOSThread()
		return false, false
	}
	caps = own
	for _, c := range []uint{unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH, unix.CAP_FOWNER} {
		caps[c/32].Effective &^= 1 << (c % 32)
	}
	restored := true
	defer func() {
		if restored {
			runtime.UnlockOSThread()
		}
	}()
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(unsafe.SliceData(groups))), 0); e != 0 {
		return false, false
	}
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(gid), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(uid), 0, 0)
	capErr := unix.Capset(&hdr, &caps[0])
	var stx unix.Statx_t
	err = capErr
	if err == nil {
		err = unix.Statx(unix.AT_FDCWD, target, 0, unix.STATX_MNT_ID, &stx)
	}
	// Back to the thread's own: its ids, groups and capabilities.
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(unix.Geteuid()), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(unix.Getegid()), 0, 0)
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(ownGroups)), uintptr(unsafe.Pointer(unsafe.SliceData(ownGroups))), 0); e != 0 {
		restored = false
	}
	if unix.Capset(&hdr, &own[0]) != nil {
		restored = false
	}
	if err != nil || stx.Mask&unix.STATX_MNT_ID == 0 {
		return false, false
	}
	return stx.Mnt_id == mnt, true
}

// threadGroups are the calling thread's supplementary groups.
func threadGroups() ([]uint32, error) {
	g := make([]uint32, 256)
	for {
		n, _, e := unix.RawSyscall(unix.SYS_GETGROUPS, uintptr(len(g)), uintptr(unsafe.Pointer(&g[0])), 0)
		if e == unix.EINVAL && len(g) < 1<<16 {
			g = make([]uint32, 2*len(g))
			continue
		}
		if e != 0 {
			return nil, e
		}
		return g[:n], nil
	}
}

// fsIDs reads a process's file-system uid and gid and its groups.
func fsIDs(pid uint32) (uid, gid uint32, groups []uint32, err error) {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return 0, 0, nil, err
	}
	var haveUID, haveGID bool
	for line := range strings.Lines(string(b)) {
		name, rest, _ := strings.Cut(line, ":")
		f := strings.Fields(rest)
		switch name {
		case "Uid", "Gid":
			if len(f) != 4 {
				return 0, 0, nil, fmt.Errorf("%s line %q", name, line)
			}
			id, err := strconv.ParseUint(f[3], 10, 32) // the fs id
			if err != nil {
				return 0, 0, nil, err
			}
			if name == "Uid" {
				uid, haveUID = uint32(id), true
			} else {
				gid, haveGID = uint32(id), true
			}
		case "Groups":
			for _, g := range f {
				id, err := strconv.ParseUint(g, 10, 32)
				if err != nil {
					return 0, 0, nil, err
				}
				groups = append(groups, uint32(id))
			}
		}
	}
	if !haveUID || !haveGID {
		return 0, 0, nil, syscall.EINVAL
	}
	return uid, gid, groups, nil
}

// usage reads the quota group's limit and the bytes counted against it.
func (d *disk) usage() (max, used uint64, ok bool) {
	var v [3]uint64
	for i, f := range []*os.File{d.max, d.referenced, d.reserved} {
		var buf [32]byte
		k, err := f.ReadAt(buf[:], 0)
		if k == 0 && err != nil {
			return 0, 0, false
		}
		if v[i], err = strconv.ParseUint(strings.TrimSpace(string(buf[:k])), 10, 64); err != nil {
			return 0, 0, false
		}
	}
	return v[0], v[1] + v[2], true
}
