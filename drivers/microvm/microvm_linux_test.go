package microvm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/driver/drivertest"
	"github.com/agentbox/agentbox/errdefs"
)

// TestGuestKernelLimitsAndPosture boots one VM and checks what only this
// tier has: the guest runs its own kernel (Debian's, not the host's), the
// sandbox's CPU and memory are the VM's vCPUs and RAM, and the QEMU
// process on the host runs as the unprivileged uid, without capabilities,
// under no_new_privs and a seccomp filter (-sandbox on), in its own
// network namespace and in the sandbox's cgroups.
func TestGuestKernelLimitsAndPosture(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test boots a VM and needs root (make test runs as root)")
	}
	guest := drivertest.BuildGuest(t)
	parent := drivertest.CgroupParent(t)
	const uidBase = 1000000
	layer := drivertest.BusyboxRootfs(t, uidBase)
	d, err := New(driver.Options{GuestBinary: guest, CgroupParent: parent, UIDBase: uidBase, Seccomp: true, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	spec := &driver.Spec{
		ID: "mvmtest" + strconv.Itoa(os.Getpid()), Hostname: "mvm-host", Layers: []string{layer},
		UpperDir: filepath.Join(tmp, "upper"), WorkDir: filepath.Join(tmp, "work"), RunDir: filepath.Join(tmp, "run"),
		Env:  []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		User: "root", Workdir: "/", CPU: 1.5, MemoryMB: 200, Pids: 64, DiskMB: 64,
	}
	for _, dir := range []string{spec.UpperDir, spec.WorkDir, spec.RunDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	h, err := d.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("create to an answering agent: %v (%s)", time.Since(start).Round(time.Millisecond), d.Accel)
	defer d.Destroy(context.Background(), h)
	if h.Accelerator != d.Accel || (d.Accel != "kvm" && d.Accel != "tcg") {
		t.Errorf("handle accelerator %q, driver %q", h.Accelerator, d.Accel)
	}

	res, err := drivertest.Exec(ctx, d, h, "uname -r; nproc; grep MemTotal /proc/meminfo; hostname; cat /sys/fs/cgroup/pids/workload/pids.max")
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v %+v", err, res)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	var host unix.Utsname
	_ = unix.Uname(&host)
	hostRel := string(bytes.TrimRight(host.Release[:], "\x00"))
	if len(lines) != 5 || lines[0] != KernelRelease || lines[0] == hostRel {
		t.Fatalf("guest answered %q; want the guest kernel %s (host %s) first", lines, KernelRelease, hostRel)
	}
	if lines[1] != "2" {
		t.Errorf("nproc %q, want 2 vCPUs for 1.5 cores", lines[1])
	}
	f := strings.Fields(lines[2])
	if kb, _ := strconv.Atoi(f[1]); kb > 200*1024 || kb < 120*1024 {
		t.Errorf("guest MemTotal %s kB, want a little under 200 MiB", f[1])
	}
	if lines[3] != "mvm-host" || lines[4] != "64" {
		t.Errorf("hostname %q, pids.max %q", lines[3], lines[4])
	}

	// The disk limit is the writable disk's size: a full disk is ENOSPC
	// inside, and the sandbox goes on.
	res, err = drivertest.Exec(ctx, d, h, "dd if=/dev/zero of=/root/big bs=1M count=100 2>&1; rm /root/big; echo after")
	if err != nil || !strings.Contains(res.Stdout, "No space left on device") || !strings.HasSuffix(strings.TrimSpace(res.Stdout), "after") {
		t.Errorf("writing past the disk limit: %v %+v", err, res)
	}

	// QEMU's posture on the host.
	status, err := os.ReadFile("/proc/" + strconv.Itoa(h.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Uid":        strings.Repeat(strconv.Itoa(d.qemuUID)+"\t", 3) + strconv.Itoa(d.qemuUID),
		"CapEff":     "0000000000000000",
		"CapBnd":     "0000000000000000",
		"NoNewPrivs": "1",
		"Seccomp":    "2",
	}
	for _, l := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(l, ":")
		if w, ok := want[k]; ok {
			if strings.TrimSpace(v) != w {
				t.Errorf("qemu %s: %q, want %q", k, strings.TrimSpace(v), w)
			}
			delete(want, k)
		}
	}
	if len(want) > 0 {
		t.Errorf("qemu's status lacks %v", want)
	}
	self, _ := os.Readlink("/proc/self/ns/net")
	theirs, _ := os.Readlink("/proc/" + strconv.Itoa(h.Pid) + "/ns/net")
	if theirs == "" || theirs == self {
		t.Errorf("qemu's network namespace %q is the host's %q", theirs, self)
	}
	cg, err := os.ReadFile("/proc/" + strconv.Itoa(h.Pid) + "/cgroup")
	if err != nil || !strings.Contains(string(cg), parent+"/"+spec.ID) {
		t.Errorf("qemu is not in the sandbox's cgroups: %s", cg)
	}
	if out, _ := exec.Command("cat", "/proc/"+strconv.Itoa(h.Pid)+"/cmdline").Output(); !bytes.Contains(out, []byte("-nodefaults")) || !bytes.Contains(out, []byte("-no-user-config")) {
		t.Errorf("qemu runs without -nodefaults -no-user-config: %q", out)
	}

	// A daemon restart: the old process's connection goes, a new driver
	// adopts the VM over a new session (the conformance suite's restart
	// shares this process's session). Twice, at once: the agent may not
	// have seen the old host go when the new one says hello.
	if _, err := drivertest.Exec(ctx, d, h, "echo kept > /root/state"); err != nil {
		t.Fatal(err)
	}
	cur := d
	for i := range 2 {
		s, ok := sessions.Load(h.Socket)
		if !ok {
			t.Fatal("no session for the VM")
		}
		if err := cur.Close(); err != nil { // what the daemon does when it stops
			t.Fatal(err)
		}
		if !s.(*yamux.Session).IsClosed() {
			t.Fatal("Close left the VM's session open")
		}
		d2, err := New(driver.Options{GuestBinary: guest, CgroupParent: parent, UIDBase: uidBase, Seccomp: true, CacheDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := d2.Adopt(ctx, h); err != nil {
			t.Fatalf("adopt %d: %v", i, err)
		}
		took := time.Since(start)
		t.Logf("adopt %d over a new session: %v", i, took.Round(time.Millisecond))
		if took > 3*time.Second {
			b, _ := os.ReadFile(filepath.Join(spec.RunDir, "vm", "console.log"))
			t.Logf("console: %s", b)
		}
		if res, err := drivertest.Exec(ctx, d2, h, "cat /root/state"); err != nil || strings.TrimSpace(res.Stdout) != "kept" {
			t.Fatalf("after adopt %d: %v %+v", i, err, res)
		}
		cur = d2
	}

	writable := filepath.Join(spec.WorkDir, "microvm-rw.img")
	if _, err := os.Stat(writable); err != nil {
		t.Errorf("no writable disk in the writable layer: %v", err)
	}
	if err := cur.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{writable, h.Socket} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("destroy left %s", p)
		}
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(h.Pid)); err == nil && guestAlive(h) {
		t.Errorf("qemu %d outlived destroy", h.Pid)
	}
}

func guestAlive(h *driver.Handle) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(h.Pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && len(b) > i+2 && b[i+2] != 'Z'
}

// TestUnsupportedFileSnapshots: a snapshot or fork of the files alone is
// refused with a precondition error that says why; everything else,
// snapshots and forks with memory among it, is not.
func TestUnsupportedFileSnapshots(t *testing.T) {
	d := &Driver{}
	err := driver.Refuses(d, driver.OpFileSnapshot)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "with memory only") {
		t.Errorf("%s: %v", driver.OpFileSnapshot, err)
	}
	for _, op := range []driver.Op{driver.Op("exec"), driver.OpNetwork, driver.OpPause, driver.OpReset, driver.OpSnapshot, driver.OpFork} {
		if err := driver.Refuses(d, op); err != nil {
			t.Errorf("%s refused: %v", op, err)
		}
	}
}

// TestRefusesTooLittleMemory: a VM below MinMemoryMB would not boot its
// guest kernel; the create says so instead of ending in a dead VM.
func TestRefusesTooLittleMemory(t *testing.T) {
	d := &Driver{}
	_, err := d.Create(context.Background(), &driver.Spec{ID: "small", MemoryMB: MinMemoryMB - 1})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), strconv.Itoa(MinMemoryMB)) {
		t.Fatalf("create with %d MiB: %v, want invalid_argument naming %d MiB", MinMemoryMB-1, err, MinMemoryMB)
	}
}
