package microvm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/driver/drivertest"
)

// allocated is the disk space file path takes (its holes not counted).
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// ramUse is what the host says of the guest RAM mapping of QEMU pid
// (the memfd of ram_linux.go, in /proc/pid/smaps), in KiB. Shared is
// Shared_Clean plus Shared_Dirty: pages of a memfd (shmem, with no file
// to write back to) count as dirty.
type ramUse struct{ Rss, Pss, Shared, PrivateDirty int64 }

func ramMapping(t *testing.T, pid int) ramUse {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	var u ramUse
	in, found := false, false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			// A mapping's first line: range perms offset dev inode [path].
			in = strings.Contains(l, "memfd:agentbox-vm-ram")
			found = found || in
			continue
		}
		if !in || len(f) != 3 || f[2] != "kB" {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Rss:":
			u.Rss += n
		case "Pss:":
			u.Pss += n
		case "Shared_Clean:", "Shared_Dirty:":
			u.Shared += n
		case "Private_Dirty:":
			u.PrivateDirty += n
		}
	}
	if !found {
		t.Fatalf("QEMU %d maps no guest RAM memfd", pid)
	}
	return u
}

// TestRestoresShareRAM: two VMs restored from one checkpoint of a
// running VM map its RAM image copy-on-write, and the host counts the
// pages they have not written once for both (shared pages, a Pss of
// about half their Rss); each still has memory of its own (a file
// written in one is not in the other). A restored VM's checkpoint
// carries its RAM in the state; so did checkpoints of layout 1, which
// still restore; a VM restored from a pause to disk maps RAM of its
// own again, so its next checkpoint copies an image.
func TestRestoresShareRAM(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test boots VMs and needs root (make test runs as root)")
	}
	guest := drivertest.BuildGuest(t)
	parent := drivertest.CgroupParent(t)
	const uidBase = 1000000
	layer := drivertest.BusyboxRootfs(t, uidBase)
	d, err := New(driver.Options{GuestBinary: guest, CgroupParent: parent, UIDBase: uidBase, Seccomp: true,
		CacheDir: t.TempDir(), IDRanges: drivertest.IDRanges(t, uidBase)})
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	pid := strconv.Itoa(os.Getpid() % 100000)
	newSpec := func(name string) *driver.Spec {
		dir := filepath.Join(tmp, name)
		spec := &driver.Spec{
			ID: "mvmram" + name + pid, Hostname: "mvm-" + name, Layers: []string{layer},
			UpperDir: filepath.Join(dir, "upper"), WorkDir: filepath.Join(dir, "work"), RunDir: filepath.Join(dir, "run"),
			Env:  []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
			User: "root", Workdir: "/", CPU: 1, MemoryMB: 128, Pids: 64, DiskMB: 64,
		}
		for _, dir := range []string{spec.UpperDir, spec.WorkDir, spec.RunDir} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return spec
	}
	newDir := func(name string) string {
		dir := filepath.Join(tmp, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run := func(name string, h *driver.Handle) {
		t.Cleanup(func() { _ = d.Destroy(context.Background(), h) })
		if got := mustExecTest(t, d, h, "hostname"); got != "mvm-"+name {
			t.Fatalf("VM %s answers hostname %q", name, got)
		}
	}
	a, err := d.Create(ctx, newSpec("a"))
	if err != nil {
		t.Fatal(err)
	}
	run("a", a)
	// Memory the guest has touched: the page cache of a file in tmpfs.
	mustExecTest(t, d, a, "head -c 16m /dev/urandom > /tmp/touched && md5sum /tmp/touched > /tmp/sum")
	snap := newDir("snap")
	if err := d.Checkpoint(ctx, a, snap, driver.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	st, err := os.Stat(filepath.Join(snap, "state"))
	if err != nil {
		t.Fatal(err)
	}
	img := allocated(t, filepath.Join(snap, "ram"))
	if st.Size() > 4<<20 || img < 16<<20 {
		t.Errorf("a checkpoint of a VM with RAM of its own: state %d bytes, RAM image %d bytes allocated; want the RAM in the image", st.Size(), img)
	}
	var kids []*driver.Handle
	for _, name := range []string{"b", "c"} {
		h, err := d.Restore(ctx, newSpec(name), snap)
		if err != nil {
			t.Fatalf("restore %s: %v", name, err)
		}
		run(name, h)
		if got := mustExecTest(t, d, h, "md5sum -c /tmp/sum >/dev/null && echo same"); got != "same" {
			t.Errorf("VM %s: the file in the guest's memory: %q", name, got)
		}
		kids = append(kids, h)
	}
	mustExecTest(t, d, kids[0], "echo b > /tmp/mine")
	if got := mustExecTest(t, d, kids[1], "cat /tmp/mine 2>&1 || true"); !strings.Contains(got, "No such file") {
		t.Errorf("VM c sees VM b's file: %q", got)
	}
	for i, h := range kids {
		u := ramMapping(t, h.Pid)
		t.Logf("restored VM %d's RAM mapping: Rss %d KiB, Pss %d KiB, shared %d KiB, Private_Dirty %d KiB", i, u.Rss, u.Pss, u.Shared, u.PrivateDirty)
		// The 16 MiB file both read is in pages both map.
		if u.Shared < 16<<10 || u.Pss >= u.Rss {
			t.Errorf("restored VM %d does not share its RAM image's pages: %+v", i, u)
		}
	}
	// A restored VM's checkpoint: its RAM in the state, no image.
	again := newDir("again")
	if err := d.Checkpoint(ctx, kids[0], again, driver.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatalf("checkpoint of a restored VM: %v", err)
	}
	if _, err := os.Stat(filepath.Join(again, "ram")); !os.IsNotExist(err) {
		t.Errorf("a restored VM's checkpoint has a RAM image (%v)", err)
	}
	// The same as layout 1: a file memory, the whole VM's stream.
	if err := os.Rename(filepath.Join(again, "state"), filepath.Join(again, "memory")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(again, "microvm.json"))
	var sv map[string]any
	_ = json.Unmarshal(b, &sv)
	sv["version"] = legacyVMVersion
	delete(sv, "ram")
	delete(sv, "stopped")
	b, _ = json.Marshal(sv)
	if err := os.WriteFile(filepath.Join(again, "microvm.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	dh, err := d.Restore(ctx, newSpec("d"), again)
	if err != nil {
		t.Fatalf("restore of a layout 1 checkpoint: %v", err)
	}
	run("d", dh)
	if got := mustExecTest(t, d, dh, "cat /tmp/mine; md5sum -c /tmp/sum >/dev/null && echo same"); got != "b\nsame" {
		t.Errorf("VM d (from b's checkpoint): %q", got)
	}
	// Pause to disk and back: RAM of its own, so the next checkpoint
	// copies an image again.
	disk := newDir("disk")
	if err := d.Checkpoint(ctx, dh, disk, driver.CheckpointOptions{}); err != nil {
		t.Fatalf("checkpoint that stops: %v", err)
	}
	_ = d.Destroy(ctx, dh)
	eh, err := d.Restore(ctx, newSpec("e"), disk)
	if err != nil {
		t.Fatalf("restore from a pause to disk: %v", err)
	}
	run("e", eh)
	if priv(eh).RAMFD == 0 {
		t.Errorf("a VM restored from a pause to disk maps no RAM of its own")
	}
	last := newDir("last")
	if err := d.Checkpoint(ctx, eh, last, driver.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatalf("checkpoint after a pause to disk: %v", err)
	}
	if allocated(t, filepath.Join(last, "ram")) < 16<<20 {
		t.Errorf("no RAM image in the checkpoint after a pause to disk")
	}
	if got := mustExecTest(t, d, eh, "cat /tmp/mine"); got != "b" {
		t.Errorf("VM e: %q", got)
	}
}

// TestCopySparse: a RAM copy keeps the data, and leaves holes where the
// source has holes or pages of zeros; a sealed fill refuses writes.
func TestCopySparse(t *testing.T) {
	const size = 8 << 20
	src, err := newRAM(size)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	want := make([]byte, size)
	for _, r := range [][2]int{{0, 100}, {3 * pageSize, 5*pageSize + 7}, {size - 10, size}} {
		for i := r[0]; i < r[1]; i++ {
			want[i] = byte(i%251 + 1)
		}
	}
	if _, err := src.WriteAt(want[:6*pageSize], 0); err != nil {
		t.Fatal(err)
	}
	// Written zeros: data in the source, holes in the copy.
	if _, err := src.WriteAt(make([]byte, 1<<20), 2<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := src.WriteAt(want[size-pageSize:], size-pageSize); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ram")
	dst, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := copySparse(dst, src, size); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	got, err := os.ReadFile(path)
	if err != nil || string(got) != string(want) {
		t.Fatalf("the copy differs (%v)", err)
	}
	if n := allocated(t, path); n > 16*pageSize {
		t.Errorf("the copy takes %d bytes, want only its 4 pages of data", n)
	}
	m, err := fillRAM(path, size, true)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.WriteAt([]byte{1}, 0); err == nil {
		t.Error("a sealed RAM image took a write")
	}
	back := make([]byte, size)
	if _, err := m.ReadAt(back, 0); err != nil || string(back) != string(want) {
		t.Errorf("the sealed image differs (%v)", err)
	}
}
