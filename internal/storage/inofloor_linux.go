package storage

// Inode floors: a sandbox's new files never take the inode number of a
// file in a layer beneath them.
//
// Every layer is its own btrfs subvolume, and btrfs numbers each
// subvolume's inodes on its own, from 256 up. overlayfs counts a stack of
// btrfs subvolumes as one filesystem (they share a superblock), so it
// reports each file's real inode number under the overlay's one device and
// leaves xino off: a file created in the writable layer could have the same
// (st_dev, st_ino) as an unrelated file of the template. Whatever takes
// that pair as a file's identity then confuses the two. gVisor's gofer
// shares one inode, page cache included, between them: on the gvisor tier
// a sandbox that wrote new files then read their bytes from
// /usr/bin/python3 ("exec format error"), and Chromium's memory-mapped
// cache faulted (SIGSEGV, 2 runs in 8). tar, rsync and find -samefile see
// hard links that are not.
//
// btrfs gives a subvolume's next inode the number after the highest one in
// its tree, and a snapshot copies that tree. So each layer that sandboxes
// stack on (a template version, a snapshot, a build layer) gets a floor: a
// read-only subvolume holding one empty inode numbered as the layer's
// highest, made once (a snapshot of the layer with every other entry
// removed: 1.0 s for the desktop template's 23,790 entries) and kept in
// floors/<the layer's subvolume id>. A sandbox's writable layer is then a
// snapshot of the highest floor among its lowers instead of an empty
// subvolume, so its inodes are numbered above all of theirs; a snapshot
// of it is a layer above them in turn. The floor's inode sits at the
// layer's root, beside upper/ and work/, out of the sandbox's view.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// floorName is the one inode a floor keeps; floorLayerXattr records the
// layer it was made from, for the sweep at Open.
const (
	floorName       = ".ino-floor"
	floorLayerXattr = "user.agentbox.layer"
)

// sparesPerFloor is how many spare layers each floor in use keeps, and
// maxSpareFloors how many floors keep spares at once (the ones a create
// used last: a pool with thousands of snapshots must not keep thousands of
// spare subvolumes); refillDelay is how long after a take their refill
// starts.
const (
	sparesPerFloor = 8
	maxSpareFloors = 16
	refillDelay    = 100 * time.Millisecond
)

func (p *Pool) floorsDir() string { return filepath.Join(p.root, "floors") }
func (p *Pool) sparesDir() string { return filepath.Join(p.root, "spares") }

// spareState is the spare layers made from each floor, by floor path.
type spareState struct {
	mu      sync.Mutex
	byFloor map[string][]string
	filling map[string]bool
	used    map[string]time.Time // when a create last used each floor
	closed  bool
	wg      sync.WaitGroup
}

// newLayerFrom makes dir, a new layer subvolume numbered above floor: a
// spare renamed into place when one is ready, else a snapshot now.
func (p *Pool) newLayerFrom(floor, dir string) error {
	sp := &p.spares
	sp.mu.Lock()
	var spare string
	if list := sp.byFloor[floor]; len(list) > 0 {
		spare = list[len(list)-1]
		sp.byFloor[floor] = list[:len(list)-1]
	}
	sp.mu.Unlock()
	p.refill(floor)
	if spare != "" {
		err := unix.Renameat2(unix.AT_FDCWD, spare, unix.AT_FDCWD, dir, unix.RENAME_NOREPLACE)
		if err == nil {
			return nil
		}
		_ = p.destroySubvolume(spare)
		if errors.Is(err, unix.EEXIST) {
			return &os.PathError{Op: "rename", Path: dir, Err: err}
		}
	}
	return snapCreate(floor, dir, false)
}

