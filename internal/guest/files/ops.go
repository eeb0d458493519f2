package files

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"sort"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/users"
)

// Limits of /files/list.
const (
	defaultListDepth = 1
	maxListDepth     = 10
	maxListEntries   = 100_000
)

// queryPath returns the validated path query parameter.
func queryPath(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if err := ValidatePath(p); err != nil {
		return "", err
	}
	return p, nil
}

// parseMode parses an octal mode such as "0644"; def when s is "".
func parseMode(s string, def uint32) (uint32, error) {
	if s == "" {
		return def, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, errdefs.Invalid("mode %q is not an octal mode between 0000 and 7777, e.g. 0644", s)
	}
	return uint32(m), nil
}

// owner resolves the user a request names (or the default user).
func (s *service) owner(name string) (owner, error) {
	if name == "" {
		name = s.opts.DefaultUser
	}
	u, err := users.LookupIn(s.root.path, name)
	if err != nil {
		return owner{}, err
	}
	return owner{uid: u.UID, gid: u.GID, root: u.UID == 0}, nil
}

func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return api.FileTypeFile
	case unix.S_IFDIR:
		return api.FileTypeDir
	case unix.S_IFLNK:
		return api.FileTypeSymlink
	}
	return api.FileTypeOther
}

func fileInfo(p string, st *unix.Stat_t, target string) api.FileInfo {
	name := path.Base(p)
	return api.FileInfo{
		Name:    name,
		Path:    p,
		Type:    fileType(st.Mode),
		Size:    st.Size,
		Mode:    fmt.Sprintf("%04o", st.Mode&0o7777),
		ModTime: time.Unix(st.Mtim.Unix()).UTC(),
		Target:  target,
		UID:     int(st.Uid),
		GID:     int(st.Gid),
	}
}

// statAt is lstat of dir/name, with the target of a symlink.
func statAt(dir int, name, p string) (api.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return api.FileInfo{}, err
	}
	var target string
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		t, err := readlinkat(dir, name)
		if err != nil {
			return api.FileInfo{}, err
		}
		target = t
	}
	return fileInfo(p, &st, target), nil
}

func readlinkat(dir int, name string) (string, error) {
	buf := make([]byte, maxPathLen+1)
	n, err := unix.Readlinkat(dir, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// GET /files?path=P
func (s *service) getFile(w http.ResponseWriter, r *http.Request) error {
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	fd, err := s.root.open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return fsError(p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fsError(p, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		return errdefs.Precondition("%s is a directory; use /files/list or /files/archive", p)
	default:
		return errdefs.Invalid("%s is not a regular file (it is a %s)", p, kindName(st.Mode))
	}
	if limit, err := downloadLimit(r); err != nil {
		return err
	} else if limit > 0 && st.Size > limit {
		return tooLarge("%s is %d bytes (%d on disk), over the download limit of %d bytes (the sandbox's disk limit unless max_download_mb says otherwise); compress or split it in the sandbox first",
			p, st.Size, st.Blocks*512, limit)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(st.Size, 10))
	w.Header().Set("Last-Modified", time.Unix(st.Mtim.Unix()).UTC().Format(http.TimeFormat))
	w.WriteHeader(http.StatusOK)
	// Exactly the size announced: a file that grows meanwhile is cut, one
	// that shrinks ends the response early (the client sees a short body).
	if _, rerr, werr := copyBuf(w, io.LimitReader(f, st.Size)); rerr != nil || werr != nil {
		s.log.Debug("files: download cut short", "path", p, "read_err", rerr, "write_err", werr)
	}
	return nil
}

// downloadLimit is a download's max_bytes query parameter, set by the
// daemon (docs/SECURITY.md): the most bytes the answer may hold; 0 or
// absent: no limit.
func downloadLimit(r *http.Request) (int64, error) {
	v := r.URL.Query().Get("max_bytes")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errdefs.Invalid("max_bytes must be a number of bytes, got %q", v)
	}
	return n, nil
}

func kindName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFDIR:
		return "directory"
	}
	return "regular file"
}

// copyBuf copies src to dst through a pooled buffer and reports read and
// write errors apart (a failed read is the client's, a failed write the
// disk's).
func copyBuf(dst io.Writer, src io.Reader) (n int64, rerr, werr error) {
	bp := getBuf()
	defer putBuf(bp)
	return copyBufWith(dst, src, *bp)
}

func copyBufWith(dst io.Writer, src io.Reader, buf []byte) (n int64, rerr, werr error) {
	for {
		nr, err := src.Read(buf)
		if nr > 0 {
			nw, err := dst.Write(buf[:nr])
			n += int64(nw)
			if err == nil && nw != nr {
				err = io.ErrShortWrite
			}
			if err != nil {
				return n, nil, err
			}
		}
		if err == io.EOF {
			return n, nil, nil
		}
		if err != nil {
			return n, err, nil
		}
	}
}

