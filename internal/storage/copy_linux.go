package storage

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/errdefs"
	"golang.org/x/sys/unix"
)

// treeCopier copies a root filesystem directory into a template, shifting
// ownership into the sandboxes' host uid range.
//
// Kept: regular files, directories, symlinks, hard links (as hard links),
// permission bits including setuid/setgid/sticky, mtimes and atimes, and
// user.* and security.* extended attributes where the destination accepts
// them. Dropped: device nodes, fifos and sockets (the guest provides /dev;
// a rootfs has no use for the others), security.capability (file
// capabilities written by host root are not honoured inside a user
// namespace anyway), trusted.* and system.* (POSIX ACLs name host uids that
// would need shifting too).
type treeCopier struct {
	ctx      context.Context
	uidBase  int
	uidCount int
	// links maps a source inode with several links to its first copy.
	links   map[inodeKey]string
	buf     []byte
	size    int64
	skipped int
	sameFS  bool
}

type inodeKey struct{ dev, ino uint64 }

func newTreeCopier(ctx context.Context, uidBase, uidCount int) *treeCopier {
	return &treeCopier{ctx: ctx, uidBase: uidBase, uidCount: uidCount, links: map[inodeKey]string{}, buf: make([]byte, 1<<20)}
}

// copyTree copies the directory src to dst, which must not exist yet.
func (c *treeCopier) copyTree(src, dst string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: src, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return errdefs.Invalid("rootfs %s is not a directory", src)
	}
	var sfs, dfs unix.Statfs_t
	if unix.Statfs(src, &sfs) == nil && unix.Statfs(filepath.Dir(dst), &dfs) == nil {
		c.sameFS = sfs.Fsid == dfs.Fsid
	}
	return c.copyEntry(src, dst, &st)
}

func (c *treeCopier) shift(path string, st *unix.Stat_t) (uid, gid int, err error) {
	if int64(st.Uid) >= int64(c.uidCount) || int64(st.Gid) >= int64(c.uidCount) {
		return 0, 0, errdefs.Invalid("%s is owned by %d:%d, outside the sandbox uid range 0-%d: chown it inside the rootfs first", path, st.Uid, st.Gid, c.uidCount-1)
	}
	return c.uidBase + int(st.Uid), c.uidBase + int(st.Gid), nil
}

func (c *treeCopier) copyEntry(src, dst string, st *unix.Stat_t) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	uid, gid, err := c.shift(src, st)
	if err != nil {
		return err
	}
	mode := uint32(st.Mode) & 0o7777
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if err := unix.Mkdir(dst, 0o700); err != nil {
			return &os.PathError{Op: "mkdir", Path: dst, Err: err}
		}
		ents, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range ents {
			var cst unix.Stat_t
			sp := filepath.Join(src, e.Name())
			if err := unix.Lstat(sp, &cst); err != nil {
				return &os.PathError{Op: "lstat", Path: sp, Err: err}
			}
			if err := c.copyEntry(sp, filepath.Join(dst, e.Name()), &cst); err != nil {
				return err
			}
		}
		// chown before chmod: chown clears setuid and setgid bits.
		if err := unix.Lchown(dst, uid, gid); err != nil {
			return &os.PathError{Op: "chown", Path: dst, Err: err}
		}
		if err := unix.Chmod(dst, mode); err != nil {
			return &os.PathError{Op: "chmod", Path: dst, Err: err}
		}
		c.copyXattrs(src, dst)
	case unix.S_IFREG:
		key := inodeKey{uint64(st.Dev), st.Ino}
		if st.Nlink > 1 {
			if first, ok := c.links[key]; ok {
				if err := unix.Link(first, dst); err != nil {
					return &os.PathError{Op: "link", Path: dst, Err: err}
				}
				return nil
			}
		}
		if err := c.copyFile(src, dst, st, uid, gid, mode); err != nil {
			return err
		}
		c.copyXattrs(src, dst)
		if st.Nlink > 1 {
			c.links[key] = dst
		}
		c.size += st.Size
	case unix.S_IFLNK:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := unix.Symlink(target, dst); err != nil {
			return &os.PathError{Op: "symlink", Path: dst, Err: err}
		}
		if err := unix.Lchown(dst, uid, gid); err != nil {
			return &os.PathError{Op: "chown", Path: dst, Err: err}
		}
		c.size += int64(len(target))
	default:
		// Devices, fifos, sockets.
		c.skipped++
		return nil
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "utimes", Path: dst, Err: err}
	}
	return nil
}

func (c *treeCopier) copyFile(src, dst string, st *unix.Stat_t, uid, gid int, mode uint32) error {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	cloned := false
	if c.sameFS && st.Size > 0 {
		// A reflink shares the extents: no data is copied.
		cloned = unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) == nil
	}
	if !cloned && st.Size > 0 {
		// *os.File's ReadFrom uses copy_file_range where it can.
		if _, err := io.CopyBuffer(out, in, c.buf); err != nil {
			return fmt.Errorf("copying %s: %w", src, err)
		}
	}
	if err := out.Chown(uid, gid); err != nil {
		return err
	}
	if err := unix.Fchmod(int(out.Fd()), mode); err != nil {
		return &os.PathError{Op: "chmod", Path: dst, Err: err}
	}
	return out.Close()
}

// copyXattrs copies the extended attributes that make sense in a template,
// best effort (see treeCopier).
func (c *treeCopier) copyXattrs(src, dst string) {
	n, err := unix.Llistxattr(src, nil)
	if err != nil || n <= 0 {
		return
	}
	list := make([]byte, n)
	n, err = unix.Llistxattr(src, list)
	if err != nil {
		return
	}
	for _, name := range strings.Split(string(list[:n]), "\x00") {
		if name == "" || name == "security.capability" ||
			!(strings.HasPrefix(name, "user.") || strings.HasPrefix(name, "security.")) {
			continue
		}
		sz, err := unix.Lgetxattr(src, name, nil)
		if err != nil || sz < 0 {
			continue
		}
		val := make([]byte, sz)
		sz, err = unix.Lgetxattr(src, name, val)
		if err != nil {
			continue
		}
		// Best effort: some filesystems or names refuse (EOPNOTSUPP, EPERM).
		_ = unix.Lsetxattr(dst, name, val[:sz], 0)
	}
}
