// The runtime's periodic GOMAXPROCS update would call sched_getaffinity
// from its monitor thread, which this process's own listener answers
// (cmd/agentbox-guest turns it off the same way).

//go:debug updatemaxprocs=0
package sysview

import (
	"log/slog"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The listener in this test process itself (the filter stays on it, as
// on an init): before Ready every call is the kernel's; after it statfs
// of a path on the root's mount (and fstatfs of a file there) answers
// from the quota group's files, any other mount's is the kernel's, and
// sysinfo answers from /proc/meminfo. The quota group here is three
// files of a test directory, since a qgroup's sysfs directory is the
// host's.
func TestListener(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (the listener writes the caller's memory through /proc/PID/mem and takes its ids)")
	}
	var before unix.Statfs_t
	if err := unix.Statfs("/", &before); err != nil {
		t.Fatal(err)
	}
	v, err := Install(slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil || st.Blocks != before.Blocks {
		t.Fatalf("before Ready, statfs / = %d blocks (%v), want the kernel's %d", st.Blocks, err, before.Blocks)
	}
	dir := t.TempDir()
	const limit, referenced, reserved = 300 << 20, 40 << 20, 8 << 20
	for name, n := range map[string]int{"max_referenced": limit, "referenced": referenced, "rsv_data": reserved} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strconv.Itoa(n)+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.OpenDisk(dir); err != nil {
		t.Fatal(err)
	}
	if err := v.Ready(); err != nil {
		t.Fatal(err)
	}
	bs := uint64(before.Bsize)
	want := func(what string, st unix.Statfs_t) {
		t.Helper()
		// An overlay's (a sandbox's root is one) with the root mount's
		// flags and block size as the kernel gives them.
		if st.Blocks != limit/bs || st.Bfree != (limit-referenced-reserved)/bs || st.Bavail != st.Bfree ||
			st.Type != unix.OVERLAYFS_SUPER_MAGIC || st.Flags != before.Flags || st.Bsize != before.Bsize || st.Namelen != 255 {
			t.Errorf("%s: %d blocks, %d free, %d available, type %x, flags %x, block size %d, names %d; want %d, %d (the limit less referenced and reserved), %x, %x, %d, 255",
				what, st.Blocks, st.Bfree, st.Bavail, st.Type, st.Flags, st.Bsize, st.Namelen,
				limit/bs, (limit-referenced-reserved)/bs, unix.OVERLAYFS_SUPER_MAGIC, before.Flags, before.Bsize)
		}
	}
	for _, p := range []string{"/", "/etc/../", "etc"} {
		if p == "etc" {
			if err := os.Chdir("/"); err != nil {
				t.Fatal(err)
			}
		}
		st = unix.Statfs_t{}
		if err := unix.Statfs(p, &st); err != nil {
			t.Fatalf("statfs %s: %v", p, err)
		}
		want("statfs "+p, st)
	}
	f, err := os.Open("/etc/hostname")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st = unix.Statfs_t{}
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	want("fstatfs of /etc/hostname", st)
	// Another mount, a missing path, a bad pointer: the kernel's answers.
	if err := unix.Statfs("/proc", &st); err != nil || st.Type != unix.PROC_SUPER_MAGIC {
		t.Errorf("statfs /proc: type %x, %v; want proc's", st.Type, err)
	}
	if err := unix.Statfs("/no/such/path", &st); err != unix.ENOENT {
		t.Errorf("statfs of a missing path: %v, want ENOENT", err)
	}
	if _, _, e := unix.Syscall(unix.SYS_STATFS, 0, 0, 0); e != unix.EFAULT {
		t.Errorf("statfs(NULL): %v, want EFAULT", e)
	}
	// sysinfo: /proc/meminfo's figures (here the host's, as the kernel's).
	// Not unix.Sysinfo: a raw system call, which the runtime cannot stop
	// for a collection while it waits on this process's own listener.
	var si unix.Sysinfo_t
	if _, _, e := unix.Syscall(unix.SYS_SYSINFO, uintptr(unsafe.Pointer(&si)), 0, 0); e != 0 {
		t.Fatal(e)
	}
	mi, _ := os.ReadFile("/proc/meminfo")
	var totalKB uint64
	for line := range strings.Lines(string(mi)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			totalKB, _ = strconv.ParseUint(strings.Fields(rest)[0], 10, 64)
		}
	}
	// Its uptime is this process's age, as a sandbox's is its init's.
	if si.Unit != 1 || si.Totalram != totalKB<<10 || si.Procs == 0 || si.Uptime < 0 || si.Uptime > 60 {
		t.Errorf("sysinfo: total %d x %d, procs %d, uptime %d; want MemTotal %d kB in bytes, some procs, this process's age", si.Totalram, si.Unit, si.Procs, si.Uptime, totalKB)
	}
	// A limit raised (a resize) shows at the next call.
	if err := os.Chmod(filepath.Join(dir, "max_referenced"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "max_referenced"), []byte(strconv.Itoa(600<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Statfs("/", &st); err != nil || st.Blocks != 600<<20/bs {
		t.Errorf("after the limit was raised: %d blocks (%v), want %d", st.Blocks, err, 600<<20/bs)
	}
	testAffinity(t, v)
}

// testAffinity: sched_getaffinity of a thread's own mask, and another
// thread's, answers the first cpus() CPUs of the kernel's once SetCPUs
// gave a count below the mask's, with the kernel's return value; a
// missing thread, a count of 0 (no limit) or one the mask does not
// exceed are the kernel's; bad sizes EINVAL, a bad pointer EFAULT.
func testAffinity(t *testing.T, v *View) {
	// Raw system calls through unix.Syscall, which gives up the P while
	// the call waits on this process's own listener.
	getaffinity := func(pid int, size uintptr) ([]byte, int, unix.Errno) {
		buf := make([]byte, 8192)
		n, _, e := unix.Syscall(unix.SYS_SCHED_GETAFFINITY, uintptr(pid), size, uintptr(unsafe.Pointer(&buf[0])))
		if e != 0 {
			return nil, 0, e
		}
		return buf[:n], int(n), e
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	kernel, size, e := getaffinity(0, 8192)
	if e != 0 || size != v.maskSize || v.allowed != onesCount(kernel) || v.CPUs() != v.allowed {
		t.Fatalf("before SetCPUs: %d bytes (%v), %d CPUs; the view read %d bytes, %d CPUs", size, e, onesCount(kernel), v.maskSize, v.allowed)
	}
	if v.allowed < 2 {
		t.Fatalf("this host lets the test run on %d CPU; it needs 2 to tell a narrowed mask", v.allowed)
	}
	limit := 1
	v.SetCPUs(func() int { return limit })
	for _, pid := range []int{0, unix.Gettid()} {
		got, n, e := getaffinity(pid, 8192)
		want := slices.Clone(kernel)
		firstCPUs(want, 1)
		if e != 0 || n != size || !slices.Equal(got, want) || onesCount(got) != 1 {
			t.Errorf("sched_getaffinity(%d) with a limit of 1: %x (%d bytes, %v), want %x", pid, got, n, e, want)
		}
	}
	if _, _, e := unix.Syscall(unix.SYS_SCHED_GETAFFINITY, 0, 8192, 0); e != unix.EFAULT {
		t.Errorf("sched_getaffinity into NULL: %v, want EFAULT", e)
	}
	kernelToo := func(what string, pid int, size uintptr) {
		t.Helper()
		got, _, e := getaffinity(pid, size)
		if e != 0 || onesCount(got) != v.allowed {
			t.Errorf("%s: %x (%v), want the kernel's %x", what, got, e, kernel)
		}
	}
	// Another thread of the same pid namespace (taskset -p): narrowed
	// too; one that does not exist: the kernel's ESRCH.
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		if tid, _ := strconv.Atoi(task.Name()); tid != unix.Gettid() {
			got, _, e := getaffinity(tid, 8192)
			if e != 0 || onesCount(got) != 1 {
				t.Errorf("sched_getaffinity(%d), another thread, with a limit of 1: %x (%v), want one CPU", tid, got, e)
			}
			break
		}
	}
	if _, _, e := getaffinity(1<<22+1, 8192); e != unix.ESRCH {
		t.Errorf("sched_getaffinity of a pid beyond pid_max: %v, want the kernel's ESRCH", e)
	}
	// A buffer the kernel takes though shorter than its mask (Python's
	// first try is 8 bytes) gets as many bytes, narrowed.
	if v.minSize < size {
		got, n, e := getaffinity(0, uintptr(v.minSize))
		want := slices.Clone(kernel[:v.minSize])
		firstCPUs(want, 1)
		if e != 0 || n != v.minSize || !slices.Equal(got, want) {
			t.Errorf("sched_getaffinity into %d bytes: %x (%d bytes, %v), want %x", v.minSize, got, n, e, want)
		}
	}
	// Sizes the kernel refuses: its EINVAL.
	for _, bad := range []uintptr{uintptr(v.minSize) - 8, uintptr(v.minSize) + 1} {
		if _, _, e := getaffinity(0, bad); e != unix.EINVAL {
			t.Errorf("sched_getaffinity into %d bytes: %v, want the kernel's EINVAL", bad, e)
		}
	}
	limit = 0
	kernelToo("without a limit", 0, 8192)
	limit = v.allowed
	kernelToo("with a limit of every CPU", 0, 8192)
}

func onesCount(b []byte) int {
	n := 0
	for _, c := range b {
		n += bits.OnesCount8(c)
	}
	return n
}

func TestAllowedMask(t *testing.T) {
	for _, c := range []struct {
		status string
		size   int
		want   []byte
	}{
		{"Name:\tx\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\n", 8, []byte{3, 0, 0, 0, 0, 0, 0, 0}},
		{"Name:\tx\nCpus_allowed:\t00000001,80000000\n", 8, []byte{0, 0, 0, 0x80, 1, 0, 0, 0}},
		{"Name:\tx\nCpus_allowed:\tffff,00000000,0000000f\n", 16, []byte{0xf, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0}},
		{"Name:\tx\nCpus_allowed:\t1,00000000,00000000\n", 8, nil}, // a CPU beyond the mask
		{"Name:\tx\nCpus_allowed:\tzz\n", 8, nil},
		{"Name:\tx\n", 8, nil},
	} {
		got, ok := allowedMask([]byte(c.status), c.size)
		if ok != (c.want != nil) || !slices.Equal(got, c.want) {
			t.Errorf("allowedMask(%q, %d) = %x, %v; want %x", c.status, c.size, got, ok, c.want)
		}
	}
}

func TestFirstCPUs(t *testing.T) {
	for _, c := range []struct {
		mask []byte
		n    int
		want []byte
		more bool
	}{
		{[]byte{0xff, 0}, 2, []byte{3, 0}, true},
		{[]byte{0xf0, 0x0f}, 5, []byte{0xf0, 1}, true},
		{[]byte{0x0a, 0}, 2, []byte{0x0a, 0}, false},
		{[]byte{0x0a, 0}, 3, []byte{0x0a, 0}, false},
		{[]byte{0, 0x81}, 1, []byte{0, 1}, true},
	} {
		got := slices.Clone(c.mask)
		if more := firstCPUs(got, c.n); more != c.more || !slices.Equal(got, c.want) {
			t.Errorf("firstCPUs(%x, %d) = %x, %v; want %x, %v", c.mask, c.n, got, more, c.want, c.more)
		}
	}
}

func TestFsIDs(t *testing.T) {
	uid, gid, groups, err := fsIDs(uint32(os.Getpid()))
	if err != nil || uid != uint32(os.Getuid()) || gid != uint32(os.Getgid()) {
		t.Fatalf("fsIDs of this process: %d %d %v %v", uid, gid, groups, err)
	}
	own, _ := os.Getgroups()
	if len(groups) != len(own) {
		t.Errorf("groups %v, want %v", groups, own)
	}
}
