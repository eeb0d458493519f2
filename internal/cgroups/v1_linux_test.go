package cgroups

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/errdefs"
)

// testV1 returns a v1 manager under a parent unique to this test, removed
// afterwards; it skips where the host is not v1 or we are not root.
func testV1(t testing.TB) Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	parent := fmt.Sprintf("agentbox-test-%d", os.Getpid())
	m, err := New(parent)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version() != 1 {
		t.Skip("host runs cgroup v2; the v1 tests need a v1 or hybrid host")
	}
	t.Cleanup(func() {
		names, _ := m.List()
		for _, n := range names {
			if cg, err := m.Open(n); err == nil {
				cg.Destroy()
			}
		}
		removeTree(m.(*v1Manager).dirs)
	})
	return m
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// procState is the State letter of /proc/PID/status.
func procState(t *testing.T, pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "State:"); ok {
			return strings.Fields(v)[0]
		}
	}
	return ""
}

func TestV1Limits(t *testing.T) {
	m := testV1(t)
	cg, err := m.Create("limits", Resources{CPU: 0.5, MemoryBytes: 64 << 20, Pids: 32})
	if err != nil {
		t.Fatal(err)
	}
	p := cg.Paths()
	tests := []struct{ file, want string }{
		{p["cpu"] + "/cpu.cfs_period_us", "100000"},
		{p["cpu"] + "/cpu.cfs_quota_us", "50000"},
		{p["memory"] + "/memory.limit_in_bytes", fmt.Sprint(64 << 20)},
		{p["memory"] + "/memory.memsw.limit_in_bytes", fmt.Sprint(64 << 20)},
		{p["pids"] + "/pids.max", "32"},
	}
	check := func(t *testing.T) {
		for _, tt := range tests {
			if _, err := os.Stat(tt.file); errors.Is(err, os.ErrNotExist) && strings.Contains(tt.file, "memsw") {
				continue // no swap accounting on this kernel
			}
			if got := readTrim(t, tt.file); got != tt.want {
				t.Errorf("%s = %s, want %s", tt.file, got, tt.want)
			}
		}
	}
	t.Run("create", check)

	// Raising memory needs memsw first, lowering memory first: both work.
	for _, r := range []Resources{
		{CPU: 2, MemoryBytes: 256 << 20, Pids: 100},
		{CPU: 0.01, MemoryBytes: 32 << 20, Pids: 5},
	} {
		t.Run(fmt.Sprintf("set %+v", r), func(t *testing.T) {
			if err := cg.Set(r); err != nil {
				t.Fatal(err)
			}
			tests[1].want = fmt.Sprint(max(1000, int(r.CPU*100000)))
			tests[2].want, tests[3].want = fmt.Sprint(r.MemoryBytes), fmt.Sprint(r.MemoryBytes)
			tests[4].want = fmt.Sprint(r.Pids)
			check(t)
		})
	}
	t.Run("unlimited", func(t *testing.T) {
		if err := cg.Set(Resources{}); err != nil {
			t.Fatal(err)
		}
		if got := readTrim(t, p["cpu"]+"/cpu.cfs_quota_us"); got != "-1" {
			t.Errorf("cfs_quota_us = %s, want -1", got)
		}
		if got := readTrim(t, p["pids"]+"/pids.max"); got != "max" {
			t.Errorf("pids.max = %s, want max", got)
		}
	})
	t.Run("keep cpu", func(t *testing.T) {
		if err := cg.Set(Resources{CPU: 0.25}); err != nil {
			t.Fatal(err)
		}
		if err := cg.Set(Resources{CPU: 3, KeepCPU: true, Pids: 7}); err != nil {
			t.Fatal(err)
		}
		if got := readTrim(t, p["cpu"]+"/cpu.cfs_quota_us"); got != "25000" {
			t.Errorf("cfs_quota_us = %s, want 25000 (kept)", got)
		}
		if got := readTrim(t, p["pids"]+"/pids.max"); got != "7" {
			t.Errorf("pids.max = %s, want 7", got)
		}
	})
	if err := cg.Set(Resources{CPU: -1}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Set(CPU: -1) = %v, want invalid argument", err)
	}
}

