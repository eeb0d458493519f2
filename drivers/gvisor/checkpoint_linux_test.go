package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/driver/drivertest"
	"github.com/agentbox/agentbox/errdefs"
)

// TestCheckpointRestore drives runsc checkpoint/restore through the
// driver on the busybox root: a shell loop counting in memory is saved
// with the sandbox stopped and restored on the same layer (it goes on
// counting); then, with the restored sandbox left running, its layer is
// copied while it is frozen and a child is restored from that checkpoint
// as another sandbox (its own hostname and env, the loop going on from
// the parent's count), and the restored child is checkpointed again (the
// hook is set once per kernel).
func TestCheckpointRestore(t *testing.T) {
	if _, err := os.Stat(runscPath()); err != nil {
		t.Fatal("no runsc: run scripts/install-runsc.sh (make test does)")
	}
	const uidBase = 1000000
	d, err := New(driver.Options{GuestBinary: drivertest.BuildGuest(t), CgroupParent: drivertest.CgroupParent(t), UIDBase: uidBase})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d.viewsDir) })
	layers := []string{drivertest.BusyboxRootfs(t, uidBase)}
	tmp, err := os.MkdirTemp("/var/tmp", "gvisor-ckpt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	_ = os.Chmod(tmp, 0o711)
	spec := func(name string) *driver.Spec {
		id := fmt.Sprintf("ck%d%s", time.Now().UnixNano()%1000000, name)
		s := &driver.Spec{ID: id, Hostname: "sbx-" + id, Layers: layers,
			UpperDir: filepath.Join(tmp, name, "upper"), WorkDir: filepath.Join(tmp, name, "work"),
			RunDir: filepath.Join(tmp, name, "sandboxes", id),
			Env:    []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "WHO=" + name},
			User:   "root", Workdir: "/", CPU: 1, MemoryMB: 256, Pids: 128}
		for _, dir := range []string{s.UpperDir, s.WorkDir} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			_ = os.Chown(dir, uidBase, uidBase)
		}
		if err := os.MkdirAll(s.RunDir, 0o711); err != nil {
			t.Fatal(err)
		}
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sh := func(h *driver.Handle, script string) string {
		t.Helper()
		res, err := drivertest.Exec(ctx, d, h, script)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%q: %+v, %v", script, res, err)
		}
		return strings.TrimSpace(res.Stdout)
	}
	count := func(h *driver.Handle) int {
		t.Helper()
		n, err := strconv.Atoi(sh(h, "cat /tmp/count"))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// advances waits until h's loop counts past n: on a loaded host the
	// loop may not get to run within any fixed time, so the verdict is
	// only that it runs at all (a minute's bound).
	advances := func(h *driver.Handle, n int) (last int, ok bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; {
			if last = count(h); last > n {
				return last, true
			}
			if time.Now().After(deadline) {
				return last, false
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	ps := spec("p")
	h, err := d.Create(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Destroy(context.Background(), h) })
	// The count is written to a new file and renamed over the old one: a
	// plain `echo $n > /tmp/count` truncates first, and a cat in between
	// reads nothing.
	sh(h, `(n=0; while :; do n=$((n+1)); echo $n > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.05; done) >/dev/null 2>&1 &
while [ ! -s /tmp/count ]; do sleep 0.05; done`)
	n0 := count(h)

	// Stopped checkpoint, restore on the same layer.
	img := filepath.Join(tmp, "img1")
	_ = os.Mkdir(img, 0o700)
	t0 := time.Now()
	if err := d.Checkpoint(ctx, h, img, driver.CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	ckpt := time.Since(t0)
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	if h, err = d.Restore(ctx, ps, img); err != nil {
		t.Fatal(err)
	}
	restore := time.Since(t0)
	if n1 := count(h); n1 < n0 {
		t.Errorf("after the restore the count is %d, before it %d", n1, n0)
	}
	n1 := count(h)
	if n2, ok := advances(h, n1); !ok {
		t.Errorf("the loop does not run after the restore: %d then %d a minute later", n1, n2)
	}

	// Left running, layer copied while frozen, a child restored as
	// another sandbox.
	cs := spec("c")
	img2 := filepath.Join(tmp, "img2")
	_ = os.Mkdir(img2, 0o700)
	t0 = time.Now()
	err = d.Checkpoint(ctx, h, img2, driver.CheckpointOptions{LeaveRunning: true, Frozen: func() error {
		_ = os.RemoveAll(cs.UpperDir)
		if out, err := exec.Command("cp", "-a", ps.UpperDir, cs.UpperDir).CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ckpt2 := time.Since(t0)
	t0 = time.Now()
	hc, err := d.Restore(ctx, cs, img2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Destroy(context.Background(), hc) })
	restore2 := time.Since(t0)
	if out := sh(hc, "hostname; echo $WHO"); out != cs.Hostname+"\nc" {
		t.Errorf("the child says %q, want its own hostname and env", out)
	}
	if out := sh(h, "hostname; echo $WHO"); out != ps.Hostname+"\np" {
		t.Errorf("the parent says %q after the fork", out)
	}
	c1 := count(hc)
	if c1 < n1 {
		t.Errorf("the child's count is %d, the parent's was %d before the fork", c1, n1)
	}
	if c2, ok := advances(hc, c1); !ok {
		t.Errorf("the child's loop does not run: %d then %d a minute later", c1, c2)
	}
	img3 := filepath.Join(tmp, "img3")
	_ = os.Mkdir(img3, 0o700)
	if err := d.Checkpoint(ctx, hc, img3, driver.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatalf("a second checkpoint of a restored sandbox: %v", err)
	}
	count(hc)
	t.Logf("checkpoint (stop) %v, restore %v; checkpoint (frozen copy, left running) %v, restore as another sandbox %v",
		ckpt.Round(time.Millisecond), restore.Round(time.Millisecond), ckpt2.Round(time.Millisecond), restore2.Round(time.Millisecond))
}

// TestCheckpointShm: a checkpoint records its sandbox's /dev/shm size
// from the bundle, and a restore reads it back whatever the memory; a
// checkpoint without the record restores with the size the memory gives.
func TestCheckpointShm(t *testing.T) {
	run := t.TempDir()
	root, dir := filepath.Join(run, "runsc"), t.TempDir()
	if err := os.MkdirAll(filepath.Join(run, "bundle"), 0o700); err != nil {
		t.Fatal(err)
	}
	spec := &driver.Spec{ID: "sb", MemoryMB: 1024}
	if err := writeBundle(filepath.Join(run, "bundle"), "/rootfs", "/guest", "/sock", spec, 1000000, 65536, nil, shmSizeMB(spec.MemoryMB)); err != nil {
		t.Fatal(err)
	}
	if got, err := checkpointShmMB(dir, 256); err != nil || got != 256 {
		t.Fatalf("without a record: %d, %v; want the default 256", got, err)
	}
	if err := saveShmMB(root, dir); err != nil {
		t.Fatal(err)
	}
	if got, err := checkpointShmMB(dir, 256); err != nil || got != 512 {
		t.Fatalf("recorded: %d, %v; want 512 (half of 1024)", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, shmFile), []byte("lots\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := checkpointShmMB(dir, 256); err == nil {
		t.Fatal("a damaged record was accepted")
	}
}

// TestCheckCheckpointHost: a checkpoint records its host's runsc version
// and architecture; one from another runsc version or architecture is
// refused with failed_precondition naming both, one without the record
// (an earlier agentbox's, on this node) passes, and a microvm's
// checkpoint is said to be one.
func TestCheckCheckpointHost(t *testing.T) {
	if _, err := os.Stat(runscPath()); err != nil {
		t.Fatalf("runsc is not installed at %s: run scripts/install-runsc.sh", runscPath())
	}
	d := &Driver{}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "checkpoint.img"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.CheckCheckpoint(dir); err != nil {
		t.Fatalf("without a record: %v", err)
	}
	if err := saveHost(dir); err != nil {
		t.Fatal(err)
	}
	if err := d.CheckCheckpoint(dir); err != nil {
		t.Fatalf("this host's own: %v", err)
	}
	here, _ := thisHost()
	for what, h := range map[string]savedHost{
		"runsc": {Runsc: "runsc version release-20200101.0", Arch: here.Arch},
		"arch":  {Runsc: here.Runsc, Arch: "riscv64"},
	} {
		b, _ := json.Marshal(h)
		if err := os.WriteFile(filepath.Join(dir, hostFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		err := d.CheckCheckpoint(dir)
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "release-20200101.0") && what == "runsc" || !strings.Contains(err.Error(), "riscv64") && what == "arch" {
			t.Errorf("a checkpoint of another %s: %v; want failed_precondition naming it", what, err)
		}
	}
	mv := t.TempDir()
	if err := os.WriteFile(filepath.Join(mv, "microvm.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.CheckCheckpoint(mv); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "microvm") {
		t.Errorf("a microvm checkpoint: %v", err)
	}
}
