package guest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
	// The deadline leaves the escapee time to start and write its pid on
	// a loaded host (CI runs packages side by side): 500 ms was seen too
	// short there.
	res := g.mustExec(t, api.ExecRequest{Shell: script, TimeoutMs: 2000})
	elapsed := time.Since(start)
	if !res.TimedOut || res.Signal != "SIGKILL" {
		t.Errorf("got timed_out=%v signal=%q (stderr %q), want a SIGKILL timeout", res.TimedOut, res.Signal, res.Stderr)
	}
	// An escapee left alive holds the exec for 300 s; the margin is for a
	// loaded host.
	if elapsed > 30*time.Second {
		t.Errorf("exec took %v with a 2 s timeout", elapsed)
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
	checkOnlyReady(t, g, paths)
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
	checkOnlyReady(t, g, paths)
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

// TestCgroupMadeAhead: an exec runs in a child made ahead of it, nothing
// is made before the first exec (a standby agent must own no child until
// it serves), and the child of an ended exec is removed.
func TestCgroupMadeAhead(t *testing.T) {
	for _, k := range cgroupKinds {
		t.Run(k.name, func(t *testing.T) {
			dirs, paths := k.make(t)
			g := newTestGuest(t, Config{Cgroups: dirs})
			for _, p := range paths {
				if entries, _ := os.ReadDir(p); slices.ContainsFunc(entries, os.DirEntry.IsDir) {
					t.Errorf("%s has children before any exec", p)
				}
			}
			g.mustExec(t, api.ExecRequest{Cmd: []string{"true"}})
			g.srv.cgroups.settle()
			g.srv.cgroups.mu.Lock()
			ahead := map[string]bool{}
			for _, c := range g.srv.cgroups.ready {
				ahead[c.name] = true
			}
			g.srv.cgroups.mu.Unlock()
			if len(ahead) != readyMax {
				t.Fatalf("%d children made ahead after an exec, want %d", len(ahead), readyMax)
			}
			name := execCgroupName(t, g)
			if !ahead[name] {
				t.Errorf("exec ran in %q, not in one made ahead (%v)", name, ahead)
			}
			checkOnlyReady(t, g, paths)
			if _, err := os.Stat(filepath.Join(paths[0], name)); !os.IsNotExist(err) {
				t.Errorf("%s of the ended exec still there: %v", name, err)
			}
		})
	}
}

// TestCgroupNextAgentNames is the container tier's reset in place: a
// standby agent starts in the same cgroups as the agent it replaces, and
// the driver removes the old agent's children by name, from a list it
// read before the kill, once the old init is gone (drivers/container
// Promote). The next agent's first exec can come before that removal, so
// it must never make a child under a name the old agent made: here the
// old one's first child is already gone (its tidy removed it), which is
// where a counter from 1 in both agents made the same name, and the
// driver's late rmdir took the new agent's child from under its exec
// ("creating cgroup for exec: mkdir exec-1: no such file or directory").
func TestCgroupNextAgentNames(t *testing.T) {
	for _, k := range cgroupKinds {
		t.Run(k.name, func(t *testing.T) {
			dirs, _ := k.make(t)
			oldNames := map[string]bool{}
			old := newTestGuest(t, Config{Cgroups: dirs})
			oldNames[execCgroupName(t, old)] = true
			old.srv.cgroups.settle()
			old.srv.cgroups.mu.Lock()
			for _, c := range old.srv.cgroups.ready {
				oldNames[c.name] = true
			}
			old.srv.cgroups.mu.Unlock()
			next := newTestGuest(t, Config{Cgroups: dirs})
			for range 3 {
				if name := execCgroupName(t, next); oldNames[name] {
					t.Fatalf("the next agent's exec ran in %s, a name the old agent made (%v)", name, oldNames)
				}
				next.srv.cgroups.settle()
			}
		})
	}
}

// execCgroupName runs an exec in g and returns the name of the child
// cgroup it ran in.
func execCgroupName(t *testing.T, g *testGuest) string {
	t.Helper()
	res := g.mustExec(t, api.ExecRequest{Cmd: []string{"cat", "/proc/self/cgroup"}})
	for l := range strings.Lines(res.Stdout) {
		if _, after, ok := strings.Cut(strings.TrimSpace(l), "/exec-"); ok {
			return "exec-" + after
		}
	}
	t.Fatalf("the exec ran in no exec cgroup:\n%s", res.Stdout)
	return ""
}

// TestCgroupAgentAboveWorkload is the container tier's layout: the agent
// lives in its own cgroup with the workload's below it, execs get a child
// of the workload's in pids and freezer and go into the workload's own in
// memory (NoChild), and the starting thread returns to the agent's cgroup
// in every hierarchy once the exec has started.
func TestCgroupAgentAboveWorkload(t *testing.T) {
	requireRoot(t)
	name := fmt.Sprintf("agentbox-test-%08x", rand.Uint32())
	var dirs []CgroupDir
	works := map[string]string{}
	for _, ctl := range []string{"pids", "freezer", "memory"} {
		home := filepath.Join("/sys/fs/cgroup", ctl, name)
		if _, err := os.Stat(filepath.Dir(home)); err != nil {
			t.Skipf("needs the cgroup v1 %s hierarchy: %v", ctl, err)
		}
		work := filepath.Join(home, "workload")
		if err := os.MkdirAll(work, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := os.Remove(work); err != nil {
				t.Errorf("removing %s: %v", work, err)
			}
			os.Remove(home)
		})
		homeFD, err := unix.Open(home, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		workFD, err := unix.Open(work, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(homeFD); unix.Close(workFD) })
		dirs = append(dirs, CgroupDir{FD: workFD, HomeFD: homeFD, Freezer: ctl == "freezer", NoChild: ctl == "memory"})
		works[ctl] = strings.TrimPrefix(work, filepath.Join("/sys/fs/cgroup", ctl))
		moveSelf(t, ctl, home)
	}
	g := newTestGuest(t, Config{Cgroups: dirs})
	for range 3 { // the first exec makes its child; the others take one made ahead
		res := g.mustExec(t, api.ExecRequest{Cmd: []string{"cat", "/proc/self/cgroup"}})
		for ctl, work := range works {
			want := work + "/exec-"
			if ctl == "memory" {
				want = work + "\n"
			}
			if !strings.Contains(res.Stdout, ":"+ctl+":"+want) {
				t.Errorf("%s: exec not in %s*:\n%s", ctl, want, res.Stdout)
			}
		}
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, task := range tasks {
			b, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/cgroup")
			if strings.Contains(string(b), "/workload") {
				t.Errorf("agent thread %s still in the workload's cgroups:\n%s", task.Name(), b)
			}
		}
	}
	g.srv.Shutdown(t.Context())
	for ctl := range works {
		entries, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", ctl, works[ctl]))
		for _, e := range entries {
			if e.IsDir() {
				t.Errorf("%s: exec cgroup %s left after shutdown", ctl, e.Name())
			}
		}
	}
}

