// Command probe is the hostile battery's syscall prober: a static binary the
// integration tests upload into a sandbox and run there. Each subcommand
// tries one family of things a sandbox must not be able to do and prints
// one machine-readable line per attempt:
//
//	<probe-name> <ERRNO-NAME | OK> [detail]
//
// The verdict is the test's, made on the host; this program only reports
// what the kernel answered. Anything it manages to read is printed too, so
// that the test can look for its planted secrets in the output.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sharedCmds are the subcommands of shared.go.
var sharedCmds map[string]func([]string)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe COMMAND [ARGS]")
		os.Exit(2)
	}
	cmds := map[string]func([]string){
		"mount": probeMount, "ns": probeNS, "sockets": probeSockets,
		"modules": probeModules, "kernel": probeKernel, "ptrace": probePtrace,
		"mknod": probeMknod, "clock": probeClock, "chroot": probeChroot,
		"exe": probeExe, "fds": probeFDs, "alloc": probeAlloc, "flood": probeFlood,
		"threads": probeThreads, "files": probeFiles, "connect": probeConnect,
		"write": probeWrite, "read": probeRead, "ids": probeIDs,
		"sysview": probeSysview, "sysviewloop": probeSysviewLoop,
	}
	for k, v := range sharedCmds {
		cmds[k] = v
	}
	f, ok := cmds[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "probe: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
	f(os.Args[2:])
}

// report prints one result line.
func report(name string, err error, detail ...any) {
	res := "OK"
	if err != nil {
		var en syscall.Errno
		if errors.As(err, &en) {
			res = unix.ErrnoName(en)
			if res == "" {
				res = "ERRNO" + strconv.Itoa(int(en))
			}
		} else {
			res = "ERR"
			detail = append(detail, err.Error())
		}
	}
	line := name + " " + res
	if len(detail) > 0 {
		line += " " + fmt.Sprint(detail...)
	}
	fmt.Println(line)
}

func errno(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func probeMount(args []string) {
	_ = os.MkdirAll("/tmp/mnt", 0o755)
	report("mount_proc", unix.Mount("proc", "/tmp/mnt", "proc", 0, ""))
	report("mount_sysfs", unix.Mount("sysfs", "/tmp/mnt", "sysfs", 0, ""))
	report("mount_tmpfs", unix.Mount("tmpfs", "/tmp/mnt", "tmpfs", 0, "size=1m"))
	report("mount_bind", unix.Mount("/", "/tmp/mnt", "", unix.MS_BIND, ""))
	report("mount_cgroup", unix.Mount("cgroup", "/tmp/mnt", "cgroup", 0, "pids"))
	report("umount_proc", unix.Unmount("/proc", unix.MNT_DETACH))
	fd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	report("fsopen", err)
	if err != nil {
		fd = -1
	}
	report("fsconfig", unix.FsconfigCreate(fd))
	_, err = unix.Fsmount(fd, unix.FSMOUNT_CLOEXEC, 0)
	report("fsmount", err)
	_, err = unix.Fspick(unix.AT_FDCWD, "/", unix.FSPICK_CLOEXEC)
	report("fspick", err)
	tree, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	report("open_tree", err)
	if err != nil {
		tree = -1
	}
	report("move_mount", unix.MoveMount(tree, "", unix.AT_FDCWD, "/tmp/mnt", unix.MOVE_MOUNT_F_EMPTY_PATH))
	report("mount_setattr", unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}))
}

// rawClone forks with flags; the child exits at once.
func rawClone(flags uintptr) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, _, e := syscall.RawSyscall6(unix.SYS_CLONE, flags|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		return e
	}
	if pid == 0 {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	var ws unix.WaitStatus
	_, _ = unix.Wait4(int(pid), &ws, 0, nil)
	return nil
}

func probeNS(args []string) {
	for _, n := range []struct {
		name string
		flag int
	}{
		{"user", unix.CLONE_NEWUSER}, {"mnt", unix.CLONE_NEWNS}, {"cgroup", unix.CLONE_NEWCGROUP},
		{"pid", unix.CLONE_NEWPID}, {"net", unix.CLONE_NEWNET}, {"uts", unix.CLONE_NEWUTS},
		{"ipc", unix.CLONE_NEWIPC},
	} {
		report("unshare_"+n.name, unix.Unshare(n.flag))
		report("clone_"+n.name, rawClone(uintptr(n.flag)))
	}
	// struct clone_args: flags, pidfd, child_tid, parent_tid, exit_signal,
	// stack, stack_size, tls (CLONE_ARGS_SIZE_VER0 = 64 bytes).
	args3 := [8]uint64{unix.CLONE_NEWUSER, 0, 0, 0, uint64(unix.SIGCHLD)}
	runtime.LockOSThread()
	pid, _, e := syscall.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&args3)), unsafe.Sizeof(args3), 0)
	if e == 0 && pid == 0 {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	runtime.UnlockOSThread()
	report("clone3_user", errno(e))
	for _, ns := range []string{"/proc/self/ns/user", "/proc/1/ns/mnt", "/proc/self/ns/net", "/proc/self/ns/cgroup"} {
		fd, err := unix.Open(ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			report("setns_open_"+strings.ReplaceAll(strings.TrimPrefix(ns, "/proc/"), "/", "_"), err)
			continue
		}
		report("setns_"+strings.ReplaceAll(strings.TrimPrefix(ns, "/proc/"), "/", "_"), unix.Setns(fd, 0))
		unix.Close(fd)
	}
}

