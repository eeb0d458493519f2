package files

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/errdefs"
)

// headerAllowance is how many bytes of an uploaded tar stream, beyond the
// files' data (MaxArchiveBytes), may be headers and padding.
const headerAllowance = 512 << 20

// PUT /files/archive?path=P[&user=U]: extract a tar stream (plain or
// gzip-compressed) into the directory P, created if missing.
//
// Safety: entry names and hard link targets must be relative and free of
// ".." (the whole upload is refused otherwise); each entry's parent is
// resolved below P with RESOLVE_BENEATH, so a symlink, whether extracted
// earlier in the archive or already there, cannot redirect a write out of
// P; an existing non-directory at an entry's name is unlinked and the file
// created with O_EXCL|O_NOFOLLOW, so nothing is written through a link.
// Hard links may only point at files inside P. Devices, fifos and sockets
// are skipped. Everything belongs to the request's user; setuid and setgid
// bits are kept only when that user is root. Limits: MaxArchiveEntries
// entries and MaxArchiveBytes of file data (413). Entries extracted before
// a refused one stay.
func (s *service) putArchive(w http.ResponseWriter, r *http.Request) error {
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	o, err := s.owner(r.URL.Query().Get("user"))
	if err != nil {
		return err
	}
	dirfd, _, err := mkdirAll(s.root.fd, rel(p), inRoot, o, 0o755)
	if errors.Is(err, unix.ENOTDIR) {
		return errdefs.Precondition("%s exists and is not a directory; archives are extracted into a directory", p)
	}
	if err != nil {
		return fsError(p, err)
	}
	defer closeFd(dirfd)

	body, err := decompress(r)
	if err != nil {
		return err
	}
	bp := getBuf()
	defer putBuf(bp)
	x := &extractor{
		dir: dirfd, p: p, owner: o, buf: *bp,
		maxBytes: s.opts.MaxArchiveBytes, maxEntries: s.opts.MaxArchiveEntries,
	}
	raw := &limitedReader{r: body, n: s.opts.MaxArchiveBytes + headerAllowance}
	if err := x.extract(tar.NewReader(raw)); err != nil {
		if raw.n < 0 {
			err = tooLarge("archive for %s is larger than its limit of %d bytes of data plus headers", p, s.opts.MaxArchiveBytes)
		}
		return err
	}
	s.log.Debug("files: archive extracted", "path", p, "entries", x.entries, "bytes", x.bytes, "skipped", x.skipped)
	var st unix.Stat_t
	if err := unix.Fstat(dirfd, &st); err != nil {
		return fsError(p, err)
	}
	writeJSON(w, http.StatusOK, fileInfo(p, &st, ""))
	return nil
}

// decompress returns the request body, gunzipped when it says
// Content-Encoding: gzip or starts with gzip's magic.
func decompress(r *http.Request) (io.Reader, error) {
	br := bufio.NewReaderSize(r.Body, 64<<10)
	enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding")))
	magic, _ := br.Peek(2)
	if enc == "gzip" || enc == "x-gzip" || bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, errdefs.Invalid("reading gzip stream: %v", err)
		}
		return zr, nil
	}
	if enc != "" && enc != "identity" {
		return nil, errdefs.Invalid("Content-Encoding %q is not supported; send a tar, optionally gzip-compressed", enc)
	}
	return br, nil
}

// limitedReader fails once more than n bytes were read; n < 0 after that.
type limitedReader struct {
	r io.Reader
	n int64
}

var errTooLarge = errors.New("archive over its size limit")

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.n < 0 {
		return n, errTooLarge
	}
	return n, err
}

type extractor struct {
	dir   int    // O_PATH fd of P
	p     string // P, for messages
	owner owner
	buf   []byte

	maxBytes   int64
	maxEntries int
	entries    int
	bytes      int64
	skipped    int
	dirTimes   []dirTime
}

type dirTime struct {
	name  string
	mtime time.Time
}

