package sysview

import (
	"log/slog"
	"os"
	"path/filepath"
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
