package container

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/driver/drivertest"
)

// waiting lists the pids of the driver's inits waiting for a sandbox
// (it takes them out of the pool and puts them back).
func waiting(d *Driver) []int {
	var ps []*initProc
	for {
		select {
		case p := <-d.pre.ready:
			ps = append(ps, p)
			continue
		default:
		}
		break
	}
	var pids []int
	for _, p := range ps {
		pids = append(pids, p.pid)
		putBack(d, p)
	}
	return pids
}

func waitFull(t *testing.T, d *Driver) []int {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		d.pre.mu.Lock()
		full := len(d.pre.ready) == cap(d.pre.ready) && !d.pre.filling
		d.pre.mu.Unlock()
		if full {
			return waiting(d)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool of waiting inits did not refill within 20 s (%d of %d)", len(d.pre.ready), cap(d.pre.ready))
		}
	}
}

// statusField reads one field of /proc/PID/status.
func statusField(t *testing.T, pid int, key string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return ""
}

// testUIDBase is the sandbox uid range's start in these tests.
const testUIDBase = 1000000

// prespawnDriver is a driver keeping n inits waiting, closed after the
// test, and its cgroup parent.
func prespawnDriver(t *testing.T, n int) (*Driver, string) {
	t.Helper()
	parent := drivertest.CgroupParent(t)
	d, err := New(driver.Options{GuestBinary: drivertest.BuildGuest(t), CgroupParent: parent, UIDBase: testUIDBase, Seccomp: true, Prespawn: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, parent
}

// A create takes an init that was started ahead of it and the pool fills
// again; a waiting init has already dropped its bounding set, waits in a
// cgroup of its own that becomes the sandbox's, runs as the sandbox uid
// range in its own namespaces; one that died while waiting is passed
// over; Close ends the waiting ones and their cgroups.
func TestPrespawnedInits(t *testing.T) {
	d, parent := prespawnDriver(t, 2)
	const uidBase = testUIDBase
	layers := []string{drivertest.BusyboxRootfs(t, uidBase)}

	pids := waitFull(t, d)
	for _, pid := range pids {
		if got := statusField(t, pid, "CapBnd"); got != "0000000000000000" {
			t.Errorf("waiting init %d: CapBnd %s, want empty", pid, got)
		}
		if got := statusField(t, pid, "Uid"); !strings.HasPrefix(got, strconv.Itoa(uidBase)+"\t") {
			t.Errorf("waiting init %d: Uid %q, want the sandbox range's root %d", pid, got, uidBase)
		}
		self, _ := os.Readlink("/proc/self/ns/net")
		if ns, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/net"); ns == self || ns == "" {
			t.Errorf("waiting init %d: net namespace %q, want its own", pid, ns)
		}
		// Its own cgroup, made like a sandbox's without limits, under
		// the driver's init prefix: no sandbox's.
		cg, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
		for _, l := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
			if strings.Contains(l, ":pids:") && !strings.Contains(l, parent+"/"+d.initPrefix) {
				t.Errorf("waiting init %d is not in a cgroup of its own: %s", pid, l)
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	create := func(id string) *driver.Handle {
		t.Helper()
		spec := testSpec(t, id, layers, uidBase)
		h, err := d.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Destroy(context.Background(), h) })
		if got, err := drivertest.Exec(ctx, d, h, "hostname; cat /proc/self/status | grep CapBnd"); err != nil ||
			!strings.Contains(got.Stdout, "sbx-"+id) || !strings.Contains(got.Stdout, "0000000000000000") {
			t.Fatalf("exec in sandbox %s: %+v, %v", id, got, err)
		}
		return h
	}
	id := "pre" + strconv.FormatInt(time.Now().UnixNano()%1000000, 10)
	h := create(id)
	if !slices.Contains(pids, h.Pid) {
		t.Errorf("sandbox init %d is not one of the waiting inits %v", h.Pid, pids)
	}
	after := waitFull(t, d)
	if slices.Contains(after, h.Pid) || len(after) != 2 {
		t.Errorf("waiting inits after a create: %v (the used one was %d)", after, h.Pid)
	}

	// Kill every waiting init: the next create passes over them.
	for _, pid := range after {
		unix.Kill(pid, unix.SIGKILL)
	}
	for _, pid := range after {
		waitGoneTest(t, pid)
	}
	seenGone(t, d, after)
	h2 := create(id + "b")
	if slices.Contains(after, h2.Pid) {
		t.Errorf("a dead waiting init (%d) was handed a sandbox", h2.Pid)
	}

	// The sandbox's init is in the sandbox's own cgroups, renamed from
	// the ones it waited in.
	cgFile, _ := os.ReadFile("/proc/" + strconv.Itoa(h.Pid) + "/cgroup")
	if !strings.Contains(string(cgFile), parent+"/"+id+"\n") {
		t.Errorf("sandbox init's cgroups:\n%s\nwant %s/%s", cgFile, parent, id)
	}

	last := waitFull(t, d)
	d.Close()
	for _, pid := range last {
		waitGoneTest(t, pid)
	}
	// Nothing of the waiting inits' cgroups is left.
	names, err := d.cg.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, d.initPrefix) {
			t.Errorf("cgroup %s of a waiting init left after Close", n)
		}
	}
}