func TestV1Lifecycle(t *testing.T) {
	m := testV1(t)
	cg, err := m.Create("life", Resources{CPU: 1, MemoryBytes: 128 << 20, Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create("life", Resources{}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second Create = %v, want already exists", err)
	}
	if _, err := m.Create("../escape", Resources{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Create(../escape) = %v, want invalid argument", err)
	}
	if _, err := cg.FD(); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("FD on v1 = %v, want failed precondition", err)
	}

	// A shell that, once in the cgroup, forks a sleep and spins.
	cmd := exec.Command("/bin/sh", "-c", "read x; sleep 1000 & while :; do :; done")
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	defer func() { cmd.Process.Kill(); <-waited }()
	go func() { waited <- cmd.Wait() }()
	if err := cg.AddProc(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	for c, d := range cg.Paths() {
		if got := readTrim(t, d+"/cgroup.procs"); !strings.Contains(got, fmt.Sprint(cmd.Process.Pid)) {
			t.Errorf("%s cgroup.procs = %q, want pid %d", c, got, cmd.Process.Pid)
		}
	}
	stdin.Write([]byte("go\n"))
	// Wait for the forked sleep, and for some CPU time.
	var procs []int
	deadline := time.Now().Add(30 * time.Second)
	for len(procs) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		if procs, err = cg.Procs(); err != nil {
			t.Fatal(err)
		}
	}
	if len(procs) < 2 {
		t.Fatalf("Procs = %v, want the shell and its sleep", procs)
	}
	time.Sleep(50 * time.Millisecond)
	st, err := cg.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Pids < 2 || st.MemoryBytes <= 0 || st.CPUNanos == 0 || st.OOMKills != 0 {
		t.Errorf("Stats = %+v, want pids >= 2, memory and cpu used, no OOM kill", st)
	}

	if err := cg.Freeze(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range procs {
		if s := procState(t, pid); s != "D" && s != "S" {
			// Frozen tasks sleep in the freezer (D on old kernels, S since 6.1).
			t.Errorf("pid %d State %s while frozen, want asleep", pid, s)
		}
	}
	if frozen, err := cg.Frozen(); err != nil || !frozen {
		t.Errorf("Frozen = %v, %v after Freeze", frozen, err)
	}
	cpu1, _ := cg.Stats()
	time.Sleep(100 * time.Millisecond)
	cpu2, _ := cg.Stats()
	if cpu2.CPUNanos-cpu1.CPUNanos > uint64(5*time.Millisecond) {
		t.Errorf("frozen cgroup used %v of CPU in 100ms", time.Duration(cpu2.CPUNanos-cpu1.CPUNanos))
	}
	if err := cg.Thaw(); err != nil {
		t.Fatal(err)
	}
	if frozen, err := cg.Frozen(); err != nil || frozen {
		t.Errorf("Frozen = %v, %v after Thaw", frozen, err)
	}
	// ThawTree thaws what Freeze froze as well.
	if err := cg.Freeze(); err != nil {
		t.Fatal(err)
	}
	if err := cg.ThawTree(); err != nil {
		t.Fatal(err)
	}
	if frozen, err := cg.Frozen(); err != nil || frozen {
		t.Errorf("Frozen = %v, %v after ThawTree", frozen, err)
	}
	time.Sleep(50 * time.Millisecond)
	if s := procState(t, cmd.Process.Pid); s != "R" {
		t.Errorf("shell State %s after thaw, want R (spinning)", s)
	}

	// Re-adoption and listing.
	if names, err := m.List(); err != nil || len(names) != 1 || names[0] != "life" {
		t.Errorf("List = %v, %v, want [life]", names, err)
	}
	again, err := m.Open("life")
	if err != nil {
		t.Fatal(err)
	}

	// A child cgroup made by the sandbox, with a process in it.
	child := filepath.Join(cg.Paths()["freezer"], "inner")
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(child+"/cgroup.procs", []byte(fmt.Sprint(procs[len(procs)-1])), 0); err != nil {
		t.Fatal(err)
	}

	if err := again.Delegate(100000, 100000); err != nil {
		t.Fatal(err)
	}
	fz := cg.Paths()["freezer"]
	for _, f := range []string{fz, fz + "/cgroup.procs", fz + "/tasks", fz + "/freezer.state", cg.Paths()["pids"] + "/cgroup.procs"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != 100000 {
			t.Errorf("%s owned by %d after Delegate, want 100000", f, uid)
		}
	}

	if err := again.Destroy(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waited:
		waited <- nil
	case <-time.After(30 * time.Second):
		t.Fatal("shell still running after Destroy")
	}
	for c, d := range cg.Paths() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s dir %s still there after Destroy: %v", c, d, err)
		}
	}
	for _, pid := range procs {
		if err := unix.Kill(pid, 0); err == nil && procState(t, pid) != "Z" {
			t.Errorf("pid %d alive after Destroy", pid)
		}
	}
	if err := cg.Destroy(); err != nil {
		t.Errorf("second Destroy = %v, want nil", err)
	}
	if _, err := m.Open("life"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Open after Destroy = %v, want not found", err)
	}
}

func TestV1OOMStaysInside(t *testing.T) {
	m := testV1(t)
	cg, err := m.Create("oom", Resources{MemoryBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Destroy()
	// A child that waits for a byte, then allocates and touches 64 MiB.
	cmd := exec.Command("/bin/sh", "-c", "read x; exec /usr/bin/python3 -c 'b = bytearray(64 << 20); print(len(b))' 2>/dev/null || head -c 67108864 /dev/zero | tail -c 1 >/dev/null")
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := cg.AddProc(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	stdin.Close()
	err = cmd.Wait()
	st, serr := cg.Stats()
	if serr != nil {
		t.Fatal(serr)
	}
	if st.OOMKills == 0 {
		t.Errorf("no OOM kill recorded (wait: %v); want the 64 MiB allocation killed at 16 MiB", err)
	}
}

// TestV1OOMInChildCounted: a kill in a child cgroup (a sandbox's
// workload) counts in its parent's Stats, as v2's memory.events does.
func TestV1OOMInChildCounted(t *testing.T) {
	m := testV1(t)
	cg, err := m.Create("oomkid", Resources{})
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Destroy()
	work, err := cg.Child("workload", Resources{MemoryBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer work.Destroy()
	cmd := exec.Command("/bin/sh", "-c", "read x; x=$(head -c 67108864 /dev/zero | tr '\\0' a); echo ${#x}")
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := work.AddProc(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	stdin.Close()
	werr := cmd.Wait()
	st, err := cg.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.OOMKills == 0 {
		t.Errorf("parent Stats = %+v (wait: %v); want the child's OOM kill counted", st, werr)
	}
}

func BenchmarkV1Create(b *testing.B) {
	m := testV1(b)
	r := Resources{CPU: 1, MemoryBytes: 256 << 20, Pids: 128}
	var names []Cgroup
	for i := 0; b.Loop(); i++ {
		cg, err := m.Create(fmt.Sprintf("bench-%d", i), r)
		if err != nil {
			b.Fatal(err)
		}
		names = append(names, cg)
	}
	b.StopTimer()
	for _, cg := range names {
		cg.Destroy()
	}
}

// Rename moves a cgroup, its child, its process and its limits to a new
// name in every hierarchy, and refuses to replace an existing one.
func TestV1Rename(t *testing.T) {
	m := testV1(t)
	cg, err := m.Create("before", Resources{Pids: 50})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cg.Child("workload", Resources{Pids: 20}); err != nil {
		t.Fatal(err)
	}
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleep.Process.Kill()
	if err := cg.AddProc(sleep.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create("taken", Resources{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Rename("before", "taken"); err == nil {
		t.Error("Rename onto an existing cgroup succeeded")
	}
	got, err := m.Rename("before", "after")
	if err != nil {
		t.Fatal(err)
	}
	for ctrl, dir := range got.Paths() {
		if !strings.HasSuffix(dir, "/after") {
			t.Errorf("%s: renamed path %s", ctrl, dir)
		}
		if _, err := os.Stat(strings.TrimSuffix(dir, "after") + "before"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the old name is still there (%v)", ctrl, err)
		}
	}
	if v := readTrim(t, got.Paths()["pids"]+"/pids.max"); v != "50" {
		t.Errorf("pids.max after rename = %s, want 50", v)
	}
	if v := readTrim(t, got.Sub("workload").Paths()["pids"]+"/pids.max"); v != "20" {
		t.Errorf("workload pids.max after rename = %s, want 20", v)
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", sleep.Process.Pid))
	if !strings.Contains(string(b), "/after") {
		t.Errorf("the process's cgroups after rename:\n%s", b)
	}
	if err := got.Destroy(); err != nil {
		t.Fatal(err)
	}
}

// TestProcsOfRemovedCgroup: a cgroup removed while its cgroup.procs is
// being read answers ENODEV, not ENOENT; listing a tree that loses a
// child meanwhile (a pre-spawned init's cgroup going away during a
// cleanup) treats it as gone, not as an error.
func TestProcsOfRemovedCgroup(t *testing.T) {
	m := testV1(t)
	cg, err := m.Create("gone", Resources{})
	if err != nil {
		t.Fatal(err)
	}
	dir := cg.Paths()["pids"]
	f, err := os.Open(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := cg.Destroy(); err != nil {
		t.Fatal(err)
	}
	_, err = f.Read(make([]byte, 64))
	if !errors.Is(err, unix.ENODEV) {
		t.Fatalf("reading the cgroup.procs of a removed cgroup: %v, want ENODEV", err)
	}
	if !gone(err) {
		t.Fatalf("gone(%v) = false", err)
	}
}

// TestV1Cpuset: a sandbox's cpuset cgroup, made by mkdir alone, allows
// every CPU and memory node of the host's (no pinning) and takes
// processes, its children too; a nested parent is readied the same way.
func TestV1Cpuset(t *testing.T) {
	m := testV1(t)
	cpuset := m.(*v1Manager).ctrls["cpuset"]
	if cpuset == "" {
		t.Skip("cpuset is not mounted on this host")
	}
	root := filepath.Dir(cpuset)
	cg, err := m.Create("sb", Resources{CPU: 1})
	if err != nil {
		t.Fatal(err)
	}
	child, err := cg.Child("workload", Resources{})
	if err != nil {
		t.Fatal(err)
	}
	nested, err := New(m.(*v1Manager).parent + "/sb")
	if err != nil {
		t.Fatalf("New under a sandbox: %v", err)
	}
	if _, err := nested.Open("workload"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Cgroup{cg, child} {
		dir := c.Paths()["cpuset"]
		if dir == "" {
			t.Fatalf("%s has no cpuset path: %v", c.Name(), c.Paths())
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if got, want := readTrim(t, filepath.Join(dir, f)), readTrim(t, filepath.Join(root, f)); got != want {
				t.Errorf("%s/%s = %q, want the host's %q", dir, f, got, want)
			}
		}
		cmd := exec.Command("sleep", "30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		err := c.AddProc(cmd.Process.Pid)
		cmd.Process.Kill()
		cmd.Wait()
		if err != nil {
			t.Errorf("AddProc to %s: %v", dir, err)
		}
	}
	if err := cg.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg.Paths()["cpuset"]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cpuset cgroup left after Destroy: %v", err)
	}
}

// BenchmarkV1Cpuset measures what the sandbox's cpuset cgroup adds to
// create and destroy: a create renames a waiting init's cgroups (one
// rename per hierarchy) and sets the limits; without a waiting init it
// makes them; destroy removes them.
func BenchmarkV1Cpuset(b *testing.B) {
	full := testV1(b).(*v1Manager)
	if full.ctrls["cpuset"] == "" {
		b.Skip("cpuset is not mounted on this host")
	}
	without := &v1Manager{parent: full.parent, ctrls: map[string]string{}}
	for c, d := range full.ctrls {
		if c != "cpuset" {
			without.ctrls[c] = d
		}
	}
	for _, d := range full.dirs {
		if d != full.ctrls["cpuset"] {
			without.dirs = append(without.dirs, d)
		}
	}
	r := Resources{CPU: 1, MemoryBytes: 256 << 20, Pids: 100}
	for _, m := range []*v1Manager{without, full} {
		name := "without"
		if m == full {
			name = "with"
		}
		b.Run("rename+set/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				cg, err := m.Create("w", Resources{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := cg.Child("workload", Resources{}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				cg, err = m.Rename("w", "sb")
				if err != nil {
					b.Fatal(err)
				}
				if err := cg.Set(r); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				cg.Destroy()
				b.StartTimer()
			}
		})
		b.Run("create+child/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				cg, err := m.Create("sb", r)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := cg.Child("workload", Resources{}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				cg.Destroy()
				b.StartTimer()
			}
		})
		b.Run("destroy/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				cg, err := m.Create("sb", r)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := cg.Child("workload", Resources{}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := cg.Destroy(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
