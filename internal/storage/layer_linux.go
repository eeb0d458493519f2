package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"

	"github.com/agentbox/agentbox/errdefs"
	"golang.org/x/sys/unix"
)

var layerIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

func validLayerID(id string) error {
	if !layerIDRe.MatchString(id) {
		return errdefs.Invalid("sandbox id %q is not valid: use 1-128 letters, digits, '.', '_' or '-', not starting with a symbol", id)
	}
	return nil
}

func (p *Pool) layerDir(id string) string { return filepath.Join(p.sandboxesDir(), id) }

// CreateLayer makes sandbox id's private writable layer over the overlay
// lower dirs lowers: a subvolume with a hard limit of diskMB MiB on the
// bytes it references (writes past it fail with EDQUOT), holding upper/
// and work/ for overlayfs, owned by the sandbox's root (UIDBase), whose
// inodes are numbered above every inode of lowers (inofloor_linux.go). It
// returns their host paths.
func (p *Pool) CreateLayer(ctx context.Context, id string, diskMB int64, lowers []string) (upper, work string, err error) {
	if err := validLayerID(id); err != nil {
		return "", "", err
	}
	if diskMB < 1 || diskMB > 1<<30 {
		return "", "", errdefs.Invalid("disk_mb must be between 1 and %d, got %d", int64(1)<<30, diskMB)
	}
	dir := p.layerDir(id)
	floor, err := p.floorFor(ctx, lowers)
	if err != nil {
		return "", "", fmt.Errorf("creating layer for sandbox %s: %w", id, err)
	}
	create := func() error { return subvolCreate(dir) }
	if floor != "" {
		create = func() error { return p.newLayerFrom(floor, dir) }
	}
	if err := create(); err != nil {
		switch {
		case errors.Is(err, unix.EEXIST):
			return "", "", fmt.Errorf("creating layer for sandbox %s: %w", id, errdefs.New(errdefs.ErrAlreadyExists, "a disk layer for sandbox %s already exists", id))
		case errors.Is(err, unix.ENOTTY):
			if out, cerr := runCmd(ctx, "btrfs", "subvolume", "create", dir); cerr != nil {
				return "", "", fmt.Errorf("creating layer for sandbox %s: %w: %s", id, cerr, out)
			}
		case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
			return "", "", fmt.Errorf("creating layer for sandbox %s: %w", id, errdefs.Exhausted("the storage pool is full: %v", err))
		default:
			return "", "", fmt.Errorf("creating layer for sandbox %s: %w", id, err)
		}
	}
	ok := false
	defer func() {
		if !ok {
			_ = p.RemoveLayer(context.WithoutCancel(ctx), id)
		}
	}()

	fd, err := openDir(dir)
	if err != nil {
		return "", "", fmt.Errorf("opening layer for sandbox %s: %w", id, err)
	}
	defer unix.Close(fd)
	limit := uint64(diskMB) << 20
	if err := qgroupLimitFd(fd, limit); err != nil {
		if !errors.Is(err, unix.ENOTTY) {
			return "", "", fmt.Errorf("limiting disk of sandbox %s: %w", id, err)
		}
		if out, cerr := runCmd(ctx, "btrfs", "qgroup", "limit", strconv.FormatUint(limit, 10), dir); cerr != nil {
			return "", "", fmt.Errorf("limiting disk of sandbox %s: %w: %s", id, cerr, out)
		}
	}
	for _, name := range []string{"upper", "work"} {
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			return "", "", fmt.Errorf("creating %s dir of sandbox %s: %w", name, id, err)
		}
		if err := unix.Fchmodat(fd, name, 0o755, 0); err != nil {
			return "", "", fmt.Errorf("chmod %s dir of sandbox %s: %w", name, id, err)
		}
		if err := unix.Fchownat(fd, name, p.uidBase, p.uidBase, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return "", "", fmt.Errorf("chown %s dir of sandbox %s: %w", name, id, err)
		}
	}
	ok = true
	return filepath.Join(dir, "upper"), filepath.Join(dir, "work"), nil
}

// RemoveLayer deletes sandbox id's layer and its qgroup. Removing a layer
// that does not exist is not an error. The layer must no longer be mounted.
func (p *Pool) RemoveLayer(ctx context.Context, id string) error {
	if err := validLayerID(id); err != nil {
		return err
	}
	dir := p.layerDir(id)
	isSub, err := isSubvolume(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing layer of sandbox %s: %w", id, err)
	}
	if !isSub {
		// Not ours to have made this way, but leave nothing behind.
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("removing layer of sandbox %s: %w", id, err)
		}
		return nil
	}
	subID, idErr := subvolID(dir)
	if err := subvolDestroy(dir); err != nil {
		switch {
		case errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.ENOTTY):
			if out, cerr := runCmd(ctx, "btrfs", "subvolume", "delete", dir); cerr != nil {
				return fmt.Errorf("removing layer of sandbox %s: %w: %s", id, cerr, out)
			}
		case errors.Is(err, unix.EBUSY):
			return fmt.Errorf("removing layer of sandbox %s: %w", id, errdefs.Precondition("the layer of sandbox %s is still in use (mounted): stop the sandbox first", id))
		default:
			return fmt.Errorf("removing layer of sandbox %s: %w", id, err)
		}
	}
	if idErr == nil {
		// EBUSY here means the cleaner still frees the subvolume's extents;
		// the kernel (6.x) drops the qgroup when it is done, and Open
		// sweeps any that older kernels leave.
		if err := qgroupDestroy(p.root, subID); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EBUSY) {
			p.log.Warn("removing qgroup of deleted layer", "sandbox", id, "err", err)
		}
	}
	return nil
}

// ListLayers returns the ids of the sandboxes that have a layer, sorted.
func (p *Pool) ListLayers() ([]string, error) {
	ents, err := os.ReadDir(p.sandboxesDir())
	if err != nil {
		return nil, fmt.Errorf("listing layers: %w", err)
	}
	ids := make([]string, 0, len(ents))
	for _, e := range ents {
		if e.IsDir() && layerIDRe.MatchString(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// LayerPaths returns the upper and work dirs of sandbox id's layer, or
// ErrNotFound.
func (p *Pool) LayerPaths(id string) (upper, work string, err error) {
	if err := validLayerID(id); err != nil {
		return "", "", err
	}
	dir := p.layerDir(id)
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", "", errdefs.NotFound("sandbox %s has no disk layer", id)
		}
		return "", "", err
	}
	return filepath.Join(dir, "upper"), filepath.Join(dir, "work"), nil
}

// LayerUsage returns the bytes sandbox id's layer references, as of the
// last btrfs transaction commit (at most a few seconds old).
func (p *Pool) LayerUsage(id string) (int64, error) {
	if err := validLayerID(id); err != nil {
		return 0, err
	}
	subID, err := subvolID(p.layerDir(id))
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, errdefs.NotFound("sandbox %s has no disk layer", id)
		}
		return 0, fmt.Errorf("layer usage of sandbox %s: %w", id, err)
	}
	info, err := qgroupUsage(p.root, subID)
	if err != nil {
		return 0, fmt.Errorf("layer usage of sandbox %s: %w", id, err)
	}
	return int64(info.Referenced), nil
}