// putBack returns p to the pool, or ends it if a refill filled the pool
// meanwhile.
func putBack(d *Driver, p *initProc) {
	select {
	case d.pre.ready <- p:
	default:
		d.discard(p)
	}
}

// seenGone waits until the driver has seen the waiting inits pids exit
// (their pidfd watch closed their channel): a create that takes one
// before that gives it the spec and fails. An init that dies at that
// moment is a rare race a caller sees as a failed create.
func seenGone(t *testing.T, d *Driver, pids []int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var ps []*initProc
		for len(d.pre.ready) > 0 {
			ps = append(ps, <-d.pre.ready)
		}
		live := 0
		for _, p := range ps {
			select {
			case <-p.exited:
			default:
				if slices.Contains(pids, p.pid) {
					live++
				}
			}
			putBack(d, p)
		}
		if live == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d killed inits still look alive to the driver", live)
		}
	}
}

// waitGoneTest waits until every thread of pid has exited (a pidfd: the
// leader's zombie state alone comes while other threads, which hold the
// process's files, may still be on their way out).
func waitGoneTest(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // gone and reaped
	}
	defer unix.Close(fd)
	n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 10000)
	if err != nil || n == 0 {
		t.Fatalf("process %d still runs 10 s later (%v)", pid, err)
	}
}

// Started names the init before it is in the sandbox's cgroups (so the
// network is wired while the create goes on), and names the replacement
// when the announced init dies before it is given its spec; the sandbox
// then runs on the replacement.
func TestStartedAnnouncesInit(t *testing.T) {
	d, parent := prespawnDriver(t, 1)
	const uidBase = testUIDBase
	waitFull(t, d)
	id := "ann" + strconv.FormatInt(time.Now().UnixNano()%1000000, 10)
	spec := testSpec(t, id, []string{drivertest.BusyboxRootfs(t, uidBase)}, uidBase)
	var announced []int
	spec.Started = func(pid int) {
		announced = append(announced, pid)
		cg, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
		if strings.Contains(string(cg), parent+"/"+id) {
			t.Errorf("init %d announced after it was put in the sandbox's cgroups", pid)
		}
		if len(announced) == 1 { // the first one dies before its spec
			unix.Kill(pid, unix.SIGKILL)
			waitGoneTest(t, pid)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := d.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Destroy(context.Background(), h) })
	if len(announced) != 2 || announced[1] != h.Pid || announced[0] == h.Pid {
		t.Fatalf("announced %v, the sandbox's init is %d; want the killed one, then it", announced, h.Pid)
	}
	if got, err := drivertest.Exec(ctx, d, h, "hostname"); err != nil || strings.TrimSpace(got.Stdout) != "sbx-"+id {
		t.Fatalf("exec on the replacement: %+v, %v", got, err)
	}
}

