package storage

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/errdefs"
)

// Layer tars: a layer directory of the pool (a template's rootfs, a build
// layer's or a snapshot's overlay upper) as an uncompressed tar stream,
// for a registry. Entries come in lexical order, depth first, so the same
// tree gives the same bytes (and the same digest); owners are the
// sandbox's own uids (the pool's uid base taken off); modes, mtimes (to
// the nanosecond, in PAX records; never atimes), hard links (a TypeLink
// to the first name of the inode), symlinks and user.* extended
// attributes are kept.
//
// Two formats. tarOCI is an OCI image layer: overlay's whiteouts (a 0/0
// character device NAME) become ".wh.NAME" and an opaque directory
// (user.overlay.opaque=y) gets a ".wh..wh..opq" entry, so any OCI tool
// understands it; overlay's own xattrs are not written. tarOverlay keeps
// the upper directory in overlay's own format, for agentbox's snapshots:
// whiteouts stay 0/0 character devices and user.overlay.opaque stays an
// xattr (see layerApplier.overlay for the other end).
type tarFormat int

const (
	tarOCI tarFormat = iota
	tarOverlay
)

const (
	xattrPAX      = "SCHILY.xattr."
	overlayOpaque = "user.overlay.opaque"
)

// writeLayerTar writes directory dir as a tar stream to w and returns the
// number of entries. Fifos, sockets and devices other than whiteouts are
// left out.
func writeLayerTar(ctx context.Context, w io.Writer, dir string, uidBase, uidCount int, format tarFormat) (int64, error) {
	tw := tar.NewWriter(w)
	links := map[inodeKey]string{}
	buf := make([]byte, 1<<20)
	var entries int64
	root := filepath.Clean(dir)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if path == root {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		uid, gid := int(st.Uid)-uidBase, int(st.Gid)-uidBase
		if uid < 0 || gid < 0 || uid >= uidCount || gid >= uidCount {
			return errdefs.Precondition("%s is owned by host uid %d:%d, outside the sandboxes' range %d-%d", rel, st.Uid, st.Gid, uidBase, uidBase+uidCount-1)
		}
		hdr := &tar.Header{
			Name:    rel,
			Mode:    int64(st.Mode & 0o7777),
			Uid:     uid,
			Gid:     gid,
			ModTime: time.Unix(st.Mtim.Unix()),
			Format:  tar.FormatPAX,
		}
		xattrs, err := userXattrs(path, st.Mode&unix.S_IFMT)
		if err != nil {
			return fmt.Errorf("reading the xattrs of %s: %w", rel, err)
		}
		opaque := string(xattrs[overlayOpaque]) == "y"
		for k, v := range xattrs {
			if strings.HasPrefix(k, "user.overlay.") && (format == tarOCI || k != overlayOpaque) {
				continue
			}
			if hdr.PAXRecords == nil {
				hdr.PAXRecords = map[string]string{}
			}
			hdr.PAXRecords[xattrPAX+k] = string(v)
		}
		var file bool
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		case unix.S_IFREG:
			key := inodeKey{st.Dev, st.Ino}
			if first, ok := links[key]; ok && st.Nlink > 1 {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
				hdr.PAXRecords = nil
			} else {
				if st.Nlink > 1 {
					links[key] = rel
				}
				hdr.Typeflag, hdr.Size, file = tar.TypeReg, st.Size, true
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		case unix.S_IFCHR:
			if st.Rdev != 0 {
				return nil // only whiteouts are 0/0; a sandbox makes no other
			}
			if format == tarOCI {
				dirName, base := filepath.Split(rel)
				hdr = &tar.Header{Typeflag: tar.TypeReg, Name: dirName + whiteoutPrefix + base, ModTime: hdr.ModTime, Format: tar.FormatPAX}
			} else {
				hdr.Typeflag = tar.TypeChar
			}
		default:
			return nil // fifos, sockets, block devices
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		entries++
		if file {
			fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			f := os.NewFile(uintptr(fd), path)
			n, err := io.CopyBuffer(tw, ctxReader{ctx, io.LimitReader(f, st.Size)}, buf)
			f.Close()
			if err != nil {
				return fmt.Errorf("reading %s: %w", rel, err)
			}
			if n != st.Size {
				return fmt.Errorf("%s changed while it was read (%d of %d bytes)", rel, n, st.Size)
			}
		}
		if opaque && format == tarOCI && hdr.Typeflag == tar.TypeDir {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel + "/" + opaqueWhiteout, ModTime: hdr.ModTime, Format: tar.FormatPAX}); err != nil {
				return err
			}
			entries++
		}
		return nil
	})
	if err != nil {
		return entries, err
	}
	return entries, tw.Close()
}

// ctxReader reads r until ctx is done, then fails with ctx's error: a
// push or export called off (a background push giving way to a fork,
// docs/cluster.md) stops inside a large file, not at its end.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// userXattrs returns the user.* extended attributes of path (a regular
// file or directory; others have none a sandbox can set).
func userXattrs(path string, typ uint32) (map[string][]byte, error) {
	if typ != unix.S_IFREG && typ != unix.S_IFDIR {
		return nil, nil
	}
	n, err := unix.Llistxattr(path, nil)
	if err != nil || n <= 0 {
		if errors.Is(err, unix.ENOTSUP) {
			err = nil
		}
		return nil, err
	}
	list := make([]byte, n)
	if n, err = unix.Llistxattr(path, list); err != nil {
		return nil, err
	}
	var out map[string][]byte
	for _, name := range strings.Split(string(list[:n]), "\x00") {
		if !strings.HasPrefix(name, "user.") {
			continue
		}
		sz, err := unix.Lgetxattr(path, name, nil)
		if err != nil {
			continue
		}
		val := make([]byte, sz)
		if sz, err = unix.Lgetxattr(path, name, val); err != nil {
			continue
		}
		if out == nil {
			out = map[string][]byte{}
		}
		out[name] = val[:sz]
	}
	return out, nil
}
