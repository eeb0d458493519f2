package gvisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/driver"
)

// fn runs on a thread that is not the main thread, and not the one a
// goroutine that found itself on the main thread holds: an in-process
// daemon (the integration tests') does not keep its main thread to
// itself as agentboxd does.
func TestOnThrowawayThread(t *testing.T) {
	real := onMainThread
	t.Cleanup(func() { onMainThread = real })
	var held int
	onMainThread = func() bool {
		if held == 0 {
			held = unix.Gettid() // as if this were the main thread
			return true
		}
		return real()
	}
	var ran int
	err := onThrowawayThread(func() error {
		ran = unix.Gettid()
		return unix.EPERM
	})
	if err != unix.EPERM {
		t.Errorf("onThrowawayThread returned %v, want fn's EPERM", err)
	}
	if ran == 0 || ran == held || ran == unix.Getpid() {
		t.Errorf("fn ran on thread %d; the held one is %d, the main one %d", ran, held, unix.Getpid())
	}
	onMainThread = real
	for range 50 {
		_ = onThrowawayThread(func() error {
			if unix.Gettid() == unix.Getpid() {
				t.Error("fn ran on the main thread")
			}
			return nil
		})
	}
}

func TestViewOf(t *testing.T) {
	for _, c := range []struct {
		cpu      float64
		memoryMB int64
		host     int
		want     sentryView
	}{
		{1, 256, 8, sentryView{2, 100000, 100000, 256<<20 + sentryReserveMemory}},
		{0.5, 0, 8, sentryView{2, 50000, 100000, unlimitedMemory}},
		{2.5, 0, 8, sentryView{3, 250000, 100000, unlimitedMemory}},
		{4, 0, 2, sentryView{2, 400000, 100000, unlimitedMemory}},
		{1, 0, 1, sentryView{1, 100000, 100000, unlimitedMemory}},
		{0, 0, 6, sentryView{6, -1, 100000, unlimitedMemory}},
		{0.001, 0, 8, sentryView{2, 1000, 100000, unlimitedMemory}},
	} {
		if got := viewOf(&driver.Spec{CPU: c.cpu, MemoryMB: c.memoryMB}, c.host); got != c.want {
			t.Errorf("cpu %v, memory %d MiB on %d CPUs: %+v, want %+v", c.cpu, c.memoryMB, c.host, got, c.want)
		}
	}
}

// runsc's cgroup root, as its own parser finds it (runsc/cgroup's
// findCgroupRoot of the pinned runsc), from mountinfos of the kinds of
// host there are.
func TestRunscCgroupRoot(t *testing.T) {
	const (
		v1 = `22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw
25 22 0:23 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:24 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw
27 25 0:25 / /sys/fs/cgroup/systemd rw,nosuid shared:11 - cgroup cgroup rw,xattr,name=systemd
31 25 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:15 - cgroup cgroup rw,cpu,cpuacct
`
		v2       = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
		elsewise = "40 1 0:30 / /dev/cgroup/memory rw - cgroup cgroup rw,memory\n"
		custom   = "40 1 0:30 / /cg rw - cgroup2 none rw\n"
		none     = "22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw\n"
	)
	for in, want := range map[string]string{v1: "/sys/fs/cgroup", v2: "/sys/fs/cgroup", elsewise: "/dev/cgroup", custom: "/cg", none: "/sys/fs/cgroup", "": "/sys/fs/cgroup"} {
		if got := runscCgroupRoot(strings.NewReader(in)); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// A command started in the view reads the view's cgroup where runsc
// looks, as `runsc run` does; the daemon's own cgroups stay the host's.
func TestStartInView(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (a mount namespace and a bind mount)")
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	root := runscCgroupRoot(mi)
	mi.Close()
	var out strings.Builder
	cmd := exec.Command("cat", filepath.Join(root, "cpuset", viewCgroup, "cpuset.cpus"),
		filepath.Join(root, "cpu", viewCgroup, "cpu.cfs_quota_us"),
		filepath.Join(root, "memory", viewCgroup, "memory.limit_in_bytes"),
		filepath.Join(root, "memory", viewCgroup, "cgroup.procs"))
	cmd.Stdout, cmd.Stderr = &out, &out
	views := t.TempDir()
	view, err := viewDir(views, viewOf(&driver.Spec{CPU: 1, MemoryMB: 256}, 2))
	if err != nil {
		t.Fatal(err)
	}
	// The same view again is the same tree; another is another.
	if again, err := viewDir(views, viewOf(&driver.Spec{CPU: 1, MemoryMB: 256}, 2)); err != nil || again != view {
		t.Errorf("the same view again: %q, %v; want %q", again, err, view)
	}
	if other, err := viewDir(views, viewOf(&driver.Spec{CPU: 1, MemoryMB: 512}, 2)); err != nil || other == view {
		t.Errorf("another view: %q, %v", other, err)
	}
	if err := startInView(cmd, view, root); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if got, want := strings.Fields(out.String()), []string{"0-1", "100000", "369098752"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the command read %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(root, "cpu", viewCgroup)); err == nil {
		t.Errorf("%s shows in the daemon's mount namespace", filepath.Join(root, "cpu", viewCgroup))
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), views) {
		t.Error("the view's bind mount shows in the daemon's mount namespace")
	}
}

// What the view adds to starting a command (compare BenchmarkStartPlain):
// its namespace and bind mount, the tree made already.
func BenchmarkStartInView(b *testing.B) {
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		b.Fatal(err)
	}
	root := runscCgroupRoot(mi)
	mi.Close()
	views := b.TempDir()
	for b.Loop() {
		view, err := viewDir(views, viewOf(&driver.Spec{CPU: 1, MemoryMB: 256}, 2))
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command("/bin/true")
		if err := startInView(cmd, view, root); err != nil {
			b.Fatal(err)
		}
		_ = cmd.Wait()
	}
}

// Making a view's tree, which the first create of a view pays.
func BenchmarkViewDir(b *testing.B) {
	views := b.TempDir()
	n := 0
	for b.Loop() {
		n++
		if _, err := viewDir(views, viewOf(&driver.Spec{CPU: 1, MemoryMB: int64(n)}, 2)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStartPlain(b *testing.B) {
	for b.Loop() {
		cmd := exec.Command("/bin/true")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		_ = cmd.Wait()
	}
}

// A view's cgroup among the host's (runsc looked elsewhere than the
// view) fails the create, naming the fix.
func TestViewHeld(t *testing.T) {
	root := t.TempDir()
	d := &Driver{cgroupRoot: root}
	if err := d.viewHeld(); err != nil {
		t.Fatalf("no such cgroup: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(root, "memory", viewCgroup), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := d.viewHeld(); err == nil || !strings.Contains(err.Error(), "restart the daemon") {
		t.Fatalf("with %s/memory%s: %v; want an error that says what to do", root, viewCgroup, err)
	}
}
