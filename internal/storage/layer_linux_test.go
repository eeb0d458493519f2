package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/tenancy"
	"golang.org/x/sys/unix"
)

func TestOpenReopen(t *testing.T) {
	p, opts := newTestPool(t)
	ctx := context.Background()
	if _, _, err := p.CreateLayer(ctx, "sb1", 10, nil); err != nil {
		t.Fatalf("CreateLayer: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	// Re-open while mounted (a daemon restart with sandboxes running).
	p2, err := Open(ctx, opts)
	if err != nil {
		t.Fatalf("reopen while mounted: %v", err)
	}
	if got := countMounts(t, p2.Root()); got != 1 {
		t.Errorf("pool mounted %d times after reopen, want 1", got)
	}
	ids, err := p2.ListLayers()
	if err != nil || len(ids) != 1 || ids[0] != "sb1" {
		t.Errorf("ListLayers after reopen = %v, %v; want [sb1]", ids, err)
	}

	// Re-open after the pool was unmounted (a host reboot).
	if out, err := exec.Command("umount", p2.Root()).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v: %s", err, out)
	}
	p3, err := Open(ctx, opts)
	if err != nil {
		t.Fatalf("reopen after unmount: %v", err)
	}
	if _, mounted, _ := mountedAt(p3.Root()); !mounted {
		t.Fatal("pool not mounted after reopen")
	}
	ids, err = p3.ListLayers()
	if err != nil || len(ids) != 1 || ids[0] != "sb1" {
		t.Errorf("ListLayers after remount = %v, %v; want [sb1]", ids, err)
	}

	// A larger size grows the pool in place.
	opts.SizeGB = 3
	p4, err := Open(ctx, opts)
	if err != nil {
		t.Fatalf("reopen with a larger size: %v", err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(p4.Root(), &fs); err != nil {
		t.Fatal(err)
	}
	if size := int64(fs.Blocks) * fs.Bsize; size < 5<<29 {
		t.Errorf("pool size after growing to 3 GB = %d bytes", size)
	}
}

func TestOpenInvalid(t *testing.T) {
	tests := []struct {
		name string
		opts Options
	}{
		{"relative data dir", Options{DataDir: "var/lib/agentbox"}},
		{"empty data dir", Options{}},
		{"negative size", Options{DataDir: "/nonexistent-agentbox", SizeGB: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(context.Background(), tt.opts)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("Open = %v, want invalid argument", err)
			}
		})
	}
}

func countMounts(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && unescapeMount(f[4]) == dir {
			n++
		}
	}
	return n
}

func TestLayerDiskLimit(t *testing.T) {
	p, _ := newTestPool(t)
	ctx := context.Background()
	upper, work, err := p.CreateLayer(ctx, "quota", 20, nil)
	if err != nil {
		t.Fatalf("CreateLayer: %v", err)
	}
	for _, d := range []string{upper, work} {
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != testUIDBase || st.Gid != testUIDBase || st.Mode&0o7777 != 0o755 || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			t.Errorf("%s: uid %d gid %d mode %o, want %d:%d dir 0755", d, st.Uid, st.Gid, st.Mode, testUIDBase, testUIDBase)
		}
	}

	// Write 30 MB as the sandbox's root (host uid UIDBase) in a child.
	cmd := exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(upper, "big"), "bs=1M", "count=30", "conv=fsync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: testUIDBase, Gid: testUIDBase}}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("writing 30 MB into a 20 MB layer succeeded: %s", out)
	}
	if !bytes.Contains(out, []byte("Disk quota exceeded")) {
		t.Errorf("dd failed without EDQUOT: %v: %s", err, out)
	}

	// And as host root, in-process, to see the errno itself.
	upperRoot, _, err := p.CreateLayer(ctx, "quota-root", 20, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(upperRoot, "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var werr error
	for i := 0; i < 30 && werr == nil; i++ {
		_, werr = f.Write(buf)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if !errors.Is(werr, unix.EDQUOT) {
		t.Errorf("write past the limit as root: %v, want EDQUOT", werr)
	}

	// Another layer is unaffected by its neighbour being full.
	upper2, _, err := p.CreateLayer(ctx, "neighbour", 20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(upper2, "f"), make([]byte, 5<<20), 0o644); err != nil {
		t.Errorf("neighbour write of 5 MB: %v", err)
	}
}

func TestLayerCreateRemove(t *testing.T) {
	p, _ := newTestPool(t)
	ctx := context.Background()
	upper, _, err := p.CreateLayer(ctx, "sb-1", 64, nil)
	if err != nil {
		t.Fatalf("CreateLayer: %v", err)
	}
	dir := filepath.Dir(upper)
	id, err := subvolID(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(upper, "f"), make([]byte, 5<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	syncPool(t, p)
	used, err := p.LayerUsage("sb-1")
	if err != nil || used < 5<<20 || used > 6<<20 {
		t.Errorf("LayerUsage = %d, %v; want about 5 MiB", used, err)
	}

	_, _, err = p.CreateLayer(ctx, "sb-1", 64, nil)
	if !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second CreateLayer = %v, want already exists", err)
	}
	if got, _, err := p.LayerPaths("sb-1"); err != nil || got != upper {
		t.Errorf("LayerPaths = %q, %v; want %q", got, err, upper)
	}

	if err := p.RemoveLayer(ctx, "sb-1"); err != nil {
		t.Fatalf("RemoveLayer: %v", err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("layer dir after remove: %v, want not exist", err)
	}
	if err := p.RemoveLayer(ctx, "sb-1"); err != nil {
		t.Errorf("second RemoveLayer = %v, want nil", err)
	}
	if _, _, err := p.LayerPaths("sb-1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("LayerPaths after remove = %v, want not found", err)
	}
	ids, _ := p.ListLayers()
	if len(ids) != 0 {
		t.Errorf("ListLayers after remove = %v, want none", ids)
	}

	// No subvolume and (once the cleaner has run) no qgroup remain.
	// BTRFS_IOC_SYNC commits and wakes the cleaner; syncfs does not.
	if out, err := exec.Command("btrfs", "filesystem", "sync", p.Root()).CombinedOutput(); err != nil {
		t.Fatalf("btrfs filesystem sync: %v: %s", err, out)
	}
	if out, err := exec.Command("btrfs", "subvolume", "sync", p.Root()).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume sync: %v: %s", err, out)
	}
	p.sweepStaleQgroups(ctx)
	out, err := exec.Command("btrfs", "subvolume", "list", p.Root()).CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "sb-1") {
		t.Errorf("subvolume left after remove:\n%s", out)
	}
	deadline := time.Now().Add(30 * time.Second) // the btrfs cleaner is slow on a loaded host
	for {
		_, err := qgroupUsage(p.Root(), id)
		if errors.Is(err, errNoQgroup) {
			break
		}
		if time.Now().After(deadline) {
			show, _ := exec.Command("btrfs", "qgroup", "show", p.Root()).CombinedOutput()
			t.Fatalf("qgroup 0/%d still there after remove (%v):\n%s", id, err, show)
		}
		syncPool(t, p)
		time.Sleep(50 * time.Millisecond)
		p.sweepStaleQgroups(ctx)
	}
	show, _ := exec.Command("btrfs", "qgroup", "show", p.Root()).CombinedOutput()
	if strings.Contains(string(show), fmt.Sprintf("0/%d ", id)) {
		t.Errorf("btrfs qgroup show still lists 0/%d:\n%s", id, show)
	}
}

func TestLayerInvalid(t *testing.T) {
	p, _ := newTestPool(t)
	ctx := context.Background()
	tests := []struct {
		id     string
		diskMB int64
	}{
		{"", 10},
		{"../escape", 10},
		{"a/b", 10},
		{".hidden", 10},
		{"ok", 0},
		{"ok", -5},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q/%d", tt.id, tt.diskMB), func(t *testing.T) {
			_, _, err := p.CreateLayer(ctx, tt.id, tt.diskMB, nil)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("CreateLayer = %v, want invalid argument", err)
			}
		})
	}
	if ids, _ := p.ListLayers(); len(ids) != 0 {
		t.Errorf("ListLayers = %v after invalid creates, want none", ids)
	}
}