// PUT /files?path=P[&mode=0644][&user=U]
func (s *service) putFile(w http.ResponseWriter, r *http.Request) error {
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	if p == "/" {
		return errdefs.Invalid("cannot write to /; name a file")
	}
	q := r.URL.Query()
	mode, err := parseMode(q.Get("mode"), 0o644)
	if err != nil {
		return err
	}
	o, err := s.owner(q.Get("user"))
	if err != nil {
		return err
	}
	dirfd, _, err := mkdirAll(s.root.fd, rel(path.Dir(p)), inRoot, o, 0o755)
	if err != nil {
		return fsError(path.Dir(p), err)
	}
	closeFd(dirfd)

	created := true
	const wflags = unix.O_WRONLY | unix.O_NONBLOCK | unix.O_NOCTTY
	fd, err := s.root.open(p, wflags|unix.O_CREAT|unix.O_EXCL, 0o600)
	if errors.Is(err, unix.EEXIST) {
		// Exists (or is a symlink): write in place, following a symlink
		// inside the root like cp does.
		created = false
		fd, err = s.root.open(p, wflags|unix.O_TRUNC, 0)
		if errors.Is(err, unix.ENOENT) { // a dangling symlink: create its target
			created = true
			fd, err = s.root.open(p, wflags|unix.O_CREAT|unix.O_TRUNC, 0o600)
		}
	}
	if err != nil {
		return fsError(p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fsError(p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errdefs.Invalid("%s is a %s, not a regular file; delete it first", p, kindName(st.Mode))
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		return fsError(p, err)
	}
	if created || q.Has("user") {
		if err := unix.Fchown(fd, o.uid, o.gid); err != nil {
			return fsError(p, err)
		}
	}
	if created || q.Has("mode") || q.Has("user") {
		if !q.Has("mode") && !created {
			mode = st.Mode & 0o7777 // restore what chown may have cleared
		}
		if err := unix.Fchmod(fd, o.mode(mode)); err != nil {
			return fsError(p, err)
		}
	}
	if _, rerr, werr := copyBuf(f, r.Body); werr != nil {
		return fsError(p, werr)
	} else if rerr != nil {
		return errdefs.Invalid("reading the upload for %s: %v", p, rerr)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return fsError(p, err)
	}
	writeJSON(w, http.StatusOK, fileInfo(p, &st, ""))
	return nil
}

// DELETE /files?path=P[&recursive=true]
func (s *service) deleteFile(w http.ResponseWriter, r *http.Request) error {
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	if p == "/" {
		return errdefs.Invalid("refusing to delete /")
	}
	recursive := false
	if v := r.URL.Query().Get("recursive"); v != "" {
		if recursive, err = strconv.ParseBool(v); err != nil {
			return errdefs.Invalid("recursive must be true or false, got %q", v)
		}
	}
	dirfd, base, err := s.root.openParent(p)
	if err != nil {
		return fsError(p, err)
	}
	defer closeFd(dirfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fsError(p, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		err = unix.Unlinkat(dirfd, base, 0)
	case recursive:
		err = removeAll(dirfd, base)
	default:
		err = unix.Unlinkat(dirfd, base, unix.AT_REMOVEDIR)
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			return errdefs.Precondition("%s: directory not empty; pass recursive=true", p)
		}
	}
	if err != nil {
		return fsError(p, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// removeAll removes dir/name and everything below it. It never follows a
// symlink: directories are opened with O_NOFOLLOW relative to their
// parent's fd, so a link swapped in cannot redirect the walk.
func removeAll(dir int, name string) error {
	err := unix.Unlinkat(dir, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return unix.Unlinkat(dir, name, 0) // replaced by a file or link meanwhile
	}
	if err != nil {
		return err
	}
	var first error
	buf := make([]byte, 8<<10)
	var names []string
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			first = err
			break
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names[:0])
		for _, child := range names {
			if err := removeAll(fd, child); err != nil && first == nil {
				first = err
			}
		}
	}
	closeFd(fd)
	if first != nil {
		return first
	}
	err = unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// GET /files/stat?path=P
func (s *service) stat(w http.ResponseWriter, r *http.Request) error {
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	dirfd, base, err := s.root.openParent(p)
	if err != nil {
		return fsError(p, err)
	}
	defer closeFd(dirfd)
	fi, err := statAt(dirfd, base, p)
	if err != nil {
		return fsError(p, err)
	}
	writeJSON(w, http.StatusOK, fi)
	return nil
}

// GET /files/list?path=P[&depth=1]
func (s *service) list(w http.ResponseWriter, r *http.Request) error {
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	depth := defaultListDepth
	if v := r.URL.Query().Get("depth"); v != "" {
		depth, err = strconv.Atoi(v)
		if err != nil || depth < 1 || depth > maxListDepth {
			return errdefs.Invalid("depth must be between 1 and %d, got %q", maxListDepth, v)
		}
	}
	fd, err := s.root.open(p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if errors.Is(err, unix.ENOTDIR) {
		if _, serr := s.root.open(p, unix.O_PATH, 0); serr == nil {
			return errdefs.Precondition("%s is not a directory; use /files/stat", p)
		}
	}
	if err != nil {
		return fsError(p, err)
	}
	entries := []api.FileInfo{}
	err = listDir(fd, p, depth, &entries)
	closeFd(fd)
	if err != nil {
		return err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	writeJSON(w, http.StatusOK, api.ListFilesResponse{Entries: entries})
	return nil
}

// listDir appends the entries of the directory fd (at path p) and, while
// depth > 1, of its subdirectories (never through symlinks).
func listDir(fd int, p string, depth int, out *[]api.FileInfo) error {
	names, err := readNames(fd)
	if err != nil {
		return fsError(p, err)
	}
	for _, name := range names {
		cp := path.Join(p, name)
		fi, err := statAt(fd, name, cp)
		if errors.Is(err, unix.ENOENT) {
			continue // removed meanwhile
		}
		if err != nil {
			return fsError(cp, err)
		}
		if len(*out) >= maxListEntries {
			return errdefs.Exhausted("listing %s: more than %d entries; lower depth or list a subdirectory", p, maxListEntries)
		}
		*out = append(*out, fi)
		if fi.Type != api.FileTypeDir || depth <= 1 {
			continue
		}
		child, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			continue
		}
		if err != nil {
			return fsError(cp, err)
		}
		err = listDir(child, cp, depth-1, out)
		closeFd(child)
		if err != nil {
			return err
		}
	}
	return nil
}

// readNames returns the names in the directory fd, without . and ..,
// sorted.
func readNames(fd int) ([]string, error) {
	buf := make([]byte, 16<<10)
	var names []string
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	sort.Strings(names)
	return names, nil
}

// POST /files/mkdir
func (s *service) mkdir(w http.ResponseWriter, r *http.Request) error {
	var req api.MkdirRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if err := ValidatePath(req.Path); err != nil {
		return err
	}
	mode, err := parseMode(req.Mode, 0o755)
	if err != nil {
		return err
	}
	o, err := s.owner(req.User)
	if err != nil {
		return err
	}
	fd, _, err := mkdirAll(s.root.fd, rel(req.Path), inRoot, o, mode)
	if errors.Is(err, unix.ENOTDIR) {
		return errdefs.Precondition("%s or one of its parents exists and is not a directory", req.Path)
	}
	if err != nil {
		return fsError(req.Path, err)
	}
	defer closeFd(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fsError(req.Path, err)
	}
	writeJSON(w, http.StatusOK, fileInfo(req.Path, &st, ""))
	return nil
}

// POST /files/rename
func (s *service) rename(w http.ResponseWriter, r *http.Request) error {
	var req api.RenameRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	for _, p := range []string{req.From, req.To} {
		if err := ValidatePath(p); err != nil {
			return err
		}
		if p == "/" {
			return errdefs.Invalid("cannot rename / or rename onto /")
		}
	}
	fromDir, fromBase, err := s.root.openParent(req.From)
	if err != nil {
		return fsError(req.From, err)
	}
	defer closeFd(fromDir)
	toDir, toBase, err := s.root.openParent(req.To)
	if err != nil {
		return fsError(req.To, err)
	}
	defer closeFd(toDir)
	err = unix.Renameat(fromDir, fromBase, toDir, toBase)
	switch {
	case errors.Is(err, unix.EXDEV):
		return errdefs.Precondition("cannot rename %s to %s across mounts; copy and delete instead", req.From, req.To)
	case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		return errdefs.Precondition("%s is a non-empty directory; delete it first", req.To)
	case errors.Is(err, unix.EINVAL):
		return errdefs.Invalid("cannot move %s into itself (%s)", req.From, req.To)
	case errors.Is(err, unix.EISDIR), errors.Is(err, unix.ENOTDIR):
		return errdefs.Precondition("cannot rename %s to %s: one is a directory and the other is not", req.From, req.To)
	case err != nil:
		return fsError(req.From, err)
	}
	fi, err := statAt(toDir, toBase, req.To)
	if err != nil {
		return fsError(req.To, err)
	}
	writeJSON(w, http.StatusOK, fi)
	return nil
}
