package storage

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/agentbox/agentbox/errdefs"
	"golang.org/x/sys/unix"
)

// Limits of one image import (all layers together). Variables so tests
// can lower them.
var (
	maxImageBytes   int64 = 64 << 30 // uncompressed file data
	maxImageEntries int64 = 2_000_000
)

const (
	whiteoutPrefix = ".wh."
	opaqueWhiteout = ".wh..wh..opq"
)

// layerApplier applies OCI image layers (uncompressed tar streams) onto a
// root filesystem directory, in order, as the OCI image spec's changeset
// rules say: later entries replace earlier ones, ".wh.NAME" deletes NAME of
// the layers below, ".wh..wh..opq" empties its directory of what the layers
// below put there.
//
// It is written against hostile archives. Every path is resolved by
// openat2(RESOLVE_IN_ROOT) from the rootfs directory fd, so neither "..",
// absolute names nor symlinks (in the tree or in the archive) reach outside
// it; the last component is never followed (an existing entry is removed
// and the new one created with O_EXCL|O_NOFOLLOW). Hard links must name an
// entry inside the tree (and the pool is its own filesystem). Device nodes,
// fifos and sockets are dropped. Owners are shifted by uidBase; an owner
// at or past uidCount fails the import. Mode bits, setuid/setgid
// included, are kept as the image had them: they only mean anything
// inside the sandbox's own uid range. Total size and entry count are
// limited (maxImageBytes, maxImageEntries); a sparse or compressed bomb
// hits the size limit before it is written.
type layerApplier struct {
	ctx      context.Context
	root     int // O_PATH fd of the rootfs directory
	uidBase  int
	uidCount int
	buf      []byte
	size     int64
	entries  int64
	// limit caps size: maxImageBytes, or less when the owner's quota
	// leaves less (quota).
	limit   int64
	quota   bool
	skipped int
	// per layer: paths this layer made (whiteouts leave them alone) and
	// directory times to set once the layer's children are written.
	made     map[string]bool
	dirTimes []dirTime
	// overlay: the layer is an overlay upper directory in overlay's own
	// format (a snapshot's, layertar_linux.go), not an OCI layer: ".wh."
	// names are plain names, a 0/0 character device is a whiteout and
	// is made as one, and user.overlay.opaque is kept.
	overlay bool
}

type dirTime struct {
	name string
	ts   []unix.Timespec
}

func newLayerApplier(ctx context.Context, rootfs string, uidBase, uidCount int) (*layerApplier, error) {
	fd, err := unix.Open(rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: rootfs, Err: err}
	}
	a := &layerApplier{ctx: ctx, root: fd, uidBase: uidBase, uidCount: uidCount, buf: make([]byte, 1<<20), limit: maxImageBytes}
	if n := MaxBytesFrom(ctx); n > 0 && n < a.limit {
		a.limit, a.quota = n, true
	}
	return a, nil
}

func (a *layerApplier) Close() error { return unix.Close(a.root) }

// cleanName turns an archive path into a path relative to the rootfs, or
// reports that it escapes. "./a", "/a" and "a/" all name "a"; "" or "."
// name the root itself.
func cleanName(name string) (string, error) {
	if strings.ContainsRune(name, 0) || len(name) > 4096 {
		return "", errdefs.Invalid("entry name %q is not a valid path", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", errdefs.Invalid("entry %q has a '..' component (it would escape the root filesystem)", name)
		}
	}
	c := path.Clean("/" + name)
	return strings.TrimPrefix(c, "/"), nil
}

// apply reads one layer's tar stream and applies it. what names the layer
// in errors.
func (a *layerApplier) apply(r io.Reader, what string) error {
	a.made = map[string]bool{}
	a.dirTimes = a.dirTimes[:0]
	tr := tar.NewReader(r)
	for {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return errdefs.Invalid("%s: reading the tar stream: %v (the archive is corrupt or truncated)", what, err)
		}
		a.entries++
		if a.entries > maxImageEntries {
			return errdefs.Invalid("%s: the image has more than %d entries, the import limit", what, maxImageEntries)
		}
		if err := a.entry(tr, hdr); err != nil {
			return fmt.Errorf("%s: entry %q: %w", what, hdr.Name, err)
		}
	}
	// Children are written: now directory times stick (deepest first).
	for i := len(a.dirTimes) - 1; i >= 0; i-- {
		d := a.dirTimes[i]
		_ = unix.UtimesNanoAt(a.root, d.name, d.ts, unix.AT_SYMLINK_NOFOLLOW)
	}
	return nil
}