// testSpec prepares a sandbox's directories as the service and storage
// do (a run dir owned by root, a writable layer owned by the sandbox's
// root, under /var/tmp where the sandbox's uids reach) and returns its
// spec.
func testSpec(t *testing.T, id string, layers []string, uidBase int) *driver.Spec {
	t.Helper()
	tmp, err := os.MkdirTemp("/var/tmp", "containertest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o711); err != nil {
		t.Fatal(err)
	}
	spec := &driver.Spec{ID: id, Hostname: "sbx-" + id, Layers: layers,
		UpperDir: filepath.Join(tmp, "upper"), WorkDir: filepath.Join(tmp, "work"),
		RunDir: filepath.Join(tmp, "sandboxes", id), Env: []string{"PATH=/bin"},
		User: "root", Workdir: "/", CPU: 1, MemoryMB: 128, Pids: 64}
	for _, dir := range []string{spec.UpperDir, spec.WorkDir} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, uidBase, uidBase); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(spec.RunDir, 0o711); err != nil {
		t.Fatal(err)
	}
	return spec
}

// An init that waited maxWait is replaced (its mount namespace holds what
// the host has unmounted since it started).
func TestWaitingInitsAreReplaced(t *testing.T) {
	defer maxWait.Store(maxWait.Load())
	maxWait.Store(300 * time.Millisecond)
	d, _ := prespawnDriver(t, 1)
	first := waitFull(t, d)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if now := waiting(d); len(now) == 1 && now[0] != first[0] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("init %v still waiting 20 s after its 300 ms", first)
		}
	}
	waitGoneTest(t, first[0])
}

// mntObjects is the kernel's count of mount structures in use
// (/proc/slabinfo's mnt_cache).
func mntObjects(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/slabinfo")
	if err != nil {
		t.Fatalf("reading /proc/slabinfo (root): %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == "mnt_cache" {
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("slabinfo line %q: %v", l, err)
			}
			return n
		}
	}
	t.Fatal("no mnt_cache in /proc/slabinfo: this kernel merges it into another cache; boot with slab_nomerge to run this test")
	return 0
}

// A sandbox keeps no copy of the host's mount table: its init is
// executed from an open descriptor (proto.BootExeFD), so nothing of the
// namespace copy it starts with is pinned after the pivot. With the
// init executed by its host path, each sandbox held its copy whole, for
// its life (with 1,000 extra host mounts, 4 sandboxes held 4,000 more).
func TestInitPinsNoHostMounts(t *testing.T) {
	d, _ := prespawnDriver(t, 0)
	layers := []string{drivertest.BusyboxRootfs(t, testUIDBase)}
	// 1,000 more mounts in the host's table, each copied into every new
	// mount namespace.
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	const extra = 1000
	for i := range extra {
		p := filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", 0, "size=4k"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	before := mntObjects(t)
	const sandboxes = 4
	for i := range sandboxes {
		id := "pin" + strconv.Itoa(i) + strconv.FormatInt(time.Now().UnixNano()%100000, 10)
		h, err := d.Create(ctx, testSpec(t, id, layers, testUIDBase))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Destroy(context.Background(), h) })
		if _, err := drivertest.Exec(ctx, d, h, "true"); err != nil {
			t.Fatal(err)
		}
	}
	// Freed copies go through RCU: give them a moment, and judge the
	// count once it stops falling.
	grew := mntObjects(t) - before
	for deadline := time.Now().Add(10 * time.Second); grew > extra && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		grew = mntObjects(t) - before
	}
	if grew > extra {
		t.Errorf("%d sandboxes hold %d more mounts with %d extra on the host; each should hold its own few dozen, not a copy of the host's table", sandboxes, grew, extra)
	}
	t.Logf("%d sandboxes, %d extra host mounts: %d more mounts in use", sandboxes, extra, grew)
}
