package files

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/errdefs"
)

// GET /files/archive?path=P: a tar stream of P. For a directory the entry
// names are relative to P (P itself has no entry), for a file the one
// entry is P's base name, so that PUT /files/archive of the stream into a
// directory D recreates P's content under D. Regular files, directories,
// symlinks and hard links (as links to the first name seen) are archived
// with mode, mtime, uid and gid; fifos, sockets and devices are skipped.
// Symlinks below P are archived, never followed.
func (s *service) getArchive(w http.ResponseWriter, r *http.Request) error {
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	fd, err := s.root.open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return fsError(p, err)
	}
	defer closeFd(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fsError(p, err)
	}
	kind := st.Mode & unix.S_IFMT
	if kind != unix.S_IFDIR && kind != unix.S_IFREG {
		return errdefs.Invalid("%s is a %s; only files and directories can be archived", p, kindName(st.Mode))
	}

	if limit, err := downloadLimit(r); err != nil {
		return err
	} else if limit > 0 {
		// Sized before the first byte, so that an archive over the limit
		// is a clear 413 rather than a stream cut in the middle. A file's
		// apparent size counts, holes included: tar carries them as
		// zeros.
		var size int64
		if kind == unix.S_IFDIR {
			err = tarSizeDir(fd, &size, limit, map[devIno]bool{})
			// The walk read the directory; the archive reads it again.
			if _, serr := unix.Seek(fd, 0, io.SeekStart); err == nil && serr != nil {
				err = serr
			}
		} else {
			size = tarEntrySize(&st)
		}
		if errors.Is(err, errTooLarge) || size > limit {
			return tooLarge("the archive of %s is over the download limit of %d bytes (the sandbox's disk limit unless max_download_mb says otherwise; sparse files count at their full size); archive less, or compress in the sandbox first", p, limit)
		}
		if err != nil {
			return fsError(p, err)
		}
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	bp := getBuf()
	defer putBuf(bp)
	a := &archiver{tw: tar.NewWriter(w), buf: *bp, links: map[devIno]string{}}
	if kind == unix.S_IFDIR {
		err = a.addDir(fd, "")
	} else {
		err = a.addFile(fd, path.Base(p), &st)
	}
	if err == nil {
		err = a.tw.Close()
	}
	if err != nil {
		// The status is sent; cut the stream so the client sees a broken
		// archive rather than a short valid one.
		s.log.Warn("files: archive download failed", "path", p, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

type devIno struct{ dev, ino uint64 }

// tarEntryOverhead is what an entry costs in a tar stream besides its
// data, at most: its header and a PAX header for a long name.
const tarEntryOverhead = 1536

// tarEntrySize is the most bytes the entry of st takes in the archive.
func tarEntrySize(st *unix.Stat_t) int64 {
	n := int64(tarEntryOverhead)
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		n += (st.Size + 511) &^ 511
	}
	return n
}

// tarSizeDir adds to *size what the entries below the directory fd take
// in an archive (addDir's walk, hard links counted once), stopping with
// errTooLarge past limit.
func tarSizeDir(fd int, size *int64, limit int64, seen map[devIno]bool) error {
	names, err := readNames(fd)
	if err != nil {
		return err
	}
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // removed meanwhile
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1 {
			k := devIno{uint64(st.Dev), st.Ino}
			if seen[k] {
				*size += tarEntryOverhead
				continue
			}
			seen[k] = true
		}
		*size += tarEntrySize(&st)
		if *size > limit {
			return errTooLarge
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			child, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			err = tarSizeDir(child, size, limit, seen)
			closeFd(child)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

type archiver struct {
	tw    *tar.Writer
	buf   []byte
	links map[devIno]string
}

func header(name string, st *unix.Stat_t) *tar.Header {
	return &tar.Header{
		Name:    name,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, 0), // whole seconds, as ustar has them
	}
}

// addDir archives the entries of the directory fd under prefix.
func (a *archiver) addDir(fd int, prefix string) error {
	names, err := readNames(fd)
	if err != nil {
		return fmt.Errorf("reading directory %q: %w", prefix, err)
	}
	for _, name := range names {
		if err := a.addEntry(fd, name, prefix+name); err != nil {
			return err
		}
	}
	return nil
}

// addEntry archives dir/name as entry, without following a symlink.
func (a *archiver) addEntry(dir int, name, entry string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // removed meanwhile
		}
		return fmt.Errorf("stat %q: %w", entry, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		h := header(entry+"/", &st)
		h.Typeflag = tar.TypeDir
		if err := a.tw.WriteHeader(h); err != nil {
			return err
		}
		child, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("opening %q: %w", entry, err)
		}
		defer closeFd(child)
		return a.addDir(child, entry+"/")
	case unix.S_IFLNK:
		target, err := readlinkat(dir, name)
		if err != nil {
			return fmt.Errorf("readlink %q: %w", entry, err)
		}
		h := header(entry, &st)
		h.Typeflag, h.Linkname = tar.TypeSymlink, target
		return a.tw.WriteHeader(h)
	case unix.S_IFREG:
		fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("opening %q: %w", entry, err)
		}
		defer closeFd(fd)
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil // swapped for something else meanwhile
		}
		return a.addFile(fd, entry, &st)
	}
	return nil // fifos, sockets and devices are not archived
}

// addFile archives the open regular file fd, or a hard link to an entry
// already archived.
func (a *archiver) addFile(fd int, entry string, st *unix.Stat_t) error {
	h := header(entry, st)
	if st.Nlink > 1 {
		key := devIno{uint64(st.Dev), st.Ino}
		if first, ok := a.links[key]; ok {
			h.Typeflag, h.Linkname = tar.TypeLink, first
			return a.tw.WriteHeader(h)
		}
		a.links[key] = entry
	}
	h.Typeflag, h.Size = tar.TypeReg, st.Size
	if err := a.tw.WriteHeader(h); err != nil {
		return err
	}
	// Exactly Size bytes: cut a file that grew, pad one that shrank with
	// zeros, so that the archive stays well formed.
	src := io.LimitReader(io.MultiReader(fdReader(fd), zeros{}), st.Size)
	_, rerr, werr := copyBufWith(a.tw, src, a.buf)
	if rerr != nil {
		return fmt.Errorf("reading %q: %w", entry, rerr)
	}
	return werr
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// fdReader reads a raw fd.
type fdReader int

func (r fdReader) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(int(r), p)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 && len(p) > 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}
