package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLxcfsReplacesDeadMount: a mount left by an lxcfs that was killed
// (with the session that started it) answers ENOTCONN to every read; the
// next daemon detaches it and serves a live one, and an lxcfs that dies
// while the daemon runs is started again. Needs root and the lxcfs
// package (scripts/install-deps.sh, which `make test` runs).
func TestLxcfsReplacesDeadMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (it mounts FUSE): run it as make test does")
	}
	dir, run := t.TempDir(), t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Cleanup(func() {
		cancel()
		killLxcfs(t, run)
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	})
	if got := ensureLxcfs(ctx, dir, run, log); got != dir {
		t.Fatalf("ensureLxcfs = %q, want %q (is the lxcfs package installed? scripts/install-deps.sh)", got, dir)
	}
	// Killed while its daemon runs: that daemon (its parent) starts a
	// new one.
	pid := killLxcfs(t, run)
	waitFor(t, "the running daemon to start a new lxcfs", func() bool { return lxcfsPid(run) != pid && lxcfsServes(dir) == nil })
	// Killed after its daemon is gone, as a session's end kills it: the
	// mount stays, dead, and the next daemon replaces it.
	cancel()
	killLxcfs(t, run)
	waitFor(t, "the mount to go dead", func() bool { return errors.Is(lxcfsServes(dir), syscall.ENOTCONN) })
	if !lxcfsMounted(dir) {
		t.Fatal("the dead mount is gone; this test needs it to stay")
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	if got := ensureLxcfs(ctx2, dir, run, log); got != dir {
		t.Fatalf("over a dead mount, ensureLxcfs = %q, want %q", got, dir)
	}
	if err := lxcfsServes(dir); err != nil {
		t.Fatalf("after ensureLxcfs over a dead mount: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "proc", "meminfo"))
	if !strings.HasPrefix(string(b), "MemTotal:") {
		t.Fatalf("meminfo from the new lxcfs: %q", b)
	}
}

// TestLxcfsBesideOneWithoutCFS: an lxcfs without --enable-cfs at
// lxcfs_dir (Debian's unit, or an older agentbox's) keeps serving the
// sandboxes that bind its files; the daemon mounts its own, with the CPU
// views, at lxcfs_dir.cfs and uses it from then on.
func TestLxcfsBesideOneWithoutCFS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (it mounts FUSE): run it as make test does")
	}
	dir, run, oldRun := t.TempDir(), t.TempDir(), t.TempDir()
	cfsDir := dir + lxcfsCFSSuffix
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	old := exec.Command("lxcfs", "--foreground", "--enable-loadavg", "--pidfile", filepath.Join(oldRun, "lxcfs.pid"), dir)
	if err := old.Start(); err != nil {
		t.Fatalf("starting lxcfs (is the lxcfs package installed? scripts/install-deps.sh): %v", err)
	}
	t.Cleanup(func() {
		cancel()
		killLxcfs(t, run)
		_ = old.Process.Kill()
		_ = old.Wait()
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		_ = unix.Unmount(cfsDir, unix.MNT_DETACH)
		_ = os.RemoveAll(cfsDir)
	})
	waitFor(t, "the old lxcfs to mount", func() bool { return lxcfsMounted(dir) && lxcfsServes(dir) == nil })
	if lxcfsHasCFS(dir) {
		t.Fatal("lxcfsHasCFS says the lxcfs started without --enable-cfs has it")
	}
	for range 2 { // the second time it finds its own
		if got := ensureLxcfs(ctx, dir, run, log); got != cfsDir {
			t.Fatalf("ensureLxcfs = %q, want %q", got, cfsDir)
		}
	}
	if !lxcfsHasCFS(cfsDir) {
		t.Error("the daemon's lxcfs runs without --enable-cfs")
	}
	if err := lxcfsServes(dir); err != nil || old.ProcessState != nil {
		t.Errorf("the old lxcfs stopped serving: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfsDir, "sys/devices/system/cpu/online")); err != nil {
		t.Errorf("the daemon's lxcfs has no CPU view: %v", err)
	}
}

func lxcfsPid(run string) int {
	b, err := os.ReadFile(filepath.Join(run, "lxcfs.pid"))
	if err != nil {
		b, _ = os.ReadFile(filepath.Join(run, "lxcfs"+lxcfsCFSSuffix+".pid"))
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// killLxcfs kills the lxcfs whose pid file is in run and waits until it
// is gone; it returns its pid (0 if none ran).
func killLxcfs(t *testing.T, run string) int {
	pid := lxcfsPid(run)
	if pid <= 0 {
		return 0
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, "lxcfs to exit", func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return err != nil || strings.Contains(string(b), ") Z ")
	})
	return pid
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
