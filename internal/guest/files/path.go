package files

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/errdefs"
)

// Limits on paths, as Linux has them.
const (
	maxPathLen = 4096
	maxNameLen = 255
)

// ValidatePath checks a request path: absolute, clean (no "." or ".."
// components, no repeated or trailing slashes), no NUL byte, each component
// at most 255 bytes and the whole at most 4096. It returns an
// invalid-argument error saying what to fix.
func ValidatePath(p string) error {
	switch {
	case p == "":
		return errdefs.Invalid("path is required; pass an absolute path such as /home/user/file.txt")
	case strings.IndexByte(p, 0) >= 0:
		return errdefs.Invalid("path %q contains a NUL byte", p)
	case len(p) > maxPathLen:
		return errdefs.Invalid("path is %d bytes long; the limit is %d", len(p), maxPathLen)
	case p[0] != '/':
		return errdefs.Invalid("path %q is not absolute; paths start with /", p)
	case path.Clean(p) != p:
		return errdefs.Invalid("path %q is not clean (no ., .., // or trailing /); use %q", p, path.Clean(p))
	}
	for _, c := range strings.Split(p[1:], "/") {
		if len(c) > maxNameLen {
			return errdefs.Invalid("path component %.40q... is %d bytes long; the limit is %d", c, len(c), maxNameLen)
		}
	}
	return nil
}

// rel turns a validated absolute path into one relative to the root.
func rel(p string) string {
	if p == "/" {
		return "."
	}
	return p[1:]
}

// fsRoot is the directory every path is resolved in.
type fsRoot struct {
	fd   int
	path string
}

func openRoot(root string) (*fsRoot, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: opening root %s: %v", errdefs.ErrUnavailable, root, err)
	}
	return &fsRoot{fd: fd, path: root}, nil
}

// inRoot is how every request path is resolved.
const inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// beneath is how archive entries are resolved relative to the target
// directory: symlinks may not leave it, magic links are refused.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// openat2 wraps unix.Openat2, retrying EAGAIN (a concurrent rename or mount
// raced the scoped resolution) and EINTR.
func openat2(dirfd int, name string, flags uint64, mode uint32, resolve uint64) (int, error) {
	how := &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: uint64(mode), Resolve: resolve}
	for range 16 {
		fd, err := unix.Openat2(dirfd, name, how)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err == unix.ENOSYS {
			return -1, errdefs.Unavailable("this kernel has no openat2(2) (Linux 5.6+ or a recent gVisor is required)")
		}
		return fd, err
	}
	return -1, unix.EAGAIN
}

// open resolves the request path p (validated) in the root.
func (r *fsRoot) open(p string, flags uint64, mode uint32) (int, error) {
	return openat2(r.fd, rel(p), flags, mode, inRoot)
}

// openParent resolves the directory holding p's last component and returns
// an O_PATH fd of it and the component, so that the caller can act on the
// component without following it. For "/" it returns the root and ".".
func (r *fsRoot) openParent(p string) (dirfd int, base string, err error) {
	if p == "/" {
		fd, err := unix.Dup(r.fd)
		return fd, ".", err
	}
	dir, base := path.Split(p)
	fd, err := r.open(path.Clean(dir), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, "", err
	}
	return fd, base, nil
}

// owner is who created files and directories belong to.
type owner struct {
	uid, gid int
	root     bool // may keep setuid and setgid bits
}

// mkdirAll creates the directory rel (a clean relative path, "." for the
// base itself) below base, resolving each prefix with resolve, and returns
// an O_PATH fd of it. Created directories belong to o; the final one gets
// mode, the parents 0755. A final directory that already exists is left as
// it is. created reports
// whether the final directory was made here.
func mkdirAll(base int, rel string, resolve uint64, o owner, mode uint32) (fd int, created bool, err error) {
	fd, err = openat2(base, rel, unix.O_PATH|unix.O_DIRECTORY, 0, resolve)
	if err == nil || rel == "." || !errors.Is(err, unix.ENOENT) {
		return fd, false, err
	}
	parts := strings.Split(rel, "/")
	cur, err := unix.Dup(base)
	if err != nil {
		return -1, false, err
	}
	for i, name := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		next, err := openat2(base, prefix, unix.O_PATH|unix.O_DIRECTORY, 0, resolve)
		created = false
		if errors.Is(err, unix.ENOENT) {
			err = unix.Mkdirat(cur, name, 0o700)
			if err == nil {
				created = true
				m := uint32(0o755)
				if i == len(parts)-1 {
					m = mode
				}
				err = chownChmodAt(cur, name, o, m)
			} else if errors.Is(err, unix.EEXIST) {
				err = nil // raced with another mkdir; reopen below
			}
			if err == nil {
				next, err = openat2(base, prefix, unix.O_PATH|unix.O_DIRECTORY, 0, resolve)
			}
		}
		closeFd(cur)
		if err != nil {
			return -1, false, err
		}
		cur = next
	}
	return cur, created, nil
}

// chownChmodAt sets the owner and mode of dir/name, a directory or regular
// file just created here, without following a symlink put in its place.
func chownChmodAt(dir int, name string, o owner, mode uint32) error {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	defer closeFd(fd)
	return fchownChmod(fd, o, mode)
}

// fchownChmod sets owner then mode (chown clears setuid bits, so mode
// comes second). setuid and setgid are dropped unless o is root.
func fchownChmod(fd int, o owner, mode uint32) error {
	if err := unix.Fchown(fd, o.uid, o.gid); err != nil {
		return err
	}
	return unix.Fchmod(fd, o.mode(mode))
}

func (o owner) mode(m uint32) uint32 {
	m &= 0o7777
	if !o.root {
		m &^= unix.S_ISUID | unix.S_ISGID
	}
	return m
}

// fsError turns an errno from acting on p into a classed error with a
// message for users. Errors that already have a class pass through.
func fsError(p string, err error) error {
	var de *errdefs.Error
	if errors.As(err, &de) {
		return err
	}
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("%s: %w", p, err)
	}
	switch errno {
	case unix.ENOENT:
		return errdefs.NotFound("%s: no such file or directory", p)
	case unix.ENOTDIR:
		return errdefs.NotFound("%s: a parent of it is not a directory", p)
	case unix.EEXIST:
		return errdefs.New(errdefs.ErrAlreadyExists, "%s already exists", p)
	case unix.EISDIR:
		return errdefs.Precondition("%s is a directory", p)
	case unix.ENOTEMPTY:
		return errdefs.Precondition("%s: directory not empty; pass recursive=true", p)
	case unix.ELOOP:
		return errdefs.Invalid("%s: resolving it crosses a magic link (/proc/*/fd, /proc/*/root, /proc/*/exe, ...) "+
			"or too many symlinks; magic links are refused, use the real path", p)
	case unix.EXDEV:
		return errdefs.Invalid("%s: resolving it would leave the directory through a symlink", p)
	case unix.ENAMETOOLONG:
		return errdefs.Invalid("%s: name too long after resolving symlinks", p)
	case unix.ENOSPC, unix.EDQUOT:
		return diskFull(p, errno)
	case unix.EACCES, unix.EPERM, unix.EROFS, unix.ETXTBSY:
		return errdefs.New(errdefs.ErrPermissionDenied, "%s: %v", p, errno)
	case unix.EBUSY:
		return errdefs.Precondition("%s is busy (a mount point?); unmount it first", p)
	case unix.EINVAL:
		return errdefs.Invalid("%s: %v", p, errno)
	}
	return fmt.Errorf("%w: %s: %v", errdefs.ErrInternal, p, errno)
}