// openParent opens the directory that will hold name, resolved inside the
// rootfs, and returns it with name's last component.
func (a *layerApplier) openParent(name string) (int, string, error) {
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	fd, err := unix.Openat2(a.root, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
			return -1, "", fmt.Errorf("%w: opening parent directory %q: %w (a layer must create a directory before its entries)", errdefs.ErrInvalidArgument, dir, err)
		}
		return -1, "", fmt.Errorf("opening parent directory %q: %w", dir, err)
	}
	return fd, base, nil
}

func (a *layerApplier) entry(tr *tar.Reader, hdr *tar.Header) error {
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	base := path.Base(name)
	if name == "" {
		// The root itself: keep ours, owned by the sandbox's root.
		return nil
	}
	if strings.HasPrefix(base, whiteoutPrefix) && !a.overlay {
		return a.whiteout(name, base)
	}
	switch hdr.Typeflag {
	case tar.TypeChar:
		if !a.overlay || hdr.Devmajor != 0 || hdr.Devminor != 0 {
			a.skipped++ // the guest provides /dev
			return nil
		}
	case tar.TypeBlock, tar.TypeFifo:
		a.skipped++ // the guest provides /dev
		return nil
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink:
	default:
		a.skipped++
		return nil
	}
	if hdr.Uid < 0 || hdr.Gid < 0 || hdr.Uid >= a.uidCount || hdr.Gid >= a.uidCount {
		return errdefs.Invalid("owned by %d:%d, outside the sandbox uid range 0-%d", hdr.Uid, hdr.Gid, a.uidCount-1)
	}
	uid, gid := a.uidBase+hdr.Uid, a.uidBase+hdr.Gid
	mode := uint32(hdr.Mode) & 0o7777

	pfd, base, err := a.openParent(name)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	ts := []unix.Timespec{unix.NsecToTimespec(hdr.AccessTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	if hdr.AccessTime.IsZero() {
		ts[0] = ts[1]
	}

	var existing unix.Stat_t
	exists := unix.Fstatat(pfd, base, &existing, unix.AT_SYMLINK_NOFOLLOW) == nil
	if hdr.Typeflag == tar.TypeDir && exists && existing.Mode&unix.S_IFMT == unix.S_IFDIR {
		// Merge into the directory the layers below made.
	} else if exists {
		if err := removeAt(pfd, base); err != nil {
			return err
		}
	}
	a.made[name] = true

	switch hdr.Typeflag {
	case tar.TypeDir:
		if !exists || existing.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
				return fmt.Errorf("mkdir: %w", err)
			}
		}
		// chown before chmod: chown clears setuid and setgid bits.
		if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
		if err := unix.Fchmodat(pfd, base, mode, 0); err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
		if err := a.setXattrsAt(pfd, base, hdr); err != nil {
			return err
		}
		a.dirTimes = append(a.dirTimes, dirTime{name: name, ts: ts})
		return nil
	case tar.TypeChar: // an overlay whiteout (checked above)
		if err := unix.Mknodat(pfd, base, unix.S_IFCHR|(mode&0o777), 0); err != nil {
			return fmt.Errorf("mknod whiteout: %w", err)
		}
		if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	case tar.TypeReg:
		return a.regular(tr, hdr, pfd, base, uid, gid, mode, ts)
	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.ContainsRune(hdr.Linkname, 0) {
			return errdefs.Invalid("symlink has an empty or invalid target")
		}
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return fmt.Errorf("symlink: %w", err)
		}
		if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
		a.size += int64(len(hdr.Linkname))
	case tar.TypeLink:
		target, err := cleanName(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hard link target: %w", err)
		}
		if target == "" {
			return errdefs.Invalid("hard link to the root directory")
		}
		tfd, tbase, err := a.openParent(target)
		if err != nil {
			return fmt.Errorf("hard link target %q: %w", hdr.Linkname, err)
		}
		defer unix.Close(tfd)
		var tst unix.Stat_t
		if err := unix.Fstatat(tfd, tbase, &tst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return errdefs.Invalid("hard link target %q is not in the image: %v", hdr.Linkname, err)
		}
		if tst.Mode&unix.S_IFMT == unix.S_IFDIR {
			return errdefs.Invalid("hard link target %q is a directory", hdr.Linkname)
		}
		// flags 0: a symlink target is linked itself, never followed.
		if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
			return fmt.Errorf("link to %q: %w", hdr.Linkname, err)
		}
		return nil // times and owner belong to the target inode
	}
	if err := unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("utimes: %w", err)
	}
	return nil
}

