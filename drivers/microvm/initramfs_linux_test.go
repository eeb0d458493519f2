package microvm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
)

// TestModuleOrder resolves the guest's modules against the installed
// kernel (scripts/install-deps.sh): every module comes after the ones it
// depends on, and each appears once.
func TestModuleOrder(t *testing.T) {
	dir := filepath.Join(envOr(DirEnv, defaultDir), "kernel-"+KernelRelease, "modules")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("no guest kernel modules (run scripts/install-deps.sh): %v", err)
	}
	paths, err := moduleOrder(dir, guestModules)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, modName(strings.TrimSuffix(filepath.Base(p), ".ko")))
	}
	pos := func(n string) int {
		i := slices.Index(names, n)
		if i < 0 {
			t.Fatalf("module %s missing from %v", n, names)
		}
		return i
	}
	for _, pair := range [][2]string{{"virtio", "virtio_blk"}, {"virtio_ring", "virtio_console"}, {"jbd2", "ext4"}, {"mbcache", "ext4"}} {
		if pos(pair[0]) > pos(pair[1]) {
			t.Errorf("%s loads after %s: %v", pair[0], pair[1], names)
		}
	}
	for _, m := range guestModules {
		pos(m)
	}
	for i, n := range names {
		if slices.Contains(names[i+1:], n) {
			t.Errorf("%s twice: %v", n, names)
		}
	}
}

// TestInitramfsIsNewcCpio writes an initramfs and lists it with busybox's
// cpio: the agent as /init, /dev/console and the numbered modules.
func TestInitramfsIsNewcCpio(t *testing.T) {
	tmp := t.TempDir()
	agent := filepath.Join(tmp, "agent")
	mod := filepath.Join(tmp, "x.ko")
	if err := os.WriteFile(agent, []byte("#!agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mod, []byte("odd-length"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(tmp, "initramfs.cpio")
	if err := buildInitramfs(img, agent, []string{mod}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("busybox", "cpio", "-t", "-v")
	cmd.Stdin = f
	list, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("busybox cpio -t: %v\n%s", err, list)
	}
	for _, want := range []string{"dev/console", "modules/00-x.ko", "init", "crw-------", "-rwxr-xr-x"} {
		if !strings.Contains(string(list), want) {
			t.Errorf("the archive lacks %q:\n%s", want, list)
		}
	}
}

// TestNewSaysWhyNot: without the guest kernel the tier is not offered,
// and the error says what is missing and how to install it, before any
// VM is booted.
func TestNewSaysWhyNot(t *testing.T) {
	t.Setenv(DirEnv, t.TempDir())
	t.Setenv(CacheEnv, t.TempDir())
	guest := filepath.Join(t.TempDir(), "agentbox-guest")
	if err := os.WriteFile(guest, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := New(driver.Options{GuestBinary: guest, UIDBase: 1000000})
	if err == nil || !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "install-deps.sh") {
		t.Fatalf("New without a kernel: %v", err)
	}
}

// TestPruneCache removes another build's initramfs and trial result once
// stale, and keeps the current one and fresh ones.
func TestPruneCache(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * staleAfter)
	for _, n := range []string{"initramfs-a.cpio", "initramfs-b.cpio", "trial-a.ok", "initramfs-c.cpio", "other"} {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if n != "initramfs-c.cpio" {
			_ = os.Chtimes(p, old, old)
		}
	}
	pruneCache(dir, filepath.Join(dir, "initramfs-a.cpio"))
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if strings.Join(left, " ") != "initramfs-a.cpio initramfs-c.cpio other" {
		t.Errorf("left %v", left)
	}
}

// TestWritableSize: the writable disk is the disk limit less a margin
// that keeps storage's limit out of reach; 8 GiB without a limit.
func TestWritableSize(t *testing.T) {
	for _, c := range []struct{ disk, want int64 }{{0, 8 << 30}, {2048, (2048 - 64) << 20}, {64, 56 << 20}, {10, 32 << 20}} {
		if got := writableSize(c.disk); got != c.want {
			t.Errorf("writableSize(%d) = %d, want %d", c.disk, got, c.want)
		}
	}
}

// TestChooseAccel holds KVM to a device QEMU's unprivileged user may open:
// a root-only /dev/kvm (mode 0600, as on a host without udev) opens for
// the daemon, but QEMU would fail on it.
func TestChooseAccel(t *testing.T) {
	dir := t.TempDir()
	dev := func(mode os.FileMode, gid int) string {
		p := filepath.Join(dir, fmt.Sprintf("kvm-%o-%d", mode, gid))
		if err := os.WriteFile(p, nil, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 0, gid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		path   string
		accel  string
		gid    int
		whyHas string
	}{
		{filepath.Join(dir, "none"), "tcg", -1, ""},
		{dev(0o600, 0), "tcg", -1, "chmod 0660"},
		{dev(0o660, 4321), "kvm", 4321, ""},
		{dev(0o660, 0), "tcg", -1, "chgrp kvm"}, // QEMU never gets root's group
		{dev(0o666, 0), "kvm", -1, ""},
	} {
		accel, gid, why := chooseAccel(c.path)
		if accel != c.accel || gid != c.gid || (c.whyHas == "") != (why == "") || !strings.Contains(why, c.whyHas) {
			t.Errorf("%s: got %s, gid %d, why %q; want %s, gid %d, why with %q", filepath.Base(c.path), accel, gid, why, c.accel, c.gid, c.whyHas)
		}
	}
}