func (x *extractor) extract(tr *tar.Reader) error {
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, errTooLarge) {
			return err
		}
		if err != nil {
			return errdefs.Invalid("reading archive for %s: %v; send a tar stream (optionally gzip-compressed)", x.p, err)
		}
		x.entries++
		if x.entries > x.maxEntries {
			return tooLarge("archive for %s has more than %d entries; split it", x.p, x.maxEntries)
		}
		if err := x.entry(h, tr); err != nil {
			return err
		}
	}
	// Directories last, so that extracting their content does not move
	// their mtimes again.
	for i := len(x.dirTimes) - 1; i >= 0; i-- {
		d := x.dirTimes[i]
		if err := x.setTimes(d.name, d.mtime); err != nil {
			return err
		}
	}
	return nil
}

// entryName validates a tar entry name (or hard link target) and returns
// it clean and relative to P; "." is P itself.
func entryName(name string) (string, error) {
	trimmed := strings.TrimRight(name, "/")
	switch {
	case name == "":
		return "", errdefs.Invalid("archive has an entry with an empty name")
	case strings.IndexByte(name, 0) >= 0:
		return "", errdefs.Invalid("archive entry %q contains a NUL byte", name)
	case strings.HasPrefix(name, "/"):
		return "", errdefs.Invalid("archive entry %q is an absolute path; entries must be relative", name)
	case len(name) > maxPathLen:
		return "", errdefs.Invalid("archive entry name is %d bytes long; the limit is %d", len(name), maxPathLen)
	}
	for _, c := range strings.Split(trimmed, "/") {
		if c == ".." {
			return "", errdefs.Invalid("archive entry %q contains \"..\"; entries must stay inside the target directory", name)
		}
		if len(c) > maxNameLen {
			return "", errdefs.Invalid("archive entry %.60q... has a component longer than %d bytes", name, maxNameLen)
		}
	}
	return path.Clean(trimmed), nil
}

func (x *extractor) entry(h *tar.Header, tr *tar.Reader) error {
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeGNUSparse, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
	case tar.TypeXGlobalHeader, tar.TypeXHeader:
		return nil
	default: // devices, fifos, sockets (none in tar), unknown types
		x.skipped++
		return nil
	}
	name, err := entryName(h.Name)
	if err != nil {
		return err
	}
	if name == "." {
		if h.Typeflag == tar.TypeDir {
			return nil // P itself
		}
		return errdefs.Invalid("archive entry %q names the target directory itself but is not a directory", h.Name)
	}
	parentRel, base := path.Split(name)
	parentRel = path.Clean(parentRel)
	parent, _, err := mkdirAll(x.dir, parentRel, beneath, x.owner, 0o755)
	if err != nil {
		return x.err(h.Name, err)
	}
	defer closeFd(parent)

	switch h.Typeflag {
	case tar.TypeDir:
		return x.dirEntry(parent, base, name, h)
	case tar.TypeSymlink:
		return x.symlinkEntry(parent, base, h)
	case tar.TypeLink:
		return x.linkEntry(parent, base, h)
	default:
		return x.fileEntry(parent, base, h, tr)
	}
}

// err turns an errno met while extracting entry into a classed error.
func (x *extractor) err(entry string, err error) error {
	if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP) {
		return errdefs.Invalid("archive entry %q would be written outside %s through a symlink or magic link; refused", entry, x.p)
	}
	if errors.Is(err, unix.ENOTDIR) {
		return errdefs.Invalid("archive entry %q: a parent of it is not a directory", entry)
	}
	return fsError(path.Join(x.p, entry), err)
}

// clear removes a non-directory at parent/base so that nothing is written
// through it; a directory is left (and reported).
func (x *extractor) clear(parent int, base string, keepDir bool) (isDir bool, err error) {
	var st unix.Stat_t
	err = unix.Fstatat(parent, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if keepDir {
			return true, nil
		}
		return true, unix.EISDIR
	}
	if err := unix.Unlinkat(parent, base, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return false, err
	}
	return false, nil
}

func (x *extractor) dirEntry(parent int, base, name string, h *tar.Header) error {
	isDir, err := x.clear(parent, base, true)
	if err != nil {
		return x.err(h.Name, err)
	}
	if !isDir {
		if err := unix.Mkdirat(parent, base, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return x.err(h.Name, err)
		}
	}
	fd, err := unix.Openat(parent, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return x.err(h.Name, err)
	}
	defer closeFd(fd)
	if err := fchownChmod(fd, x.owner, uint32(h.Mode)); err != nil {
		return x.err(h.Name, err)
	}
	x.dirTimes = append(x.dirTimes, dirTime{name, h.ModTime})
	return nil
}

