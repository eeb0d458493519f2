package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file speaks the btrfs ioctls directly: the btrfs CLI costs a
// fork+exec (about 5 ms for create + limit), the ioctls well under 1 ms.
// The argument structs mirror include/uapi/linux/btrfs.h; their sizes are
// checked in btrfs_linux_test.go against the kernel's.

const (
	btrfsIoctlMagic   = 0x94
	btrfsPathNameMax  = 4087 // BTRFS_PATH_NAME_MAX
	btrfsInoLookupMax = 4080 // BTRFS_INO_LOOKUP_PATH_MAX

	btrfsFirstFreeObjectID = 256 // inode number of every subvolume's root
	btrfsQuotaTreeObjectID = 8
	btrfsQgroupInfoKey     = 242

	btrfsSubvolRdonly       = 1 << 1 // BTRFS_SUBVOL_RDONLY
	btrfsQgroupLimitMaxRfer = 1 << 0 // BTRFS_QGROUP_LIMIT_MAX_RFER

	btrfsSuperMagic = 0x9123683E
)

// struct btrfs_ioctl_vol_args
type btrfsVolArgs struct {
	Fd   int64
	Name [btrfsPathNameMax + 1]byte
}

// struct btrfs_ioctl_qgroup_limit_args (with struct btrfs_qgroup_limit inline)
type btrfsQgroupLimitArgs struct {
	QgroupID uint64
	Flags    uint64
	MaxRfer  uint64
	MaxExcl  uint64
	RsvRfer  uint64
	RsvExcl  uint64
}

// struct btrfs_ioctl_qgroup_create_args
type btrfsQgroupCreateArgs struct {
	Create   uint64
	QgroupID uint64
}

// struct btrfs_ioctl_ino_lookup_args
type btrfsInoLookupArgs struct {
	TreeID   uint64
	ObjectID uint64
	Name     [btrfsInoLookupMax]byte
}

// struct btrfs_ioctl_search_key
type btrfsSearchKey struct {
	TreeID      uint64
	MinObjectID uint64
	MaxObjectID uint64
	MinOffset   uint64
	MaxOffset   uint64
	MinTransID  uint64
	MaxTransID  uint64
	MinType     uint32
	MaxType     uint32
	NrItems     uint32
	_           uint32
	_           [4]uint64
}

// struct btrfs_ioctl_search_args
type btrfsSearchArgs struct {
	Key btrfsSearchKey
	Buf [4096 - unsafe.Sizeof(btrfsSearchKey{})]byte
}

// btrfsSearchHeaderSize is sizeof(struct btrfs_ioctl_search_header).
const btrfsSearchHeaderSize = 32

func ioc(dir, nr, size uintptr) uintptr {
	return dir<<30 | size<<16 | btrfsIoctlMagic<<8 | nr
}

const (
	iocWrite = 1
	iocRead  = 2
)

var (
	iocSubvolCreate   = ioc(iocWrite, 14, unsafe.Sizeof(btrfsVolArgs{}))
	iocSnapDestroy    = ioc(iocWrite, 15, unsafe.Sizeof(btrfsVolArgs{}))
	iocTreeSearch     = ioc(iocRead|iocWrite, 17, unsafe.Sizeof(btrfsSearchArgs{}))
	iocInoLookup      = ioc(iocRead|iocWrite, 18, unsafe.Sizeof(btrfsInoLookupArgs{}))
	iocSubvolGetflags = ioc(iocRead, 25, 8)
	iocSubvolSetflags = ioc(iocWrite, 26, 8)
	iocQgroupCreate   = ioc(iocWrite, 42, unsafe.Sizeof(btrfsQgroupCreateArgs{}))
	// The kernel declares QGROUP_LIMIT as _IOR although it only reads
	// the argument; the number must match, so it is _IOR here too.
	iocQgroupLimit = ioc(iocRead, 43, unsafe.Sizeof(btrfsQgroupLimitArgs{}))
	iocFsInfo      = ioc(iocRead, 31, unsafe.Sizeof(btrfsFsInfoArgs{}))
)

// struct btrfs_ioctl_fs_info_args: what is used of it is the fsid, which
// names the filesystem's directory in /sys/fs/btrfs.
type btrfsFsInfoArgs struct {
	MaxID      uint64
	NumDevices uint64
	FSID       [16]byte
	_          [1024 - 32]byte
}

// QgroupSysfsDir is the sysfs directory of the quota group of the btrfs
// subvolume at dir (/sys/fs/btrfs/FSID/qgroups/0_ID; Linux 5.9 or later
// has it): its limit and usage, readable by anyone, which the container
// tier's init reads for its statfs view of the root
// (internal/guest/sysview).
func QgroupSysfsDir(dir string) (string, error) {
	fd, err := openDir(dir)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	id, err := subvolIDFd(fd)
	if err != nil {
		return "", err
	}
	qgroups, err := qgroupsSysfsFd(fd)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s/0_%d", qgroups, id), nil
}