func probeSockets(args []string) {
	for _, s := range []struct {
		name        string
		family, typ int
		proto       int
	}{
		{"AF_ALG", unix.AF_ALG, unix.SOCK_SEQPACKET, 0},
		{"AF_VSOCK", unix.AF_VSOCK, unix.SOCK_STREAM, 0},
		{"AF_RDS", unix.AF_RDS, unix.SOCK_SEQPACKET, 0},
		{"AF_TIPC", unix.AF_TIPC, unix.SOCK_RDM, 0},
		{"AF_PACKET", unix.AF_PACKET, unix.SOCK_RAW, 0},
		{"AF_KEY", unix.AF_KEY, unix.SOCK_RAW, 2},
		{"AF_NETLINK_AUDIT", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT},
		{"AF_NETLINK_KOBJECT_UEVENT", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_KOBJECT_UEVENT},
		{"AF_BLUETOOTH", unix.AF_BLUETOOTH, unix.SOCK_RAW, 0},
		{"AF_XDP", unix.AF_XDP, unix.SOCK_RAW, 0},
	} {
		fd, err := unix.Socket(s.family, s.typ, s.proto)
		if err == nil {
			unix.Close(fd)
		}
		report("socket_"+s.name, err)
	}
}

func probeModules(args []string) {
	image := []byte("\x7fELF not a module")
	report("init_module", unix.InitModule(image, ""))
	f, err := os.CreateTemp("", "mod")
	if err == nil {
		f.Write(image)
		report("finit_module", unix.FinitModule(int(f.Fd()), "", 0))
		f.Close()
		os.Remove(f.Name())
	} else {
		report("finit_module_tmp", err)
	}
	report("delete_module", unix.DeleteModule("loop", unix.O_NONBLOCK))
}

func probeKernel(args []string) {
	_, _, e := unix.Syscall(unix.SYS_BPF, 5 /* BPF_PROG_LOAD */, 0, 0)
	report("bpf", errno(e))
	_, _, e = unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd) /* session */, 0)
	report("keyctl", errno(e))
	_, err := unix.AddKey("user", "battery", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
	report("add_key", err)
	_, err = unix.RequestKey("user", "battery", "", unix.KEY_SPEC_PROCESS_KEYRING)
	report("request_key", err)
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}
	attr.Size = uint32(unsafe.Sizeof(attr))
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, 0)
	if err == nil {
		unix.Close(fd)
	}
	report("perf_event_open", err)
	_, _, e = unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0)
	report("userfaultfd", errno(e))
	var params [120]byte
	_, _, e = unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	report("io_uring_setup", errno(e))
	_, _, e = unix.Syscall6(unix.SYS_IO_URING_ENTER, 0, 0, 0, 0, 0, 0)
	report("io_uring_enter", errno(e))
	_, _, e = unix.Syscall(unix.SYS_KEXEC_LOAD, 0, 0, 0)
	report("kexec_load", errno(e))
	_, _, e = unix.Syscall(unix.SYS_OPEN_BY_HANDLE_AT, 0, 0, 0)
	report("open_by_handle_at", errno(e))
	// A syscall number no kernel has: must fail, never succeed.
	_, _, e = unix.Syscall(1000, 0, 0, 0)
	report("unknown_syscall", errno(e))
}