func (x *extractor) symlinkEntry(parent int, base string, h *tar.Header) error {
	if h.Linkname == "" || strings.IndexByte(h.Linkname, 0) >= 0 || len(h.Linkname) > maxPathLen {
		return errdefs.Invalid("archive entry %q has an invalid symlink target", h.Name)
	}
	if _, err := x.clear(parent, base, false); err != nil {
		return x.err(h.Name, err)
	}
	if err := unix.Symlinkat(h.Linkname, parent, base); err != nil {
		return x.err(h.Name, err)
	}
	if err := unix.Fchownat(parent, base, x.owner.uid, x.owner.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return x.err(h.Name, err)
	}
	return x.setTimesAt(parent, base, h.ModTime)
}

// linkEntry makes a hard link to a file already inside P. The target's
// parent is resolved below P, and linkat does not follow its last
// component, so whatever gets linked is already inside P.
func (x *extractor) linkEntry(parent int, base string, h *tar.Header) error {
	target, err := entryName(h.Linkname)
	if err != nil {
		return errdefs.Invalid("archive entry %q is a hard link to %q, outside the target directory; refused", h.Name, h.Linkname)
	}
	if target == "." {
		return errdefs.Invalid("archive entry %q is a hard link to the target directory; refused", h.Name)
	}
	tdirRel, tbase := path.Split(target)
	tdir, err := openat2(x.dir, path.Clean(tdirRel), unix.O_PATH|unix.O_DIRECTORY, 0, beneath)
	if err != nil {
		return x.err(h.Linkname, err)
	}
	defer closeFd(tdir)
	var st unix.Stat_t
	if err := unix.Fstatat(tdir, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return errdefs.Invalid("archive entry %q is a hard link to %q, which is not in the archive before it", h.Name, h.Linkname)
		}
		return x.err(h.Linkname, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errdefs.Invalid("archive entry %q is a hard link to %q, which is not a regular file", h.Name, h.Linkname)
	}
	if _, err := x.clear(parent, base, false); err != nil {
		return x.err(h.Name, err)
	}
	if err := unix.Linkat(tdir, tbase, parent, base, 0); err != nil {
		return x.err(h.Name, err)
	}
	return nil
}

func (x *extractor) fileEntry(parent int, base string, h *tar.Header, tr *tar.Reader) error {
	if h.Size < 0 || h.Size > x.maxBytes-x.bytes {
		return tooLarge("archive for %s holds more than %d bytes of files (entry %q is %d bytes); split it",
			x.p, x.maxBytes, h.Name, h.Size)
	}
	x.bytes += h.Size
	if _, err := x.clear(parent, base, false); err != nil {
		return x.err(h.Name, err)
	}
	fd, err := unix.Openat(parent, base,
		unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return x.err(h.Name, err)
	}
	defer closeFd(fd)
	if _, rerr, werr := copyBufWith(fdWriter(fd), tr, x.buf); werr != nil {
		return x.err(h.Name, werr)
	} else if errors.Is(rerr, errTooLarge) {
		return rerr
	} else if rerr != nil {
		return errdefs.Invalid("reading archive entry %q: %v", h.Name, rerr)
	}
	if err := fchownChmod(fd, x.owner, uint32(h.Mode)); err != nil {
		return x.err(h.Name, err)
	}
	return x.setTimesAt(parent, base, h.ModTime)
}

// setTimes sets the mtime of the directory name (relative to P), resolved
// below P again since the archive may have changed the tree.
func (x *extractor) setTimes(name string, mtime time.Time) error {
	dirRel, base := path.Split(name)
	parent, err := openat2(x.dir, path.Clean(dirRel), unix.O_PATH|unix.O_DIRECTORY, 0, beneath)
	if err != nil {
		return x.err(name, err)
	}
	defer closeFd(parent)
	return x.setTimesAt(parent, base, mtime)
}

func (x *extractor) setTimesAt(parent int, base string, mtime time.Time) error {
	if mtime.IsZero() {
		return nil
	}
	ts := unix.Timespec{Sec: mtime.Unix(), Nsec: int64(mtime.Nanosecond())}
	err := unix.UtimesNanoAt(parent, base, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return x.err(base, err)
	}
	return nil
}

// fdWriter writes a raw fd.
type fdWriter int

func (w fdWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Write(int(w), p[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}
