package gvisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// As agentboxd does: no test's goroutine runs on the main thread, which
// startWithMeminfo refuses.
func init() { runtime.LockOSThread() }

// A command started with the sandbox's meminfo reads it as
// /proc/meminfo, as `runsc run` does; the daemon's own stays the host's.
func TestStartWithMeminfo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (a mount namespace and a bind mount)")
	}
	path, err := writeMeminfo(t.TempDir(), 352<<20)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd := exec.Command("head", "-1", "/proc/meminfo")
	cmd.Stdout = &out
	if err := startWithMeminfo(cmd, path); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(strings.Fields(out.String()), " "); got != "MemTotal: 360448 kB" {
		t.Errorf("the command read %q, want MemTotal: 360448 kB", got)
	}
	own, _ := os.ReadFile("/proc/meminfo")
	if strings.HasPrefix(strings.Join(strings.Fields(string(own)), " "), "MemTotal: 360448 kB") {
		t.Error("the daemon's own /proc/meminfo changed")
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), filepath.Base(path)) {
		t.Error("the bind mount shows in the daemon's mount namespace")
	}
}

// What the mount namespace adds to starting a command (compare
// BenchmarkStartPlain).
func BenchmarkStartWithMeminfo(b *testing.B) {
	path, err := writeMeminfo(b.TempDir(), 352<<20)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		cmd := exec.Command("/bin/true")
		if err := startWithMeminfo(cmd, path); err != nil {
			b.Fatal(err)
		}
		_ = cmd.Wait()
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