func probePtrace(args []string) {
	targets := []string{"1"}
	targets = append(targets, args...)
	for _, a := range targets {
		pid, err := strconv.Atoi(a)
		if err != nil {
			continue
		}
		exists := "absent"
		if _, err := os.Stat("/proc/" + a); err == nil {
			exists = "present"
		}
		report("ptrace_attach_"+a, unix.PtraceAttach(pid), exists)
		report("ptrace_seize_"+a, unix.PtraceSeize(pid), exists)
		buf := make([]byte, 64)
		local := []unix.Iovec{{Base: &buf[0], Len: 64}}
		remote := []unix.RemoteIovec{{Base: 0x400000, Len: 64}}
		_, err = unix.ProcessVMReadv(pid, local, remote, 0)
		report("process_vm_readv_"+a, err, exists)
		_, err = unix.ProcessVMWritev(pid, local, remote, 0)
		report("process_vm_writev_"+a, err, exists)
		if a != "1" {
			report("kill0_"+a, unix.Kill(pid, 0), exists)
			fd, err := unix.PidfdOpen(pid, 0)
			if err == nil {
				unix.Close(fd)
			}
			report("pidfd_open_"+a, err, exists)
		}
	}
}

func probeMknod(args []string) {
	report("mknod_block", unix.Mknod("/tmp/sda", unix.S_IFBLK|0o600, int(unix.Mkdev(8, 0))))
	report("mknod_char_mem", unix.Mknod("/tmp/mem", unix.S_IFCHR|0o600, int(unix.Mkdev(1, 1))))
	report("mknod_char_kmsg", unix.Mknod("/tmp/kmsg", unix.S_IFCHR|0o600, int(unix.Mkdev(1, 11))))
	fd, err := unix.Open("/dev/kmsg", unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err == nil {
		buf := make([]byte, 4096)
		n, rerr := unix.Read(fd, buf)
		if rerr == nil && n > 0 {
			err = fmt.Errorf("read %d bytes of the kernel log", n)
		}
		unix.Close(fd)
	}
	report("open_dev_kmsg", err)
	buf := make([]byte, 4096)
	_, err = unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	report("syslog_read_all", err)
	_, err = unix.Klogctl(unix.SYSLOG_ACTION_SIZE_BUFFER, nil)
	report("syslog_size", err)
}

func probeClock(args []string) {
	now := time.Now().Add(time.Hour)
	ts := unix.NsecToTimespec(now.UnixNano())
	report("clock_settime", unix.ClockSettime(unix.CLOCK_REALTIME, &ts))
	tv := unix.NsecToTimeval(now.UnixNano())
	report("settimeofday", unix.Settimeofday(&tv))
	tx := unix.Timex{Modes: unix.ADJ_OFFSET | unix.ADJ_OFFSET_SINGLESHOT, Offset: 500000}
	_, err := unix.Adjtimex(&tx)
	report("adjtimex", err)
	tx = unix.Timex{Modes: unix.ADJ_SETOFFSET, Time: unix.Timeval{Sec: 3600}}
	_, _, e := unix.Syscall(unix.SYS_CLOCK_ADJTIME, unix.CLOCK_REALTIME, uintptr(unsafe.Pointer(&tx)), 0)
	report("clock_adjtime", errno(e))
}

// probeChroot tries the classic chroot escape and pivot_root, then tries to
// read each path in args (the host's flag files, as the host names them).
func probeChroot(args []string) {
	_ = os.MkdirAll("/tmp/jail/sub", 0o755)
	report("chroot", unix.Chroot("/tmp/jail"))
	for range 64 {
		_ = unix.Chdir("..")
	}
	report("chroot_dot", unix.Chroot("."))
	_ = os.MkdirAll("/tmp/newroot/old", 0o755)
	report("pivot_root", unix.PivotRoot("/tmp/newroot", "/tmp/newroot/old"))
	report("pivot_root_dot", unix.PivotRoot(".", "."))
	cwd, _ := os.Getwd()
	report("cwd", nil, cwd)
	tryRead(args)
}

func tryRead(paths []string) {
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err == nil {
			report(fmt.Sprintf("read_%d", i), nil, strconv.Quote(string(b)))
		} else {
			report(fmt.Sprintf("read_%d", i), err)
		}
	}
}

func probeRead(args []string) { tryRead(args) }

// probeExe tries to rewrite the guest agent's binary through /proc/1/exe.
func probeExe(args []string) {
	fd, err := unix.Open("/proc/1/exe", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		_, err = unix.Write(fd, []byte("#!/bin/sh\n"))
		unix.Close(fd)
	}
	report("open_proc1_exe_wronly", err)
	fd, err = unix.Open("/proc/1/exe", unix.O_RDWR|unix.O_TRUNC|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	}
	report("open_proc1_exe_trunc", err)
	fd, err = unix.Open("/proc/1/exe", unix.O_PATH|unix.O_CLOEXEC, 0)
	report("open_proc1_exe_path", err)
	if err == nil {
		fd2, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			_, err = unix.Write(fd2, []byte("#!/bin/sh\n"))
			unix.Close(fd2)
		}
		report("reopen_proc1_exe_wronly", err)
		unix.Close(fd)
	} else {
		report("reopen_proc1_exe_wronly", err)
	}
	_, err = os.Readlink("/proc/1/exe")
	report("readlink_proc1_exe", err)
	report("truncate_proc1_exe", unix.Truncate("/proc/1/exe", 0))
	_, err = os.ReadFile("/proc/1/environ")
	report("read_proc1_environ", err)
	_, err = os.ReadDir("/proc/1/fd")
	report("list_proc1_fd", err)
	_, err = os.ReadDir("/proc/1/root/")
	report("list_proc1_root", err)
}

