package storage

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// requireBtrfs skips, with the reason, where a real pool cannot be made.
func requireBtrfs(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: mounts a btrfs loop file")
	}
	for _, bin := range []string{"mkfs.btrfs", "btrfs", "mount", "losetup"} {
		if _, err := exec.LookPath(bin); err != nil {
			tb.Skipf("needs %s (apt-get install btrfs-progs)", bin)
		}
	}
}

const testUIDBase = 1000000

// newTestPool opens a 2 GB pool in a temp dir and unmounts it (and detaches
// its loop device) when the test ends.
func newTestPool(tb testing.TB, with ...func(*Options)) (*Pool, Options) {
	tb.Helper()
	requireBtrfs(tb)
	dir := tb.TempDir()
	// Sandbox uids must be able to reach the layers, as under /var/lib.
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		tb.Fatal(err)
	}
	opts := Options{DataDir: dir, SizeGB: 2, UIDBase: testUIDBase, UIDCount: 65536}
	for _, f := range with {
		f(&opts)
	}
	tb.Cleanup(func() { unmountTestPool(tb, dir) })
	p, err := Open(context.Background(), opts)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p, opts
}

func unmountTestPool(tb testing.TB, dir string) {
	root := filepath.Join(dir, "storage")
	for {
		_, mounted, err := mountedAt(root)
		if err != nil || !mounted {
			break
		}
		if out, err := exec.Command("umount", root).CombinedOutput(); err != nil {
			tb.Errorf("umount %s: %v: %s", root, err, out)
			break
		}
	}
	img := filepath.Join(dir, "storage.img")
	for _, dev := range loopDevsOf(img) {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil && slices.Contains(loopDevsOf(img), dev) {
			// A device that went meanwhile detached itself: the mount
			// set autoclear, which the kernel carries out after the
			// umount, asynchronously (losetup -d then fails with
			// ENXIO). Only one still attached to the image is left over.
			tb.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	}
}

// loopDevsOf lists the loop devices backed by img.
func loopDevsOf(img string) []string {
	out, _ := exec.Command("losetup", "-j", img).Output()
	var devs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if dev, _, ok := strings.Cut(line, ":"); ok && dev != "" {
			devs = append(devs, dev)
		}
	}
	return devs
}

func statUID(fi os.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