// refill makes floor's spare layers up to sparesPerFloor, in the
// background.
func (p *Pool) refill(floor string) {
	sp := &p.spares
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.used[floor] = time.Now()
	if sp.closed || sp.filling[floor] || len(sp.byFloor[floor]) >= sparesPerFloor {
		return
	}
	// A floor new to the spares takes the place of the one used longest
	// ago when maxSpareFloors have them.
	var evicted []string
	if _, ok := sp.byFloor[floor]; !ok && len(sp.byFloor) >= maxSpareFloors {
		var oldest string
		for f := range sp.byFloor {
			if !sp.filling[f] && (oldest == "" || sp.used[f].Before(sp.used[oldest])) {
				oldest = f
			}
		}
		if oldest != "" {
			evicted = sp.byFloor[oldest]
			delete(sp.byFloor, oldest)
			delete(sp.used, oldest)
		}
	}
	if _, ok := sp.byFloor[floor]; !ok {
		sp.byFloor[floor] = nil // counted among the floors with spares
	}
	sp.filling[floor] = true
	sp.wg.Add(1)
	go func() {
		defer sp.wg.Done()
		for _, s := range evicted {
			if err := p.destroySubvolume(s); err != nil {
				p.log.Warn("removing a spare layer", "path", s, "err", err)
			}
		}
		// Not at once: the snapshot's commit would stall the create that
		// took the spare while it makes its dirs and starts its sandbox.
		time.Sleep(refillDelay)
		defer func() {
			sp.mu.Lock()
			delete(sp.filling, floor)
			sp.mu.Unlock()
		}()
		if err := os.MkdirAll(p.sparesDir(), 0o700); err != nil {
			p.log.Warn("making spare layers", "err", err)
			return
		}
		for {
			sp.mu.Lock()
			missing := sparesPerFloor - len(sp.byFloor[floor])
			if sp.closed {
				missing = 0
			}
			sp.mu.Unlock()
			if missing <= 0 {
				return
			}
			// All at once: snapshots taken together share one commit.
			var wg sync.WaitGroup
			var failed bool
			for range missing {
				wg.Add(1)
				go func() {
					defer wg.Done()
					path := filepath.Join(p.sparesDir(), randHex())
					err := snapCreate(floor, path, false)
					sp.mu.Lock()
					_, kept := sp.byFloor[floor] // not dropped with its floor meanwhile
					if err == nil && kept && !sp.closed {
						sp.byFloor[floor] = append(sp.byFloor[floor], path)
						sp.mu.Unlock()
						return
					}
					failed = true
					sp.mu.Unlock()
					if err == nil {
						_ = p.destroySubvolume(path)
					} else if !errors.Is(err, unix.ENOENT) { // ENOENT: the floor was removed
						p.log.Warn("making a spare layer", "floor", floor, "err", err)
					}
				}()
			}
			wg.Wait()
			if failed {
				return
			}
		}
	}()
}

// dropSpares destroys floor's spare layers.
func (p *Pool) dropSpares(floor string) {
	sp := &p.spares
	sp.mu.Lock()
	list := sp.byFloor[floor]
	delete(sp.byFloor, floor)
	delete(sp.used, floor)
	sp.mu.Unlock()
	for _, s := range list {
		if err := p.destroySubvolume(s); err != nil {
			p.log.Warn("removing a spare layer", "path", s, "err", err)
		}
	}
}

// closeSpares stops the refills, waits for them, and destroys every spare.
func (p *Pool) closeSpares() {
	sp := &p.spares
	sp.mu.Lock()
	sp.closed = true
	sp.mu.Unlock()
	sp.wg.Wait()
	sp.mu.Lock()
	floors := make([]string, 0, len(sp.byFloor))
	for f := range sp.byFloor {
		floors = append(floors, f)
	}
	sp.mu.Unlock()
	for _, f := range floors {
		p.dropSpares(f)
	}
}

// layerSubvolume returns the subvolume that holds lower, a layer directory
// in the pool (templates/N/V/rootfs, snapshots/ID/upper, layers/ID/upper).
func (p *Pool) layerSubvolume(lower string) (string, error) {
	root := filepath.Clean(p.root)
	for dir := filepath.Clean(lower); strings.HasPrefix(dir, root+"/"); dir = filepath.Dir(dir) {
		if sub, err := isSubvolume(dir); err != nil {
			return "", err
		} else if sub {
			return dir, nil
		}
	}
	return "", fmt.Errorf("layer %s is not in a subvolume of the storage pool %s", lower, p.root)
}

// floorFor returns the floor a new writable layer over lowers is made
// from: the one with the highest inode among theirs; "" when there are no
// lowers.
func (p *Pool) floorFor(ctx context.Context, lowers []string) (string, error) {
	var best string
	var bestIno uint64
	for _, l := range lowers {
		sub, err := p.layerSubvolume(l)
		if err != nil {
			return "", err
		}
		path, ino, err := p.floor(ctx, sub)
		if err != nil {
			return "", fmt.Errorf("the inode floor of layer %s: %w", sub, err)
		}
		if best == "" || ino > bestIno {
			best, bestIno = path, ino
		}
	}
	return best, nil
}

// floor returns layer subvolume sub's floor and its inode number, making
// it on first use.
func (p *Pool) floor(ctx context.Context, sub string) (string, uint64, error) {
	id, err := subvolID(sub)
	if err != nil {
		return "", 0, err
	}
	dst := filepath.Join(p.floorsDir(), strconv.FormatUint(id, 10))
	p.floorMu.Lock()
	defer p.floorMu.Unlock()
	if ino, ok := p.floors[id]; ok {
		return dst, ino, nil
	}
	if ino, err := floorIno(dst); err == nil {
		p.floors[id] = ino
		return dst, ino, nil
	}
	ino, err := p.makeFloor(ctx, sub, dst)
	if err != nil {
		return "", 0, err
	}
	p.floors[id] = ino
	return dst, ino, nil
}

