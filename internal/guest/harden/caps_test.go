package harden

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func init() {
}

// startThreads parks n goroutines on OS threads of their own, so the
// process has threads that never ran the hardening call.
func startThreads(n int) (stop func()) {
	done := make(chan struct{})
	var ready, exited sync.WaitGroup
	for range n {
		ready.Add(1)
		exited.Add(1)
		go func() {
			defer exited.Done()
			runtime.LockOSThread()
			ready.Done()
			<-done
			// Stay locked: the thread exits with the goroutine.
		}()
	}
	ready.Wait()
	return func() { close(done); exited.Wait() }
}

// capLines returns the Cap* lines of a /proc status file.
func capLines(status string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(k, "Cap") {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// collect records one value per key, "mixed" when they differ.
type collect map[string]string

func (c collect) add(k, v string) {
	if old, ok := c[k]; ok && old != v {
		v = "mixed"
	}
	c[k] = v
}

func TestNoNewPrivs(t *testing.T) {
	out := runChild(t, "nnp")
	if got := parseResults(out)["NoNewPrivs"]; got != "1" {
		t.Errorf("exec'd child NoNewPrivs = %q, want 1", got)
	}
}

func init() {
	children["nnp"] = func() error {
		stop := startThreads(3)
		defer stop()
		if err := NoNewPrivs(); err != nil {
			return err
		}
		ch := make(chan error)
		go func() {
			runtime.LockOSThread()
			out, err := exec.Command("/bin/grep", "NoNewPrivs", "/proc/self/status").Output()
			if err == nil {
				fmt.Print(strings.ReplaceAll(strings.ReplaceAll(string(out), ":", "="), "\t", ""))
			}
			ch <- err
		}()
		if err := <-ch; err != nil {
			return err
		}
		// Every thread of the process.
		tasks, _ := filepath.Glob("/proc/self/task/*/status")
		for _, task := range tasks {
			b, _ := os.ReadFile(task)
			if strings.Contains(string(b), "NoNewPrivs:\t0") {
				return fmt.Errorf("%s has NoNewPrivs 0", task)
			}
		}
		return nil
	}
}

func init() {
	children["droponthread"] = childDropOnThread
}

// childDropOnThread starts, as a process under gVisor does, with a
// bounding set that lacks the kernel's last capabilities (the OCI spec's
// list), then runs DropBoundingSetOnThread on the main thread and before
// every exec, and reports the caps of what it exec'd.
func childDropOnThread() error {
	runtime.LockOSThread()
	// Every thread, as the runtime starts it: the top capabilities are
	// missing, so "the last one is out" does not mean "done".
	for c := lastCap(); c > unix.CAP_SYS_ADMIN; c-- {
		if err := allThreads(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); err != nil {
			return err
		}
	}
	stop := startThreads(4)
	defer stop()
	if err := DropBoundingSetOnThread(); err != nil {
		return err
	}
	res := collect{}
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return err
	}
	res.add("main.CapBnd", capLines(string(b))["CapBnd"])
	// The process keeps its own privileges: chown still works.
	f := filepath.Join(os.TempDir(), fmt.Sprintf("harden-chown-%d", os.Getpid()))
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		return err
	}
	defer os.Remove(f)
	res.add("selfchown", fmt.Sprint(os.Chown(f, 1234, 1234) == nil))
	runtime.UnlockOSThread()

	const n = 8
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			err := DropBoundingSetOnThread()
			var out []byte
			if err == nil {
				out, err = exec.Command("/bin/cat", "/proc/self/status").Output()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = err
				return
			}
			for k, v := range capLines(string(out)) {
				res.add("exec."+k, v)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	for k, v := range res {
		fmt.Printf("%s=%s\n", k, v)
	}
	return nil
}

func TestDropBoundingSetOnThreadPartialSet(t *testing.T) {
	requiresRoot(t)
	got := parseResults(runChild(t, "droponthread"))
	const zero = "0000000000000000"
	want := map[string]string{"main.CapBnd": zero, "selfchown": "true"}
	for _, c := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		want["exec."+c] = zero
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %q, want %q", k, got[k], w)
		}
	}
}
