package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/driver/drivertest"
	"github.com/agentbox/agentbox/internal/guest/harden"
	"github.com/agentbox/agentbox/internal/guest/harden/filter"
	"github.com/agentbox/agentbox/internal/guest/proto"
)

// TestDriverRoundTrip creates a runsc sandbox on the busybox rootfs that
// scripts/build-template.sh leaves in /var/lib/agentbox/build (unshifted,
// so its files show as nobody inside: the uid map is real), runs a
// command through the guest agent, and destroys it leaving no mount,
// cgroup or process. It needs root and runsc (scripts/install-runsc.sh).
func TestDriverRoundTrip(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs a real gVisor sandbox and needs root (make test runs as root)")
	}
	lower := "/var/lib/agentbox/build/busybox"
	if _, err := os.Stat(filepath.Join(lower, "bin")); err != nil {
		t.Fatal("no busybox rootfs: run scripts/build-template.sh busybox --no-import (make test does)")
	}
	if _, err := os.Stat(runscPath()); err != nil {
		t.Fatal("no runsc: run scripts/install-runsc.sh (make test does)")
	}
	// Names of this run only: other runs may share the host.
	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1000000)
	parent := drivertest.CgroupParent(t)
	guest := drivertest.BuildGuest(t)
	// With the memory view (gvisor_memory_view), checked below; the
	// conformance suite runs without it.
	d, err := New(driver.Options{GuestBinary: guest, CgroupParent: parent, UIDBase: 1000000, UIDCount: 65536})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d.viewsDir) })
	tmp, _ := os.MkdirTemp("/var/tmp", "gvisor-test-")
	defer os.RemoveAll(tmp)
	spec := &driver.Spec{ID: "gvtest" + suffix, Hostname: "gvtest", Layers: []string{lower},
		UpperDir: filepath.Join(tmp, "upper"), WorkDir: filepath.Join(tmp, "work"), RunDir: filepath.Join(tmp, "run"),
		Env: []string{"PATH=/bin:/usr/bin"}, CPU: 3, MemoryMB: 256, Pids: 128}
	// As on a host of 4 CPUs: the Sentry's count comes from the view, so
	// it can differ from this host's.
	d.hostCPUs = 4
	// As the service makes them: the run dir traversable, the writable
	// layer owned by the sandbox's root (host uid_base).
	_ = os.Chmod(tmp, 0o711)
	for _, dir := range []string{spec.UpperDir, spec.WorkDir, spec.RunDir} {
		_ = os.MkdirAll(dir, 0o711)
		_ = os.Chown(dir, 1000000, 1000000)
	}
	_ = os.Chown(spec.RunDir, 0, 0)
	ctx := context.Background()
	start := time.Now()
	h, err := d.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("create %v, pid %d", time.Since(start), h.Pid)
	defer d.Destroy(ctx, h)
	res, err := drivertest.Exec(ctx, d, h, "uname -a; id; echo hi > /root/f; ls -ln /; cat /proc/self/status | grep -i cap; grep cgroup /proc/mounts; ls -la /.agentbox; cat /.agentbox/cgroup/workload/pids.max; cat /proc/self/cgroup; ls /.agentbox/cgroup/workload; cat /.agentbox/cgroup/workload/*/pids.current /.agentbox/cgroup/workload/pids.current; cat /.agentbox/cgroup/workload/*/cgroup.procs")
	if err != nil {
		t.Fatal(err)
	}
	out := []byte(res.Stdout + res.Stderr)
	t.Logf("exec: %s", out)
	logb, _ := os.ReadFile(filepath.Join(spec.RunDir, "runsc.log"))
	t.Logf("runsc.log: %s", logb)
	if !strings.Contains(strings.ToLower(string(out)), "gvisor") {
		t.Errorf("not gVisor? %s", out)
	}
	// gVisor's MemTotal is the sandbox's memory cgroup limit (its memory
	// and the Sentry's reserve) and its CPU count ceil(quota), both read
	// by runsc run from the driver's view (view_linux.go), not the host's
	// (2 CPUs on the development machine, 3 here).
	res, err = drivertest.Exec(ctx, d, h, "head -1 /proc/meminfo; grep -c ^processor /proc/cpuinfo; cat /sys/devices/system/cpu/online; nproc")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("MemTotal: %d kB 3 0-2 3", (spec.MemoryMB<<20+sentryReserveMemory)>>10)
	if got := strings.Join(strings.Fields(res.Stdout), " "); got != want {
		t.Errorf("gVisor's MemTotal, CPUs in /proc/cpuinfo, online CPUs and nproc with cpu: 3 and 256 MiB: %q, want %q (%s)", got, want, res.Stderr)
	}
	// runsc found the view's cgroup, never one of the host's: none of
	// that name was made, and the Sentry runs in the driver's cgroups.
	hiers, _ := filepath.Glob(filepath.Join(d.cgroupRoot, "*", strings.TrimPrefix(viewCgroup, "/")))
	if len(hiers) > 0 {
		t.Errorf("runsc made host cgroups %v", hiers)
	}
	// The shell closed the cgroup.procs files it joined through.
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", h.Pid))
	for _, fd := range fds {
		if target, _ := os.Readlink(fd); strings.HasSuffix(target, "cgroup.procs") {
			t.Errorf("the Sentry holds %s: %s", fd, target)
		}
	}
	cgOf, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", h.Pid))
	if !strings.Contains(string(cgOf), "/"+parent+"/"+spec.ID) || strings.Contains(string(cgOf), viewCgroup) {
		t.Errorf("the Sentry's cgroups:\n%s\nwant the driver's, %s/%s", cgOf, parent, spec.ID)
	}
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	// Destroy is idempotent, and a second one leaves nothing either
	// (every runsc command binds its null-netns again).
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(b, []byte(spec.RunDir)) {
		t.Logf("%s", b)
		t.Error("a mount is left")
	}
}