func (a *layerApplier) regular(tr *tar.Reader, hdr *tar.Header, pfd int, base string, uid, gid int, mode uint32, ts []unix.Timespec) error {
	if hdr.Size < 0 || hdr.Size > a.limit-a.size {
		if a.quota {
			return errdefs.Exhausted("file of %d bytes takes the image past the %d bytes the tenant's disk_mb quota leaves for templates; remove templates or sandboxes, or ask an admin to raise the quota", hdr.Size, a.limit)
		}
		return errdefs.Invalid("file of %d bytes takes the image past the import limit of %d bytes", hdr.Size, a.limit)
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	f := os.NewFile(uintptr(fd), base)
	defer f.Close()
	n, err := io.CopyBuffer(f, io.LimitReader(tr, hdr.Size), a.buf)
	if err != nil {
		return fmt.Errorf("writing: %w", err)
	}
	if n != hdr.Size {
		return errdefs.Invalid("file data is truncated (%d of %d bytes)", n, hdr.Size)
	}
	a.size += n
	if err := f.Chown(uid, gid); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	if err := a.setXattrs(fd, hdr); err != nil {
		return err
	}
	if err := unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("utimes: %w", err)
	}
	return f.Close()
}

// whiteout applies ".wh.NAME" (delete NAME) or ".wh..wh..opq" (empty the
// directory) to what the layers below made; what this layer made stays.
func (a *layerApplier) whiteout(name, base string) error {
	dir := path.Dir(name)
	if dir == "." {
		dir = ""
	}
	if base == opaqueWhiteout {
		fd, err := a.openDir(dir)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		names, err := readDirNames(fd)
		if err != nil {
			return err
		}
		for _, n := range names {
			if a.made[path.Join(dir, n)] {
				continue
			}
			if err := removeAt(fd, n); err != nil {
				return err
			}
		}
		return nil
	}
	target := path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix))
	if a.made[target] || strings.TrimPrefix(base, whiteoutPrefix) == "" {
		return nil
	}
	pfd, tbase, err := a.openParent(target)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	err = removeAt(pfd, tbase)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// openDir opens the directory name inside the rootfs for reading.
func (a *layerApplier) openDir(name string) (int, error) {
	if name == "" {
		name = "."
	}
	return unix.Openat2(a.root, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
}

// removeAt deletes name in directory dfd, recursively, never following a
// symlink.
func removeAt(dfd int, name string) error {
	err := unix.Unlinkat(dfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("removing %s: %w", name, err)
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("removing %s: %w", name, err)
	}
	names, err := readDirNames(fd)
	if err == nil {
		for _, n := range names {
			if err = removeAt(fd, n); err != nil {
				break
			}
		}
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing %s: %w", name, err)
	}
	return nil
}

// readDirNames lists directory fd (not . and ..) without closing it.
func readDirNames(fd int) ([]string, error) {
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), ".")
	defer f.Close()
	return f.Readdirnames(-1)
}

// keepXattr reports whether the xattr name from a layer is applied: user.*
// ones, but not overlay's (user.overlay.*), which would change how the
// layers stack, except user.overlay.opaque in an overlay-format layer.
func (a *layerApplier) keepXattr(name string) bool {
	if !strings.HasPrefix(name, "user.") || len(name) > 255 {
		return false
	}
	if strings.HasPrefix(name, "user.overlay.") {
		return a.overlay && name == overlayOpaque
	}
	return true
}

// setXattrs applies hdr's kept extended attributes (PAX SCHILY.xattr.*)
// to the open file fd.
func (a *layerApplier) setXattrs(fd int, hdr *tar.Header) error {
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, xattrPAX)
		if !ok || !a.keepXattr(name) {
			continue
		}
		if err := unix.Fsetxattr(fd, name, []byte(v), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
				continue
			}
			return fmt.Errorf("setting xattr %s: %w", name, err)
		}
	}
	return nil
}

// setXattrsAt is setXattrs for directory base in pfd.
func (a *layerApplier) setXattrsAt(pfd int, base string, hdr *tar.Header) error {
	any := false
	for k := range hdr.PAXRecords {
		if name, ok := strings.CutPrefix(k, xattrPAX); ok && a.keepXattr(name) {
			any = true
		}
	}
	if !any {
		return nil
	}
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening directory for its xattrs: %w", err)
	}
	defer unix.Close(fd)
	return a.setXattrs(fd, hdr)
}