// qgroupsSysfsFd is the sysfs directory of the qgroups of the btrfs
// filesystem of fd (/sys/fs/btrfs/FSID/qgroups).
func qgroupsSysfsFd(fd int) (string, error) {
	var a btrfsFsInfoArgs
	if err := ioctlPtr(fd, iocFsInfo, unsafe.Pointer(&a)); err != nil {
		return "", fmt.Errorf("btrfs fs info: %w", err)
	}
	u := a.FSID
	return fmt.Sprintf("/sys/fs/btrfs/%x-%x-%x-%x-%x/qgroups", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]), nil
}

// qgroupsDir is the sysfs directory of the pool's qgroups.
func (p *Pool) qgroupsDir() (string, error) {
	fd, err := openDir(p.root)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	return qgroupsSysfsFd(fd)
}

// qgroupWatch keeps btrfs's quota accounting consistent, which the disk
// limits need: while a pool's qgroups are inconsistent no qgroup limit
// is enforced (a sandbox wrote 100 MiB under disk_mb 32 after a large
// snapshot was removed: TestLimits/disk, once in a full run; reproduced
// on a scratch pool). It makes btrfs account every subvolume drop in
// full (drop_subtree_threshold 8, the most levels a tree has; by
// default, 3 levels on 6.x kernels, dropping a snapshot whose shared
// tree is that deep skips the accounting and marks the qgroups
// inconsistent; full accounting costs the cleaner, in the background,
// not the delete call), and starts a rescan when it finds them
// inconsistent anyway, at Open and then every Options.QgroupCheck.
type qgroupWatch struct {
	dir, root string
	log       *slog.Logger
	// rescanning: a rescan this watch started has not been seen to end.
	rescanning bool
}

// run checks every interval until ctx ends.
func (w *qgroupWatch) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		w.check(cctx)
		cancel()
	}
}

// check sets the threshold where it is not 8 and starts a rescan of
// inconsistent qgroups unless one is under way.
func (w *qgroupWatch) check(ctx context.Context) {
	read := func(name string) string {
		b, _ := os.ReadFile(w.dir + "/" + name)
		return strings.TrimSpace(string(b))
	}
	if read("drop_subtree_threshold") != "8" {
		if err := os.WriteFile(w.dir+"/drop_subtree_threshold", []byte("8"), 0); err != nil {
			w.log.Warn("btrfs qgroups: drop_subtree_threshold could not be set, so removing a large snapshot may stop disk limits until `btrfs quota rescan` (the daemon checks every 30 s and runs one)", "err", err)
		}
	}
	if read("inconsistent") != "1" {
		if w.rescanning {
			w.log.Info("btrfs qgroups are consistent again: disk limits are enforced", "pool", w.root)
			w.rescanning = false
		}
		return
	}
	if !w.rescanning {
		w.log.Warn("btrfs qgroups are inconsistent (disk limits are not enforced until a rescan ends): rescanning", "pool", w.root)
	}
	// A rescan under way answers "in progress"; one that ended with the
	// qgroups still inconsistent is started again.
	out, err := runCmd(ctx, "btrfs", "quota", "rescan", w.root)
	if err != nil && !strings.Contains(out, "in progress") {
		w.log.Warn("btrfs qgroups: starting a rescan", "err", err, "out", strings.TrimSpace(out))
		return
	}
	w.rescanning = true
}