// floorIno reads the inode number a made floor keeps (256, the root's,
// for a layer with nothing in it).
func floorIno(dst string) (uint64, error) {
	if ok, err := isSubvolume(dst); err != nil || !ok {
		return 0, fmt.Errorf("no floor at %s", dst)
	}
	var st unix.Stat_t
	switch err := unix.Lstat(filepath.Join(dst, floorName), &st); {
	case err == nil:
		return st.Ino, nil
	case errors.Is(err, unix.ENOENT):
		return btrfsFirstFreeObjectID, nil
	default:
		return 0, err
	}
}

// makeFloor makes dst, the floor of layer subvolume sub: a snapshot of it
// in which the highest-numbered inode is moved to the root as floorName,
// emptied, and everything else is removed.
func (p *Pool) makeFloor(ctx context.Context, sub, dst string) (uint64, error) {
	start := time.Now()
	if err := os.MkdirAll(p.floorsDir(), 0o700); err != nil {
		return 0, err
	}
	tmp := filepath.Join(p.floorsDir(), stagingPrefix+randHex())
	if err := snapCreate(sub, tmp, false); err != nil {
		return 0, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = p.destroySubvolume(tmp)
		}
	}()
	var maxIno uint64
	var maxPath string
	err := filepath.WalkDir(tmp, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		if path != tmp && st.Ino == btrfsFirstFreeObjectID && d.IsDir() {
			return fs.SkipDir // a nested subvolume's root: not this tree's
		}
		if st.Ino > maxIno {
			maxIno, maxPath = st.Ino, path
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("walking %s: %w", sub, err)
	}
	if maxPath != tmp {
		keep := filepath.Join(tmp, floorName)
		if maxPath != keep {
			// A sandbox layer's snapshot holds the keeper of the floor it
			// was made from: lower, and maybe not of the new one's type.
			if err := os.RemoveAll(keep); err != nil {
				return 0, err
			}
			if err := os.Rename(maxPath, keep); err != nil {
				return 0, err
			}
		}
		if err := emptyDir(keep); err != nil {
			return 0, err
		}
	}
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		if e.Name() == floorName {
			continue
		}
		if err := os.RemoveAll(filepath.Join(tmp, e.Name())); err != nil {
			return 0, err
		}
	}
	if err := unix.Setxattr(tmp, floorLayerXattr, []byte(sub), 0); err != nil {
		return 0, fmt.Errorf("recording the floor's layer: %w", err)
	}
	if err := subvolSetReadOnly(tmp, true); err != nil {
		return 0, err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return 0, err
	}
	ok = true
	ino, err := floorIno(dst)
	if err != nil {
		return 0, err
	}
	if ino < maxIno {
		return 0, fmt.Errorf("the floor of %s keeps inode %d, below the layer's highest, %d", sub, ino, maxIno)
	}
	p.log.Info("made the inode floor of a layer", "layer", sub, "inode", ino, "took", time.Since(start).Round(time.Millisecond))
	return ino, nil
}

// emptyDir removes what directory path holds; path may be a file.
func emptyDir(path string) error {
	ents, err := os.ReadDir(path)
	if errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(path, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// removeFloor deletes the floor of the layer subvolume id, which was just
// removed.
func (p *Pool) removeFloor(id uint64) {
	p.floorMu.Lock()
	delete(p.floors, id)
	p.floorMu.Unlock()
	dst := filepath.Join(p.floorsDir(), strconv.FormatUint(id, 10))
	p.dropSpares(dst)
	if err := p.destroySubvolume(dst); err != nil {
		p.log.Warn("removing the inode floor of a removed layer", "floor", dst, "err", err)
	}
}

// destroySubvolume deletes subvolume path (a floor, a spare) and its
// qgroup.
func (p *Pool) destroySubvolume(path string) error {
	fid, idErr := subvolID(path)
	if err := subvolDestroy(path); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if idErr == nil {
		_ = qgroupDestroy(p.root, fid) // see RemoveLayer
	}
	return nil
}

// sweepFloors removes half-made floors, floors whose layer is gone, and
// spare layers.
func (p *Pool) sweepFloors() {
	ents, err := os.ReadDir(p.floorsDir())
	if err != nil {
		return
	}
	for _, e := range ents {
		path := filepath.Join(p.floorsDir(), e.Name())
		id, perr := strconv.ParseUint(e.Name(), 10, 64)
		if perr == nil {
			buf := make([]byte, 4096)
			if n, err := unix.Getxattr(path, floorLayerXattr, buf); err == nil {
				if lid, err := subvolID(string(buf[:n])); err == nil && lid == id {
					continue
				}
			}
		}
		if err := p.destroySubvolume(path); err != nil {
			p.log.Warn("removing a stale inode floor", "floor", path, "err", err)
		}
	}
	// Spares are kept in memory only: any on disk are a past run's.
	spares, _ := os.ReadDir(p.sparesDir())
	for _, e := range spares {
		path := filepath.Join(p.sparesDir(), e.Name())
		if err := p.destroySubvolume(path); err != nil {
			p.log.Warn("removing a past run's spare layer", "path", path, "err", err)
		}
	}
}