// TestCgroupConcurrentExecs: execs at once, more than are made ahead,
// each get a child no other exec had, and none is left behind.
func TestCgroupConcurrentExecs(t *testing.T) {
	dirs, paths := testCgroupsV1(t)
	g := newTestGuest(t, Config{Cgroups: dirs})
	const workers, each = 6, 8
	names := make(chan string, workers*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				// Not mustExec: FailNow belongs to the test's goroutine.
				body, _ := json.Marshal(api.ExecRequest{Cmd: []string{"cat", "/proc/self/cgroup"}})
				resp, err := g.client.Post("http://guest/exec", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Errorf("POST /exec: %v", err)
					return
				}
				var res api.ExecResult
				err = json.NewDecoder(resp.Body).Decode(&res)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Errorf("exec: status %d, %v", resp.StatusCode, err)
					return
				}
				for l := range strings.Lines(res.Stdout) {
					if _, after, ok := strings.Cut(strings.TrimSpace(l), ":pids:"); ok {
						names <- after
					}
				}
			}
		})
	}
	wg.Wait()
	close(names)
	seen := map[string]bool{}
	for n := range names {
		if !strings.Contains(n, "/exec-") || seen[n] {
			t.Errorf("exec ran in %q: not a child of its own", n)
		}
		seen[n] = true
	}
	if len(seen) != workers*each {
		t.Errorf("%d distinct children for %d execs", len(seen), workers*each)
	}
	checkOnlyReady(t, g, paths)
}
