package storage

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/tenancy"
	"golang.org/x/sys/unix"
)

// maxIno is the highest inode number under dir.
func maxIno(t *testing.T, dir string) uint64 {
	t.Helper()
	var max uint64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		max = mx(max, st.Ino)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return max
}

func mx(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// fill makes n files under dir and returns their lowest inode number.
func fill(t *testing.T, dir string, n int) uint64 {
	t.Helper()
	low := ^uint64(0)
	for i := 0; i < n; i++ {
		p := filepath.Join(dir, "new-"+strconv.Itoa(i))
		if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		low = min(low, st.Ino)
	}
	return low
}

// TestInodeFloor: a sandbox's writable layer numbers its inodes above
// every inode of the layers beneath it (template, then snapshot over
// template), so no file of the overlay shares another's (st_dev, st_ino).
// Without the floor, the first new file took inode 257 of the template.
func TestInodeFloor(t *testing.T) {
	p, _ := newTestPool(t)
	ctx := tenancy.Admin(context.Background())
	tree := makeTree(t)
	for i := 0; i < 300; i++ {
		if err := os.WriteFile(filepath.Join(tree, fmt.Sprintf("f%d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tpl, err := p.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "t", Rootfs: tree})
	if err != nil {
		t.Fatal(err)
	}
	tplMax := maxIno(t, filepath.Dir(tpl.Rootfs))

	upper, _, err := p.CreateLayer(ctx, "a", 64, tpl.LowerDirs())
	if err != nil {
		t.Fatal(err)
	}
	if low := fill(t, upper, 400); low <= tplMax {
		t.Fatalf("a new file in the layer has inode %d; the template's go up to %d", low, tplMax)
	}
	// The next layer over the template is a spare, made meanwhile in the
	// background, renamed into place: numbered above the template too.
	p.spares.wg.Wait()
	if n := len(p.spares.byFloor); n != 1 {
		t.Fatalf("spares for %d floors, want 1", n)
	}
	upperC, _, err := p.CreateLayer(ctx, "c", 64, tpl.LowerDirs())
	if err != nil {
		t.Fatal(err)
	}
	if low := fill(t, upperC, 400); low <= tplMax {
		t.Fatalf("a new file in a layer made from a spare has inode %d; the template's go up to %d", low, tplMax)
	}
	// The floor costs the layer no disk: its limit is still all its own.
	if used, err := p.LayerUsage("a"); err != nil || used > 1<<20 {
		t.Errorf("layer usage with a floor = %d, %v", used, err)
	}

	// A snapshot of it is a layer too: a sandbox over snapshot and
	// template numbers above both. Its highest inode is a directory (as
	// overlayfs's work/work often is), and it holds the keeper of the
	// template's floor: the snapshot's floor replaces one with the other.
	if err := os.Mkdir(filepath.Join(upper, "made-last"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SnapshotLayer(ctx, "a", "snap"); err != nil {
		t.Fatal(err)
	}
	snapMax := maxIno(t, filepath.Dir(p.SnapshotUpper("snap")))
	upper2, _, err := p.CreateLayer(ctx, "b", 64, append([]string{p.SnapshotUpper("snap")}, tpl.LowerDirs()...))
	if err != nil {
		t.Fatal(err)
	}
	if low := fill(t, upper2, 50); low <= snapMax || low <= tplMax {
		t.Fatalf("a new file over the snapshot has inode %d; the snapshot's go up to %d, the template's to %d", low, snapMax, tplMax)
	}

	// Each floor is made once, and goes with its layer.
	floors, _ := os.ReadDir(p.floorsDir())
	if len(floors) != 2 {
		t.Fatalf("floors = %v, want one for the template and one for the snapshot", floors)
	}
	for _, id := range []string{"b", "c"} {
		if err := p.RemoveLayer(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.RemoveSnapshot(ctx, "snap"); err != nil {
		t.Fatal(err)
	}
	if floors, _ := os.ReadDir(p.floorsDir()); len(floors) != 1 {
		t.Errorf("floors after removing the snapshot = %v, want the template's only", floors)
	}
	// A floor whose layer is gone (a crash between the two) is swept at
	// the next open.
	if err := p.RemoveLayer(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(tpl.Rootfs)
	if err := subvolDestroy(dir); err != nil {
		t.Fatal(err)
	}
	p.spares.wg.Wait()
	p.sweepFloors()
	if floors, _ := os.ReadDir(p.floorsDir()); len(floors) != 0 {
		t.Errorf("floors after the sweep = %v, want none", floors)
	}
	if spares, _ := os.ReadDir(p.sparesDir()); len(spares) != 0 {
		t.Errorf("spare layers after the sweep = %v, want none", spares)
	}
}

// TestSpareFloorsCapped: only the maxSpareFloors floors a create used last
// keep spare layers; a new one takes the place of the one used longest
// ago, whose spares are removed.
func TestSpareFloorsCapped(t *testing.T) {
	p, _ := newTestPool(t)
	ctx := tenancy.Admin(context.Background())
	tree := makeTree(t)
	var first string
	for i := 0; i <= maxSpareFloors; i++ {
		tpl, err := p.ImportTemplate(ctx, api.ImportTemplateRequest{Name: fmt.Sprintf("t%d", i), Rootfs: tree})
		if err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("l%d", i)
		if _, _, err := p.CreateLayer(ctx, id, 64, tpl.LowerDirs()); err != nil {
			t.Fatal(err)
		}
		if err := p.RemoveLayer(ctx, id); err != nil {
			t.Fatal(err)
		}
		p.spares.wg.Wait()
		if i == 0 {
			first, _ = p.floorFor(ctx, tpl.LowerDirs())
		}
	}
	if n := len(p.spares.byFloor); n != maxSpareFloors {
		t.Errorf("%d floors keep spares, want %d", n, maxSpareFloors)
	}
	if _, ok := p.spares.byFloor[first]; ok {
		t.Errorf("the floor used longest ago (%s) still keeps spares", first)
	}
	if spares, _ := os.ReadDir(p.sparesDir()); len(spares) != maxSpareFloors*sparesPerFloor {
		t.Errorf("%d spare layers on disk, want %d", len(spares), maxSpareFloors*sparesPerFloor)
	}
}

// TestSparesDroppedWhileFilling: spares made for a floor whose spares were
// dropped meanwhile (its layer removed) are destroyed, not kept under it.
func TestSparesDroppedWhileFilling(t *testing.T) {
	p, _ := newTestPool(t)
	ctx := tenancy.Admin(context.Background())
	tpl, err := p.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "t", Rootfs: makeTree(t)})
	if err != nil {
		t.Fatal(err)
	}
	floor, err := p.floorFor(ctx, tpl.LowerDirs())
	if err != nil {
		t.Fatal(err)
	}
	p.refill(floor)     // starts after refillDelay
	p.dropSpares(floor) // before it does
	p.spares.wg.Wait()
	if n := len(p.spares.byFloor); n != 0 {
		t.Errorf("spares kept for %d floors after the drop, want none", n)
	}
	if spares, _ := os.ReadDir(p.sparesDir()); len(spares) != 0 {
		t.Errorf("%d spare layers on disk after the drop, want none", len(spares))
	}
}
