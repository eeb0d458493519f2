package integration

import (
	"bufio"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A test run that was killed (a `go test` timeout, an interrupt) leaves
// its daemon's state on the host: sandboxes still running, their mounts,
// the nftables table, cgroups, the run and data directories. The next run
// sweeps what such dead runs left before it starts its own daemon, so
// that a leftover can never meet a new run (two tables for one network
// pool, a pids or memory budget eaten by orphans).
//
// A run is dead when its socket does not answer and its run directory is
// older than sweepMinAge: a run that is starting has made its directory
// but not yet listened for at most a few seconds.
const sweepMinAge = 2 * time.Minute

// runDirFile, in a run's temp directory, names its run directory, which
// is how a sweep tells whose data directory it is.
const runDirFile = "run-dir"

// sweepDeadRuns removes what dead test runs left under runRoot (their run
// directories, agentbox-it-*) and tmpRoot (their temp directories) and
// returns what it swept.
func sweepDeadRuns(runRoot, tmpRoot string) []string {
	var swept []string
	runs, _ := filepath.Glob(filepath.Join(runRoot, "agentbox-it-*"))
	for _, run := range runs {
		if !deadRun(run) {
			continue
		}
		sweepRun(run, filepath.Base(run))
		swept = append(swept, run)
	}
	tmps, _ := filepath.Glob(filepath.Join(tmpRoot, "agentbox-it-*"))
	for _, tmp := range tmps {
		b, err := os.ReadFile(filepath.Join(tmp, runDirFile))
		if err != nil {
			continue // not ours to judge: made before run-dir files, or starting
		}
		run := strings.TrimSpace(string(b))
		if _, err := os.Stat(run); err == nil && !deadRun(run) {
			continue
		}
		if fi, err := os.Stat(tmp); err != nil || time.Since(fi.ModTime()) < sweepMinAge {
			continue
		}
		unmountUnder(tmp)
		_ = os.RemoveAll(tmp)
		swept = append(swept, tmp)
	}
	return swept
}

// deadRun says whether the run with run directory run is gone: nothing
// answers on its socket and the directory is old enough.
func deadRun(run string) bool {
	fi, err := os.Stat(run)
	if err != nil || time.Since(fi.ModTime()) < sweepMinAge {
		return false
	}
	c, err := net.DialTimeout("unix", filepath.Join(run, "agentbox.sock"), time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}

// sweepRun removes what the dead run at run left: its name is also its
// cgroup parent and its nftables table (integration/main_test.go).
func sweepRun(run, name string) {
	// The processes: those in its cgroups (container sandboxes, the
	// guest agents) and those that name its directory (runsc).
	pids := map[int]bool{}
	cgroups, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", name))
	for _, cg := range cgroups {
		_ = filepath.WalkDir(cg, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Name() == "cgroup.procs" {
				b, _ := os.ReadFile(p)
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil {
						pids[pid] = true
					}
				}
			}
			return nil
		})
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), run+"/") {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != os.Getpid() {
				pids[pid] = true
			}
		}
	}
	for pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	unmountUnder(run)
	_ = exec.Command("nft", "delete", "table", "inet", name).Run()
	// Cgroups go once their processes are reaped: deepest first.
	for _, cg := range cgroups {
		var dirs []string
		_ = filepath.WalkDir(cg, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			for try := 0; try < 50 && os.Remove(dirs[i]) != nil; try++ {
				time.Sleep(20 * time.Millisecond) // a killed process not yet reaped
			}
		}
	}
	_ = os.RemoveAll(run)
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			mounts = append(mounts, fields[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
	for _, m := range mounts {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
}

// TestSweepDeadRuns makes the leftovers of a killed run (an old run
// directory with a dead socket and a tmpfs mounted below it, a process in
// its cgroup, its nftables table, its temp directory) and one of a live
// run, and sweeps: the dead run's are gone, the live run's are not.
func TestSweepDeadRuns(t *testing.T) {
	runRoot, tmpRoot := t.TempDir(), t.TempDir()
	name := "agentbox-it-sweep" + randHex(3)
	dead := filepath.Join(runRoot, name)
	deadTmp := filepath.Join(tmpRoot, "agentbox-it-1")
	live := filepath.Join(runRoot, "agentbox-it-live"+randHex(3))
	liveTmp := filepath.Join(tmpRoot, "agentbox-it-2")
	for _, d := range []string{dead, deadTmp, live, liveTmp, filepath.Join(dead, "sandboxes", "x", "rootfs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mount("tmpfs", filepath.Join(dead, "sandboxes", "x", "rootfs"), "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	// A socket file nobody listens on, as a killed daemon leaves it.
	l, err := net.Listen("unix", filepath.Join(dead, "agentbox.sock"))
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	ll, err := net.Listen("unix", filepath.Join(live, "agentbox.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ll.Close()
	for tmp, run := range map[string]string{deadTmp: dead, liveTmp: live} {
		if err := os.WriteFile(filepath.Join(tmp, runDirFile), []byte(run+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cg := filepath.Join("/sys/fs/cgroup/pids", name, "sb")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	orphan := exec.Command("sleep", "600")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan error, 1)
	go func() { reaped <- orphan.Wait() }()
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(orphan.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("nft", "add", "table", "inet", name).CombinedOutput(); err != nil {
		t.Fatalf("nft add table: %v: %s", err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command("nft", "delete", "table", "inet", name).Run()
		unmountUnder(dead)
		_ = os.Remove(cg)
		_ = os.Remove(filepath.Dir(cg))
		_ = orphan.Process.Kill()
	})

	// Young directories are left alone: a run may be starting.
	if swept := sweepDeadRuns(runRoot, tmpRoot); len(swept) != 0 {
		t.Fatalf("swept %v, all younger than %v", swept, sweepMinAge)
	}
	old := time.Now().Add(-time.Hour)
	for _, d := range []string{dead, deadTmp, live, liveTmp} {
		if err := os.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
	}
	swept := sweepDeadRuns(runRoot, tmpRoot)
	sort.Strings(swept)
	if want := []string{dead, deadTmp}; strings.Join(swept, " ") != strings.Join(want, " ") {
		t.Fatalf("swept %v, want %v", swept, want)
	}
	select {
	case <-reaped:
	case <-time.After(10 * time.Second):
		t.Error("the process in the dead run's cgroup still runs")
	}
	for _, gone := range []string{dead, deadTmp, filepath.Dir(cg)} {
		if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there (%v)", gone, err)
		}
	}
	if exec.Command("nft", "list", "table", "inet", name).Run() == nil {
		t.Errorf("the dead run's nftables table %s is still there", name)
	}
	for _, kept := range []string{live, liveTmp} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("the live run's %s was swept: %v", kept, err)
		}
	}
}