func ioctlPtr(fd int, req uintptr, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

func openDir(path string) (int, error) {
	return unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

func volArgs(name string) (*btrfsVolArgs, error) {
	var a btrfsVolArgs
	if len(name) == 0 || len(name) > btrfsPathNameMax {
		return nil, fmt.Errorf("bad subvolume name %q", name)
	}
	copy(a.Name[:], name)
	return &a, nil
}

// subvolCreate creates the subvolume path (its parent must exist).
func subvolCreate(path string) error {
	dir, name := filepath.Split(filepath.Clean(path))
	fd, err := openDir(dir)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	a, err := volArgs(name)
	if err != nil {
		return err
	}
	if err := ioctlPtr(fd, iocSubvolCreate, unsafe.Pointer(a)); err != nil {
		return &os.PathError{Op: "btrfs subvolume create", Path: path, Err: err}
	}
	return nil
}

// subvolDestroy deletes the subvolume path with everything in it; its
// extents are freed later by the btrfs cleaner thread.
func subvolDestroy(path string) error {
	dir, name := filepath.Split(filepath.Clean(path))
	fd, err := openDir(dir)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	a, err := volArgs(name)
	if err != nil {
		return err
	}
	if err := ioctlPtr(fd, iocSnapDestroy, unsafe.Pointer(a)); err != nil {
		return &os.PathError{Op: "btrfs subvolume delete", Path: path, Err: err}
	}
	return nil
}

// subvolID returns the id (tree id) of the subvolume whose root is path.
func subvolID(path string) (uint64, error) {
	fd, err := openDir(path)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	return subvolIDFd(fd)
}

func subvolIDFd(fd int) (uint64, error) {
	a := btrfsInoLookupArgs{ObjectID: btrfsFirstFreeObjectID}
	if err := ioctlPtr(fd, iocInoLookup, unsafe.Pointer(&a)); err != nil {
		return 0, fmt.Errorf("btrfs ino lookup: %w", err)
	}
	return a.TreeID, nil
}

// isSubvolume reports whether path is the root of a btrfs subvolume.
func isSubvolume(path string) (bool, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return false, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Ino != btrfsFirstFreeObjectID {
		return false, nil
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return false, err
	}
	return uint32(fs.Type) == btrfsSuperMagic, nil
}

// qgroupLimitFd sets the referenced-bytes limit of the subvolume open as fd
// (qgroup 0/<its id>); 0 removes the limit.
func qgroupLimitFd(fd int, maxRfer uint64) error {
	a := btrfsQgroupLimitArgs{} // QgroupID 0: the subvolume of fd
	if maxRfer > 0 {
		a.Flags = btrfsQgroupLimitMaxRfer
		a.MaxRfer = maxRfer
	} else {
		a.Flags = btrfsQgroupLimitMaxRfer
		a.MaxRfer = ^uint64(0) // the kernel's "none"
	}
	if err := ioctlPtr(fd, iocQgroupLimit, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("btrfs qgroup limit: %w", err)
	}
	return nil
}

// qgroupDestroy removes qgroup 0/id. The kernel refuses (EBUSY) while the
// deleted subvolume's extents are still being freed; kernels since 6.x drop
// the qgroup on their own once the cleaner is done.
func qgroupDestroy(fsPath string, id uint64) error {
	fd, err := openDir(fsPath)
	if err != nil {
		return &os.PathError{Op: "open", Path: fsPath, Err: err}
	}
	defer unix.Close(fd)
	a := btrfsQgroupCreateArgs{Create: 0, QgroupID: id}
	if err := ioctlPtr(fd, iocQgroupCreate, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("btrfs qgroup destroy 0/%d: %w", id, err)
	}
	return nil
}

// subvolSetReadOnly marks the subvolume at path read-only (or writable).
func subvolSetReadOnly(path string, ro bool) error {
	fd, err := openDir(path)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var flags uint64
	if err := ioctlPtr(fd, iocSubvolGetflags, unsafe.Pointer(&flags)); err != nil {
		return fmt.Errorf("btrfs subvolume getflags %s: %w", path, err)
	}
	if ro {
		flags |= btrfsSubvolRdonly
	} else {
		flags &^= btrfsSubvolRdonly
	}
	if err := ioctlPtr(fd, iocSubvolSetflags, unsafe.Pointer(&flags)); err != nil {
		return fmt.Errorf("btrfs subvolume setflags %s: %w", path, err)
	}
	return nil
}

// subvolReadOnly reports whether the subvolume at path is read-only.
func subvolReadOnly(path string) (bool, error) {
	fd, err := openDir(path)
	if err != nil {
		return false, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var flags uint64
	if err := ioctlPtr(fd, iocSubvolGetflags, unsafe.Pointer(&flags)); err != nil {
		return false, fmt.Errorf("btrfs subvolume getflags %s: %w", path, err)
	}
	return flags&btrfsSubvolRdonly != 0, nil
}

// qgroupInfo is the accounting of one qgroup, as last committed.
type qgroupInfo struct {
	Referenced uint64
	Exclusive  uint64
}

var errNoQgroup = errors.New("no such qgroup")

// qgroupUsage reads qgroup 0/id's info item from the quota tree.
func qgroupUsage(fsPath string, id uint64) (qgroupInfo, error) {
	fd, err := openDir(fsPath)
	if err != nil {
		return qgroupInfo{}, &os.PathError{Op: "open", Path: fsPath, Err: err}
	}
	defer unix.Close(fd)
	var a btrfsSearchArgs
	a.Key = btrfsSearchKey{
		TreeID:     btrfsQuotaTreeObjectID,
		MinOffset:  id,
		MaxOffset:  id,
		MaxTransID: ^uint64(0),
		MinType:    btrfsQgroupInfoKey,
		MaxType:    btrfsQgroupInfoKey,
		NrItems:    1,
	}
	if err := ioctlPtr(fd, iocTreeSearch, unsafe.Pointer(&a)); err != nil {
		return qgroupInfo{}, fmt.Errorf("btrfs tree search: %w", err)
	}
	if a.Key.NrItems == 0 {
		return qgroupInfo{}, errNoQgroup
	}
	le := binary.LittleEndian
	h := a.Buf[:btrfsSearchHeaderSize]
	typ := le.Uint32(h[24:28])
	off := le.Uint64(h[16:24])
	n := le.Uint32(h[28:32])
	if typ != btrfsQgroupInfoKey || off != id || n < 40 {
		return qgroupInfo{}, errNoQgroup
	}
	// struct btrfs_qgroup_info_item: generation, rfer, rfer_cmpr, excl,
	// excl_cmpr (little endian on disk).
	item := a.Buf[btrfsSearchHeaderSize : btrfsSearchHeaderSize+40]
	return qgroupInfo{Referenced: le.Uint64(item[8:16]), Exclusive: le.Uint64(item[24:32])}, nil
}