// TestCheckNamesTheFix: a missing or broken runsc makes New fail with an
// error that says how to install it.
func TestCheckNamesTheFix(t *testing.T) {
	broken := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, bin := range map[string]string{
		"missing": "/nonexistent/runsc",
		"broken":  broken,
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("AGENTBOX_RUNSC", bin)
			err := check(t.TempDir())
			if err == nil || !strings.Contains(err.Error(), "install-runsc.sh") {
				t.Fatalf("check with %s: %v; want an error naming scripts/install-runsc.sh", bin, err)
			}
		})
	}
}

// The agent gets its seccomp filter in the boot spec, assembled by the
// driver, so no sandbox assembles it at boot: the container tier's
// policy with syslog(2) allowed.
func TestBundleCarriesSeccompFilter(t *testing.T) {
	prog, err := filter.ProgramAllowing(serveAllow...)
	if err != nil {
		t.Fatal(err)
	}
	bundle := t.TempDir()
	spec := &driver.Spec{ID: "sbx", Hostname: "sbx", MemoryMB: 256, Pids: 128}
	if err := writeBundle(bundle, "/rootfs", "/guest", "/sock", spec, 1000000, 65536, harden.EncodeFilter(prog), shmSizeMB(spec.MemoryMB)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var oci ociSpec
	if err := json.Unmarshal(b, &oci); err != nil {
		t.Fatal(err)
	}
	var boot proto.BootSpec
	for _, kv := range oci.Process.Env {
		if v, ok := strings.CutPrefix(kv, proto.ServeSpecEnv+"="); ok {
			if err := json.Unmarshal([]byte(v), &boot); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := harden.DecodeFilter(boot.SeccompFilter)
	if err != nil {
		t.Fatalf("the boot spec's filter: %v", err)
	}
	if !boot.Seccomp || !slices.Equal(got, prog) {
		t.Errorf("boot spec: seccomp %v, a filter of %d instructions; want true and the %d of ProgramAllowing(%q)",
			boot.Seccomp, len(got), len(prog), serveAllow)
	}
	// Without the allowance the program differs: the test would notice a
	// driver that sent the container tier's filter.
	plain, _ := filter.Program()
	if slices.Equal(plain, prog) {
		t.Error("ProgramAllowing(syslog) is the plain program")
	}
}

// TestSentryLastWords: a Sentry's panic in runsc's boot log is what the
// driver reports of its end; without one, its last error line.
func TestSentryLastWords(t *testing.T) {
	dir := t.TempDir()
	if got := sentryLastWords(dir); got != "" {
		t.Fatalf("no log: got %q, want empty", got)
	}
	boot := filepath.Join(dir, "runsc.log.20261206-164918.756496.boot.txt")
	write := func(s string) {
		if err := os.WriteFile(boot, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("I1206 started\nW1206 skipping procfs dump for PID 124\nI1206 last\n")
	if got := sentryLastWords(dir); got != "" {
		t.Errorf("info and warnings only: got %q, want empty", got)
	}
	write("I1206 started\nE1206 first error\nE1206 urpc: connection lost\nW1206 skipping\nI1206 last\n")
	if got := sentryLastWords(dir); got != "E1206 urpc: connection lost" {
		t.Errorf("errors: got %q, want the last", got)
	}
	write(strings.Repeat("I1206 filler line\n", 5000) + "panic: runtime error: invalid memory address\n\ngoroutine 1 [running]:\nkernel.(*Task).Exit\nmore\nmore\n")
	if got, want := sentryLastWords(dir), "panic: runtime error: invalid memory address |  | goroutine 1 [running]: | kernel.(*Task).Exit"; got != want {
		t.Errorf("panic: got %q, want %q", got, want)
	}
}