func syncPool(t testing.TB, p *Pool) {
	t.Helper()
	fd, err := openDir(p.Root())
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkCreateRemoveLayer(b *testing.B) {
	p, _ := newTestPool(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("bench-%d", i)
		if _, _, err := p.CreateLayer(ctx, id, 100, nil); err != nil {
			b.Fatal(err)
		}
		if err := p.RemoveLayer(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCreateLayer(b *testing.B) {
	p, _ := newTestPool(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := p.CreateLayer(ctx, fmt.Sprintf("bench-%d", i), 100, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreateLayerOverTemplate is what a sandbox create pays: a layer
// over a template, a spare made from the template's inode floor renamed
// into place (each iteration waits, untimed, for the spares' refill).
func BenchmarkCreateLayerOverTemplate(b *testing.B) { benchLayerOverTemplate(b, true) }

// BenchmarkCreateLayerOverTemplateBurst creates back to back: the spares
// run out and most layers are snapshots made on the spot.
func BenchmarkCreateLayerOverTemplateBurst(b *testing.B) { benchLayerOverTemplate(b, false) }

func benchLayerOverTemplate(b *testing.B, waitSpares bool) {
	p, _ := newTestPool(b)
	ctx := tenancy.Admin(context.Background())
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		b.Fatal(err)
	}
	tpl, err := p.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "t", Rootfs: dir})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if waitSpares {
			b.StopTimer()
			p.spares.wg.Wait()
			b.StartTimer()
		}
		id := fmt.Sprintf("bench-%d", i)
		if _, _, err := p.CreateLayer(ctx, id, 100, tpl.LowerDirs()); err != nil {
			b.Fatal(err)
		}
		if err := p.RemoveLayer(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLimitHoldsAfterDeepDrop: dropping a snapshot whose shared tree is
// at least drop_subtree_threshold levels deep (3 by default: a template
// of a few hundred thousand files) makes btrfs skip the accounting and
// mark the qgroups inconsistent, and then no qgroup limit holds until a
// rescan: 100 MiB were written under disk_mb 32 (TestLimits/disk, once in
// a full run). Open sets the threshold to 8, so drops are accounted in
// full, and rescans a pool it finds inconsistent. The test makes a
// shallow tree count as deep (threshold 1) to get an inconsistent pool
// in seconds, sees the limit fail there, and opens the pool again; then
// does it again and lets the pool's periodic check find it.
func TestLimitHoldsAfterDeepDrop(t *testing.T) {
	// The pool's own watch is off: the test makes the qgroups
	// inconsistent and sees what Open, then the watch, do about it.
	p, opts := newTestPool(t, func(o *Options) { o.QgroupCheck = -1 })
	ctx := context.Background()
	qgroups, err := p.qgroupsDir()
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, _ := os.ReadFile(qgroups + "/" + name)
		return strings.TrimSpace(string(b))
	}
	if got := read("drop_subtree_threshold"); got != "8" {
		t.Errorf("drop_subtree_threshold after Open = %q, want 8", got)
	}
	fill := func(p *Pool, id string) error {
		upper, _, err := p.CreateLayer(ctx, id, 32, nil)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(upper, "fill"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		buf := make([]byte, 1<<20)
		for i := 0; i < 100; i++ {
			if _, err := f.Write(buf); err != nil {
				return err
			}
		}
		return f.Sync()
	}
	deepDrop(t, p, qgroups, "first")
	if read("inconsistent") != "1" {
		t.Fatal("the drop did not make the qgroups inconsistent: the test shows nothing")
	}
	if err := fill(p, "while-inconsistent"); err != nil {
		t.Logf("the limit held while inconsistent (%v): this kernel enforces it anyway", err)
	}
	// A daemon start: the pool opened again.
	q, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// -W waits for a rescan under way without starting one.
	if out, err := runCmd(ctx, "btrfs", "quota", "rescan", "-W", p.root); err != nil {
		t.Fatalf("waiting for Open's rescan: %v: %s", err, out)
	}
	if got := read("inconsistent"); got != "0" {
		t.Errorf("qgroups inconsistent after Open (%q), want a rescan", got)
	}
	if got := read("drop_subtree_threshold"); got != "8" {
		t.Errorf("drop_subtree_threshold after Open = %q, want 8", got)
	}
	if err := fill(q, "after-rescan"); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("100 MiB into a 32 MiB layer after the rescan: %v, want EDQUOT", err)
	}

	// While the daemon runs: the same drop again, found by the pool's
	// periodic check (here every 50 ms), which rescans; the threshold
	// is set back too.
	deepDrop(t, q, qgroups, "second")
	if read("inconsistent") != "1" {
		t.Fatal("the second drop did not make the qgroups inconsistent")
	}
	w := &qgroupWatch{dir: qgroups, root: q.root, log: q.log}
	wctx, stop := context.WithCancel(ctx)
	var watching sync.WaitGroup
	watching.Go(func() { w.run(wctx, 50*time.Millisecond) })
	defer func() { stop(); watching.Wait() }()
	for deadline := time.Now().Add(5 * time.Minute); read("inconsistent") != "0" || read("drop_subtree_threshold") != "8"; {
		if time.Now().After(deadline) {
			t.Fatalf("the watch did not make the qgroups consistent in 5 minutes (inconsistent %s, threshold %s)", read("inconsistent"), read("drop_subtree_threshold"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := fill(q, "after-watch"); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("100 MiB into a 32 MiB layer after the watch's rescan: %v, want EDQUOT", err)
	}
}

// deepDrop makes and drops a 20,000-file subvolume and a snapshot of it
// with drop_subtree_threshold 1, so that the drop counts as deep: btrfs
// skips its accounting and marks the qgroups inconsistent.
func deepDrop(t *testing.T, p *Pool, qgroups, name string) {
	t.Helper()
	ctx := context.Background()
	big := filepath.Join(p.root, "deep-"+name)
	if err := subvolCreate(big); err != nil {
		t.Fatal(err)
	}
	b := bytes.Repeat([]byte("x"), 2000)
	for i := 0; i < 20000; i++ {
		if err := os.WriteFile(filepath.Join(big, "f"+strconv.Itoa(i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	unix.Sync()
	if out, err := runCmd(ctx, "btrfs", "subvolume", "snapshot", big, big+"-snap"); err != nil {
		t.Fatalf("snapshot: %v: %s", err, out)
	}
	unix.Sync()
	if err := os.WriteFile(qgroups+"/drop_subtree_threshold", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{big + "-snap", big} {
		if out, err := runCmd(ctx, "btrfs", "subvolume", "delete", d); err != nil {
			t.Fatalf("delete: %v: %s", err, out)
		}
	}
	if out, err := runCmd(ctx, "btrfs", "subvolume", "sync", p.root); err != nil {
		t.Fatalf("subvolume sync: %v: %s", err, out)
	}
	unix.Sync()
}

// Open starts the qgroup watch by default and Close ends it (no goroutine
// left behind); a negative QgroupCheck starts none.
func TestQgroupWatchLifetime(t *testing.T) {
	p, opts := newTestPool(t, func(o *Options) { o.QgroupCheck = 10 * time.Millisecond })
	if p.stopWatch == nil {
		t.Fatal("Open started no qgroup watch")
	}
	time.Sleep(50 * time.Millisecond) // a few checks
	// Close waits for the watch to end: one that ignored it would hang here.
	p.Close()
	opts.QgroupCheck = -1
	q, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if q.stopWatch != nil {
		t.Error("QgroupCheck -1 started a watch")
	}
}
