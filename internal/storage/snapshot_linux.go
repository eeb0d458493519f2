package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/errdefs"
)

// Snapshots are read-only btrfs snapshots of a sandbox's layer subvolume,
// under storage/snapshots/<id>/ (upper/ and work/ as they were). A
// snapshot's upper/ is used as an overlay lower by sandboxes made from it;
// btrfs shares every extent with the source, so taking one costs a
// transaction commit, not a copy, whatever the size of the template or of
// the layer.

// btrfsSubvolNameMax is BTRFS_SUBVOL_NAME_MAX.
const btrfsSubvolNameMax = 4039

// struct btrfs_ioctl_vol_args_v2
type btrfsVolArgsV2 struct {
	Fd      int64
	TransID uint64
	Flags   uint64
	_       [4]uint64 // size + qgroup_inherit, unused
	Name    [btrfsSubvolNameMax + 1]byte
}

var iocSnapCreateV2 = ioc(iocWrite, 23, unsafe.Sizeof(btrfsVolArgsV2{}))

// snapCreate makes dst a snapshot of the subvolume src; readOnly makes it
// immutable.
func snapCreate(src, dst string, readOnly bool) error {
	sfd, err := openDir(src)
	if err != nil {
		return &os.PathError{Op: "open", Path: src, Err: err}
	}
	defer unix.Close(sfd)
	dir, name := filepath.Split(filepath.Clean(dst))
	dfd, err := openDir(dir)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	if len(name) == 0 || len(name) > btrfsSubvolNameMax {
		return fmt.Errorf("bad snapshot name %q", name)
	}
	a := btrfsVolArgsV2{Fd: int64(sfd)}
	if readOnly {
		a.Flags = btrfsSubvolRdonly
	}
	copy(a.Name[:], name)
	if err := ioctlPtr(dfd, iocSnapCreateV2, unsafe.Pointer(&a)); err != nil {
		return &os.PathError{Op: "btrfs subvolume snapshot", Path: dst, Err: err}
	}
	return nil
}

func (p *Pool) snapshotsDir() string         { return filepath.Join(p.root, "snapshots") }
func (p *Pool) snapshotDir(id string) string { return filepath.Join(p.snapshotsDir(), id) }

// SnapshotUpper returns the host path of snapshot id's upper directory,
// the overlay lower that sandboxes made from it stack on.
func (p *Pool) SnapshotUpper(id string) string { return filepath.Join(p.snapshotDir(id), "upper") }

// SnapshotLayer captures sandbox id's writable layer as the read-only
// snapshot snapID and returns its size on disk as btrfs accounts it (the
// bytes it references). The caller freezes the sandbox's processes first;
// the layer's dirty data is flushed as part of the snapshot.
func (p *Pool) SnapshotLayer(ctx context.Context, id, snapID string) (int64, error) {
	if err := validLayerID(id); err != nil {
		return 0, err
	}
	if err := validLayerID(snapID); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(p.snapshotsDir(), 0o711); err != nil {
		return 0, fmt.Errorf("creating snapshots dir: %w", err)
	}
	_ = os.Chmod(p.snapshotsDir(), 0o711)
	src := p.layerDir(id)
	// Flush the layer's data so that the snapshot's commit has nothing
	// left to write for it (btrfs flushes delalloc of the source anyway;
	// syncfs keeps that cost out of the frozen window's tail).
	if fd, err := openDir(src); err == nil {
		_ = unix.Syncfs(fd)
		unix.Close(fd)
	} else if errors.Is(err, unix.ENOENT) {
		return 0, errdefs.NotFound("sandbox %s has no disk layer", id)
	}
	dst := p.snapshotDir(snapID)
	if err := snapCreate(src, dst, true); err != nil {
		switch {
		case errors.Is(err, unix.EEXIST):
			return 0, errdefs.New(errdefs.ErrAlreadyExists, "snapshot %s already exists on disk", snapID)
		case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
			return 0, errdefs.Exhausted("the storage pool is full: %v", err)
		case errors.Is(err, unix.ENOTTY):
			if out, cerr := runCmd(ctx, "btrfs", "subvolume", "snapshot", "-r", src, dst); cerr != nil {
				return 0, fmt.Errorf("snapshotting layer of sandbox %s: %w: %s", id, cerr, out)
			}
		default:
			return 0, fmt.Errorf("snapshotting layer of sandbox %s: %w", id, err)
		}
	}
	size, _ := p.SnapshotSize(snapID)
	return size, nil
}

// SnapshotSize returns the bytes snapshot id references, as btrfs last
// committed them.
func (p *Pool) SnapshotSize(id string) (int64, error) {
	subID, err := subvolID(p.snapshotDir(id))
	if err != nil {
		return 0, err
	}
	info, err := qgroupUsage(p.root, subID)
	if err != nil {
		return 0, err
	}
	return int64(info.Referenced), nil
}

// RemoveSnapshot deletes snapshot id. Removing one that does not exist is
// not an error.
func (p *Pool) RemoveSnapshot(ctx context.Context, id string) error {
	if err := validLayerID(id); err != nil {
		return err
	}
	dir := p.snapshotDir(id)
	isSub, err := isSubvolume(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing snapshot %s: %w", id, err)
	}
	if !isSub {
		return os.RemoveAll(dir)
	}
	subID, idErr := subvolID(dir)
	if err := subvolDestroy(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		if errors.Is(err, unix.ENOTTY) {
			if out, cerr := runCmd(ctx, "btrfs", "subvolume", "delete", dir); cerr != nil {
				return fmt.Errorf("removing snapshot %s: %w: %s", id, cerr, out)
			}
		} else {
			return fmt.Errorf("removing snapshot %s: %w", id, err)
		}
	}
	if idErr == nil {
		if err := qgroupDestroy(p.root, subID); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EBUSY) {
			p.log.Warn("removing qgroup of deleted snapshot", "snapshot", id, "err", err)
		}
		p.removeFloor(subID)
	}
	return nil
}

// ListSnapshots returns the ids of the snapshots on disk, sorted.
func (p *Pool) ListSnapshots() ([]string, error) {
	ents, err := os.ReadDir(p.snapshotsDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing snapshots: %w", err)
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() && layerIDRe.MatchString(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// SnapshotReadOnly reports whether snapshot id exists as a read-only
// subvolume: whole, as SnapshotLayer leaves it.
func (p *Pool) SnapshotReadOnly(id string) bool {
	ro, err := subvolReadOnly(p.snapshotDir(id))
	return err == nil && ro
}
