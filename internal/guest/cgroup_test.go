package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

// TestCgroupTimeoutKillsEscapees is item 7 of SECURITY.md's battery, on
// real v1 pids and freezer cgroups: a double fork, setsid and ignored
// SIGTERM must not outlive the deadline. The verdict comes from outside.
func TestCgroupTimeoutKillsEscapees(t *testing.T) {
	for _, k := range cgroupKinds {
		t.Run(k.name, func(t *testing.T) { testTimeoutKillsEscapees(t, k.make) })
	}
}

func testTimeoutKillsEscapees(t *testing.T, mk func(testing.TB) ([]CgroupDir, []string)) {
	dirs, paths := mk(t)
	g := newTestGuest(t, Config{Cgroups: dirs})
	dir := t.TempDir()
	script := fmt.Sprintf(`trap '' TERM
( setsid sh -c 'trap "" TERM; sleep 300 & echo $! > %[1]s/pid; wait' & )
while [ ! -s %[1]s/pid ]; do sleep 0.01; done
sleep 300`, dir)
	start := time.Now()
	res := g.mustExec(t, api.ExecRequest{Shell: script, TimeoutMs: 500})
	elapsed := time.Since(start)
	if !res.TimedOut || res.Signal != "SIGKILL" {
		t.Errorf("got timed_out=%v signal=%q (stderr %q), want a SIGKILL timeout", res.TimedOut, res.Signal, res.Stderr)
	}
	// An escapee left alive holds the exec for 300 s; the margin is for a
	// loaded host.
	if elapsed > 30*time.Second {
		t.Errorf("exec took %v with a 500 ms timeout", elapsed)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "pid"))
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("escapee pid %q: %v", b, err)
	}
	// Killed by the time the answer came: at most a zombie for a moment.
	if alive(pid) {
		t.Errorf("escapee %d still alive after the exec answered", pid)
	}
	waitGone(t, pid)
	for _, p := range paths {
		entries, _ := os.ReadDir(p)
		for _, e := range entries {
			if e.IsDir() {
				t.Errorf("exec cgroup %s left behind", filepath.Join(p, e.Name()))
			}
		}
	}
}

func TestCgroupPlacement(t *testing.T) {
	for _, k := range cgroupKinds {
		t.Run(k.name, func(t *testing.T) { testPlacement(t, k.make) })
	}
}

func testPlacement(t *testing.T, mk func(testing.TB) ([]CgroupDir, []string)) {
	dirs, paths := mk(t)
	g := newTestGuest(t, Config{Cgroups: dirs})
	// The process is in its exec cgroup from its first instruction:
	// /proc/self/cgroup of cat itself, a direct exec.
	res := g.mustExec(t, api.ExecRequest{Cmd: []string{"cat", "/proc/self/cgroup"}})
	for _, p := range paths {
		rel := strings.TrimPrefix(p, filepath.Dir(p))
		ctl := filepath.Base(filepath.Dir(p))
		if ctl == "unified" || ctl == "cgroup" {
			ctl = "" // the v2 line, "0::/path"
		}
		found := false
		for l := range strings.Lines(res.Stdout) {
			f := strings.SplitN(strings.TrimSpace(l), ":", 3)
			if len(f) == 3 && f[1] == ctl && strings.HasPrefix(f[2], rel+"/exec-") {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: child not in %s/exec-*:\n%s", ctl, rel, res.Stdout)
		}
	}
	// No thread of ours was left behind in an exec cgroup.
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/cgroup")
		if strings.Contains(string(b), "/exec-") {
			t.Errorf("agent thread %s still in a test cgroup:\n%s", task.Name(), b)
		}
	}
	// The exec's cgroup is gone once it ended.
	for _, p := range paths {
		entries, _ := os.ReadDir(p)
		for _, e := range entries {
			if e.IsDir() {
				t.Errorf("exec cgroup %s left behind", e.Name())
			}
		}
	}
}

func TestCgroupBackgroundLingersUntilShutdown(t *testing.T) {
	for _, k := range cgroupKinds {
		t.Run(k.name, func(t *testing.T) { testLingers(t, k.make) })
	}
}

func testLingers(t *testing.T, mk func(testing.TB) ([]CgroupDir, []string)) {
	dirs, paths := mk(t)
	g := newTestGuest(t, Config{Cgroups: dirs})
	res := g.mustExec(t, api.ExecRequest{Shell: "sleep 300 >/dev/null 2>&1 & echo $!"})
	pid, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if err != nil {
		t.Fatal(err)
	}
	if !alive(pid) {
		t.Fatalf("background process %d died with its exec; it should outlive it", pid)
	}
	g.srv.Shutdown(t.Context())
	waitGone(t, pid)
	for _, p := range paths {
		entries, _ := os.ReadDir(p)
		for _, e := range entries {
			if e.IsDir() {
				t.Errorf("exec cgroup %s left behind after shutdown", e.Name())
			}
		}
	}
}