func probeFDs(args []string) {
	var lim unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	raise := lim
	raise.Cur = raise.Max
	report("setrlimit_to_hard", unix.Setrlimit(unix.RLIMIT_NOFILE, &raise))
	beyond := unix.Rlimit{Cur: raise.Max + 1, Max: raise.Max + 1}
	report("setrlimit_beyond_hard", unix.Setrlimit(unix.RLIMIT_NOFILE, &beyond))
	_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	n := 0
	var err error
	for {
		var fd int
		fd, err = unix.Open("/dev/null", unix.O_RDONLY, 0)
		if err != nil {
			break
		}
		n++
		if fd > 1<<22 {
			break
		}
	}
	report("open_until_error", err, n, " ", lim.Cur)
}

// probeAlloc allocates and touches MB megabytes, 8 MB at a time, printing
// its progress (the OOM killer ends it).
func probeAlloc(args []string) {
	mb, _ := strconv.Atoi(args[0])
	var keep [][]byte
	for i := 0; i < mb; i += 8 {
		b := make([]byte, 8<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		keep = append(keep, b)
		fmt.Println("allocated_mb", i+8)
	}
	report("alloc_done", nil, len(keep)*8)
}

// probeFlood writes N bytes of 'a' to stdout, without a newline.
func probeFlood(args []string) {
	n, _ := strconv.ParseInt(args[0], 10, 64)
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = 'a'
	}
	for n > 0 {
		w := min(n, int64(len(buf)))
		if _, err := os.Stdout.Write(buf[:w]); err != nil {
			fmt.Fprintln(os.Stderr, "flood write:", err)
			os.Exit(1)
		}
		n -= w
	}
}

// probeThreads starts threads until clone fails, using raw clone with
// CLONE_THREAD-like sharing avoided: each is an OS thread parked in a
// locked goroutine. The Go runtime aborts when it cannot make a thread;
// the count printed before that is what the test reads.
func probeThreads(args []string) {
	n, _ := strconv.Atoi(args[0])
	for i := 0; i < n; i++ {
		go func() {
			runtime.LockOSThread()
			time.Sleep(time.Hour)
		}()
		if i%8 == 0 {
			fmt.Println("threads", i)
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(2 * time.Second)
	fmt.Println("threads_done", n)
}

// probeFiles creates empty files in dir until an error, the deadline
// (args[1] seconds) or, when args[2] is given, that many files.
func probeFiles(args []string) {
	dir := args[0]
	secs, _ := strconv.Atoi(args[1])
	most := -1
	if len(args) > 2 {
		most, _ = strconv.Atoi(args[2])
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		report("create_files", err, "mkdir")
		return
	}
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	n := 0
	var err error
	for n != most && time.Now().Before(deadline) {
		var fd int
		fd, err = unix.Open(dir+"/f"+strconv.Itoa(n), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			break
		}
		unix.Close(fd)
		n++
	}
	report("create_files", err, n)
}

// probeConnect tries to connect to unix sockets by path ("@name" for the
// abstract namespace).
func probeConnect(args []string) {
	for i, p := range args {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			report(fmt.Sprintf("connect_%d", i), err)
			continue
		}
		name := p
		if strings.HasPrefix(p, "@") {
			name = "\x00" + p[1:]
		}
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: name})
		report(fmt.Sprintf("connect_%d", i), err, p)
		unix.Close(fd)
	}
}

// probeWrite writes args[1] to the file args[0] (without creating it).
func probeWrite(args []string) {
	fd, err := unix.Open(args[0], unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		_, err = unix.Write(fd, []byte(args[1]))
		unix.Close(fd)
	}
	report("write", err, args[0])
}

// probeIDs prints the real, effective and saved uids and no_new_privs,
// then sleeps args[0] seconds so that the host can look at the process.
func probeIDs(args []string) {
	r, e, s := unix.Getresuid()
	nnp, _ := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	fmt.Printf("ids %d %d %d nnp=%d\n", r, e, s, nnp)
	if len(args) > 0 {
		n, _ := strconv.Atoi(args[0])
		time.Sleep(time.Duration(n) * time.Second)
	}
}
